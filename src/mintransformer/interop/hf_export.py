"""A translation run -> a Hugging Face folder that `transformers` loads with no code of ours.

    AutoModelForSeq2SeqLM.from_pretrained(OUT), AutoTokenizer.from_pretrained(OUT)

Which `transformers` class expresses which of our models:

- post-LN (the paper; our `numbers` preset) -> `MarianMTModel`: post-LN blocks, no
  final LayerNorm, no LayerNorm on the embeddings, sinusoidal positions from 0,
  embeddings scaled by sqrt(d_model), biases everywhere, `final_logits_bias`.
- pre-LN with a final LayerNorm (our `base` preset) -> `PegasusForConditionalGeneration`:
  the same, with pre-LN blocks and a final LayerNorm after each stack.

Both fix LayerNorm's epsilon at 1e-5 (`nn.LayerNorm`'s default, and ours since runs
recorded it); a run with another epsilon (older runs had 1e-6) is exported with a
warning, as the one detail that changes the function (by far less than 1e-4 in the
logits, tests/interop).

Files: `config.json`, `generation_config.json`, `model.safetensors` (exactly the
tensors the class loads, each under its own name, tied ones included, so that
transformers reports none missing or unexpected), and the tokenizer: our BPE as
`tokenizer.json` (`PreTrainedTokenizerFast`, appending `</s>` like `Translator`), an
imported SentencePiece one as Marian's `source.spm`, `target.spm`, `vocab.json`.
"""

from __future__ import annotations

import copy
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np

from mintransformer.config import TranslationConfig
from mintransformer.core.files import replacing_folder
from mintransformer.data.sentencepiece_tokenizer import SentencePieceTokenizer
from mintransformer.interop import mapping
from mintransformer.runs.loading import load_trained

# The files an export writes (those of either tokenizer included): a folder holding only
# these is an earlier export, which a new one may replace.
HF_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "source.spm",
        "target.spm",
        "vocab.json",
        "target_vocab.json",
    }
)

# Our activation -> transformers' ACT2FN name.
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "silu": "swish"}
HF_LAYER_NORM_EPSILON = 1e-5


def refusal(config: TranslationConfig, model) -> str | None:
    """Why no `transformers` class expresses this run, or None."""
    settings = model.config
    if settings["position"] != "sinusoidal":
        return f"position={settings['position']!r}: Marian and Pegasus have sinusoidal positions"
    if not settings["scale_embeddings"]:
        return "scale_embeddings=False: Marian and Pegasus checkpoints scale embeddings"
    if not settings["use_bias"]:
        return "use_bias=False: Marian and Pegasus have biases on every projection"
    if config.activation not in ACTIVATIONS:
        return f"activation={config.activation!r} has no transformers equivalent"
    if config.d_model % 2:
        return f"d_model={config.d_model}: the position tables need an even width"
    same_vocab = settings["input_vocab_size"] == settings["target_vocab_size"]
    if config.norm_first and not same_vocab:
        return "norm_first with separate source and target vocabularies: Pegasus has one"
    return None


def hf_config(config: TranslationConfig, model, tokenizer):
    """The `MarianConfig` (post-LN) or `PegasusConfig` (pre-LN) of a run."""
    from transformers import MarianConfig, PegasusConfig

    settings = model.config
    tied = config.tie_embeddings and config.share_embeddings
    values = dict(
        vocab_size=settings["input_vocab_size"],
        d_model=config.d_model,
        encoder_layers=config.num_layers,
        decoder_layers=config.num_layers,
        encoder_attention_heads=config.num_heads,
        decoder_attention_heads=config.num_heads,
        encoder_ffn_dim=config.dff,
        decoder_ffn_dim=config.dff,
        activation_function=ACTIVATIONS[config.activation],
        max_position_embeddings=config.max_length,
        dropout=config.dropout_rate,
        attention_dropout=config.dropout_rate
        if config.attention_dropout_rate is None
        else config.attention_dropout_rate,
        activation_dropout=0.0,
        scale_embedding=True,
        pad_token_id=tokenizer.pad_id,
        eos_token_id=tokenizer.end_id,
        decoder_start_token_id=tokenizer.start_id,
        forced_eos_token_id=None,
    )
    if config.norm_first:
        return PegasusConfig(
            **values, tie_word_embeddings=tied, architectures=["PegasusForConditionalGeneration"]
        )
    return MarianConfig(
        **values,
        decoder_vocab_size=settings["target_vocab_size"],
        share_encoder_decoder_embeddings=config.share_embeddings,
        tie_word_embeddings=config.tie_embeddings,
        architectures=["MarianMTModel"],
    )


def all_tensors(model, hf) -> dict[str, np.ndarray]:
    """Every tensor the `transformers` model of config `hf` loads, and no other:
    `mapping.export_tensors`, the tied names written out (an output tied to the target
    table as `lm_head` with a zero `final_logits_bias`; `model.shared`, which Marian has
    only when its embeddings are shared), and Pegasus' sinusoidal tables, which it holds
    as parameters (Marian recomputes its own and saves none)."""
    tensors = mapping.export_tensors(model)
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.decoder.embed_tokens.weight"]
        vocab = tensors["lm_head.weight"].shape[0]
        tensors["final_logits_bias"] = np.zeros((1, vocab), "float32")
    if hf.model_type == "pegasus" or hf.share_encoder_decoder_embeddings:
        tensors["model.shared.weight"] = tensors["model.encoder.embed_tokens.weight"]
    if hf.model_type == "pegasus":
        table = mapping.hf_position_table(hf.max_position_embeddings, hf.d_model)
        for side in ("encoder", "decoder"):
            tensors[f"model.{side}.embed_positions.weight"] = table
    return {name: np.ascontiguousarray(array) for name, array in tensors.items()}


def save_tokenizer(tokenizer, out: Path) -> None:
    """Writes `tokenizer` in the form `AutoTokenizer` loads."""
    if isinstance(tokenizer, SentencePieceTokenizer):
        from transformers import MarianTokenizer

        with tempfile.TemporaryDirectory() as tmp:
            files = {"source_spm": "source.spm", "target_spm": "target.spm", "vocab": "vocab.json"}
            Path(tmp, "source.spm").write_bytes(tokenizer.source_model)
            Path(tmp, "target.spm").write_bytes(tokenizer.target_model)
            Path(tmp, "vocab.json").write_text(json.dumps(tokenizer.vocab))
            if tokenizer.target_vocab:
                Path(tmp, "target_vocab.json").write_text(json.dumps(tokenizer.target_vocab))
                files["target_vocab_file"] = "target_vocab.json"
            marian = MarianTokenizer(
                **{key: str(Path(tmp, name)) for key, name in files.items()},
                separate_vocabs=bool(tokenizer.target_vocab),
                pad_token=tokenizer.pad,
                eos_token=tokenizer.eos,
                unk_token=tokenizer.unk,
            )
            marian.save_pretrained(out)
        return
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    backend = copy.deepcopy(tokenizer._hf)
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {tokenizer.END}",
        pair=f"$A $B {tokenizer.END}",
        special_tokens=[(tokenizer.END, tokenizer.end_id)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokenizer.START,
        eos_token=tokenizer.END,
        pad_token=tokenizer.PAD,
        unk_token=tokenizer.UNK,
    )
    fast.save_pretrained(out)


def export_run(run_dir: str | Path, out: str | Path) -> Path:
    """Writes the Hugging Face folder of a translation run to `out`; returns `out`.

    An earlier export at `out` is replaced once the new one is complete.

    Raises:
        ValueError: naming the setting, for a run no `transformers` class expresses.
        FileExistsError: `out` holds files that are not an export's (a run, say).
    """
    from safetensors.numpy import save_file
    from transformers import GenerationConfig

    out = Path(out)
    with replacing_folder(out, HF_FILES, "a Hugging Face export") as staging:
        model, tokenizer, config = load_trained(run_dir, TranslationConfig, mixed_precision=False)
        reason = refusal(config, model)
        if reason:
            raise ValueError(f"{run_dir} cannot be exported to transformers: {reason}")
        if config.layer_norm_epsilon != HF_LAYER_NORM_EPSILON:
            warnings.warn(
                f"layer_norm_epsilon={config.layer_norm_epsilon:g}: transformers' Marian and "
                f"Pegasus use {HF_LAYER_NORM_EPSILON:g}, so the export's logits differ slightly",
                stacklevel=2,
            )
        hf = hf_config(config, model, tokenizer)
        hf.save_pretrained(staging)
        generation = GenerationConfig.from_model_config(hf)
        # As our searches: the pad never comes next, nor </s> first (`decoding.rules`).
        generation.bad_words_ids = [[tokenizer.pad_id]]
        generation.min_new_tokens = 1
        generation.save_pretrained(staging)
        save_file(
            all_tensors(model, hf), str(staging / "model.safetensors"), metadata={"format": "pt"}
        )
        save_tokenizer(tokenizer, staging)
    return out
