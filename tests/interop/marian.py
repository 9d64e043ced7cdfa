"""Marian checkpoint folders built from configs, with SentencePiece models trained here."""

from __future__ import annotations

import io
import json
from pathlib import Path

from mintransformer.data.numbers import english_words, french_words

NUMBERS = range(0, 5000, 3)
ENGLISH = [english_words(n) for n in NUMBERS] + ["A man is riding a bike.", "Hello, world!"]
FRENCH = [french_words(n) for n in NUMBERS] + ["Un homme fait du vélo.", "Bonjour le monde !"]


def train_spm(texts: list[str], vocab_size: int) -> bytes:
    """A unigram SentencePiece model trained on `texts`, as file bytes."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


def marian_vocab(spm: bytes, pad_last: bool = True, size: int | None = None) -> dict[str, int]:
    """Marian's vocab.json for a SentencePiece model: </s> 0, <unk> 1, the pieces, and
    <pad> last (or at 2); with `size`, filler pieces make it that large."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=spm)
    pieces = [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]
    special = ["</s>", "<unk>"] + ([] if pad_last else ["<pad>"])
    fill = 0 if size is None else size - len(special) - len(pieces) - pad_last
    ordered = special + pieces + [f"▁filler{i}" for i in range(fill)]
    ordered += ["<pad>"] if pad_last else []
    return {piece: i for i, piece in enumerate(ordered)}


def randomize(model, final_logits_bias: bool, seed: int) -> None:
    """Wide random weights (decoding without near-ties); `final_logits_bias` random with
    </s> favoured, so that translations end, or left zero."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name:
                continue
            if parameter.dim() == 1:
                centre = 1.0 if "layer_norm" in name and name.endswith("weight") else 0.0
                parameter.copy_(centre + 0.1 * torch.randn(parameter.shape, generator=generator))
            else:
                scale = 1.5 / parameter.shape[-1] ** 0.5
                parameter.copy_(scale * torch.randn(parameter.shape, generator=generator))
        if final_logits_bias:
            bias = torch.randn(model.final_logits_bias.shape, generator=generator)
            bias[0, model.config.eos_token_id] += 3.0
            # An untrained pad row scores high in converted checkpoints: without the
            # pad ban, the searches would emit it.
            bias[0, model.config.pad_token_id] += 6.0
            model.final_logits_bias.copy_(bias)


def make_marian(
    folder: Path,
    activation: str = "swish",
    separate_vocab: bool = False,
    tied: bool = True,
    final_logits_bias: bool = True,
    sizes: dict | None = None,
    spm_vocab: int = 100,
    vocab_size: int | None = None,
    seed: int = 0,
    safetensors: bool = True,
) -> Path:
    """A Marian checkpoint folder (config.json, weights, source.spm, target.spm,
    vocab.json [, target_vocab.json], tokenizer_config.json) with random weights;
    `vocab_size` pads the vocabulary to a published model's size."""
    from transformers import MarianConfig, MarianMTModel

    folder.mkdir(parents=True, exist_ok=True)
    source_spm = train_spm(ENGLISH + ([] if separate_vocab else FRENCH), spm_vocab)
    target_spm = train_spm(FRENCH, spm_vocab - 30) if separate_vocab else source_spm
    vocab = marian_vocab(source_spm, not separate_vocab, vocab_size)
    (folder / "source.spm").write_bytes(source_spm)
    (folder / "target.spm").write_bytes(target_spm)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    target_vocab = vocab
    if separate_vocab:
        target_vocab = marian_vocab(target_spm, pad_last=False)
        (folder / "target_vocab.json").write_text(json.dumps(target_vocab))
    from transformers import MarianTokenizer

    files = {name: str(folder / name) for name in ("source.spm", "target.spm", "vocab.json")}
    target_file = str(folder / "target_vocab.json") if separate_vocab else None
    MarianTokenizer(
        *files.values(), target_vocab_file=target_file, separate_vocabs=separate_vocab
    ).save_pretrained(folder)  # tokenizer_config.json, as published checkpoints have
    pad = vocab["<pad>"]
    sizes = sizes or dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
    )
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab),
        share_encoder_decoder_embeddings=not separate_vocab,
        tie_word_embeddings=tied,
        activation_function=activation,
        max_position_embeddings=512 if vocab_size else 64,
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        **sizes,
    )
    model = MarianMTModel(config).eval()
    randomize(model, final_logits_bias, seed)
    model.save_pretrained(folder)
    settings = json.loads((folder / "config.json").read_text())
    settings["bad_words_ids"] = [[pad]]  # as published OPUS-MT configs have it
    (folder / "config.json").write_text(json.dumps(settings))
    if not safetensors:  # transformers 5 writes safetensors only: the older format by hand
        import torch

        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    return folder


def marian_model(folder: Path):
    from transformers import MarianMTModel

    return MarianMTModel.from_pretrained(folder).eval()
