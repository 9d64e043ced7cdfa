"""A Hugging Face Marian (OPUS-MT) or Pegasus folder -> a run directory of ours.

    FOLDER/config.json, model.safetensors or pytorch_model.bin, and a tokenizer:
    source.spm + target.spm + vocab.json [+ target_vocab.json] (Marian), or the
    tokenizer.json of our own export (`hf_export`)
        -> RUN/config.json, tokenizer.json, model.npz

The run is complete: `translate`, `evaluate`, `attention` and `export` use it like a
trained one. Tying is read from the tensors themselves: source and target tables
are shared when they are equal, and the output projection is tied when it equals
the target table and `final_logits_bias` is zero (otherwise it becomes our untied
projection, holding the same values). Options our layers lack are refused by name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mintransformer.config import TranslationConfig, make_config
from mintransformer.core.errors import CorruptFileError
from mintransformer.core.files import read_json_object
from mintransformer.data.sentencepiece_tokenizer import SentencePieceTokenizer
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.interop import mapping
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import build_for_tokenizer

# transformers' ACT2FN name -> ours.
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "swish": "silu",
    "silu": "silu",
}
# Settings of older Marian configs that our layers cannot follow, with the value we can.
FIXED = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": False,
    "static_position_embeddings": True,
    "scale_embedding": True,
    "add_bias_logits": False,
}


# The sizes a config.json must give: transformers' defaults for them are not OPUS-MT's.
REQUIRED = (
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "max_position_embeddings",
)


# Tensors a checkpoint may hold beside those `mapping.tensor_pairs` names, that repeat what
# the model holds another way: a shared table saved once more, the output projection of a
# tied model, the fixed sinusoidal positions.
REDUNDANT = frozenset(
    {
        "model.shared.weight",
        "lm_head.weight",
        "final_logits_bias",
        "model.encoder.embed_positions.weight",
        "model.decoder.embed_positions.weight",
    }
)


def refusal(hf: dict) -> str | None:
    """Why our layers cannot hold the model of `config.json` values `hf`, or None."""
    if hf.get("model_type") not in ("marian", "pegasus"):
        return f"model_type={hf.get('model_type')!r} (only marian and pegasus are imported)"
    missing = [name for name in REQUIRED if name not in hf]
    if missing:
        return f"config.json does not give {', '.join(missing)}"
    for name, value in FIXED.items():
        if name in hf and hf[name] != value:
            return f"{name}={hf[name]!r} (we support {value!r})"
    for a, b in (
        ("encoder_layers", "decoder_layers"),
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if hf[a] != hf[b]:
            return f"{a}={hf[a]} differs from {b}={hf[b]} (ours are equal)"
    if hf.get("activation_function") not in ACTIVATIONS:
        return f"activation_function={hf.get('activation_function')!r}"
    if hf["d_model"] % 2:
        return f"d_model={hf['d_model']} is odd"
    return None


def read_tensors(folder: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors, from model.safetensors or pytorch_model.bin.

    Raises:
        FileNotFoundError: the folder has neither file.
        CorruptFileError: the file cannot be read (truncated, or of another kind).
    """
    safetensors, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safetensors.is_file():
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            return load_file(str(safetensors))
        except SafetensorError as err:
            raise CorruptFileError(safetensors, f"is corrupt: {err}") from None
    if pickled.is_file():
        import pickle

        import torch

        try:
            state = torch.load(pickled, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError):
            # Loaded with weights_only: a file that would need to run code counts as damaged.
            raise CorruptFileError(
                pickled, "is corrupt, or not a state dict of tensors (torch.load refused it)"
            ) from None
        return {name: tensor.float().numpy() for name, tensor in state.items()}
    raise FileNotFoundError(f"{folder} has neither model.safetensors nor pytorch_model.bin")


def read_tokenizer(folder: Path, hf: dict):
    """The folder's tokenizer: Marian's SentencePiece files, or our exported BPE."""
    if (folder / "source.spm").is_file():
        settings = folder / "tokenizer_config.json"
        settings = read_json_object(settings) if settings.is_file() else {}
        separate = settings.get("separate_vocabs", False)
        names = ["source.spm", "target.spm", "vocab.json"]
        names += ["target_vocab.json"] if separate else []
        missing = [name for name in names if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{folder} has source.spm but not {', '.join(missing)}")
        for name in names[2:]:
            read_json_object(folder / name)  # names the file if it is damaged
        try:
            return SentencePieceTokenizer.from_files(
                *(folder / name for name in names), start_id=hf.get("decoder_start_token_id")
            )
        except (RuntimeError, ValueError) as err:
            raise CorruptFileError(
                folder, f"holds a tokenizer that cannot be read ({', '.join(names)}): {err}"
            ) from None
    if (folder / "tokenizer.json").is_file():
        tokenizer = Tokenizer.load(folder / "tokenizer.json")
        if hf.get("decoder_start_token_id") != tokenizer.start_id:
            raise ValueError("the tokenizer.json of this folder does not start with <s>")
        return tokenizer
    raise FileNotFoundError(f"{folder} has no source.spm/target.spm/vocab.json nor tokenizer.json")


def canonical_tensors(hf: dict, tensors: dict) -> tuple[dict, bool, bool]:
    """`(tensors named as mapping.tensor_pairs, share_embeddings, tie_embeddings)`."""

    def table(side: str) -> np.ndarray:
        # What transformers runs: the stack's own table; `model.shared` where a tied one
        # was saved once under that name.
        names = [f"model.{side}.embed_tokens.weight", "model.shared.weight"]
        for name in names:
            if name in tensors:
                return tensors[name]
        raise ValueError(f"the checkpoint has no tensor {names[0]!r} (nor {names[1]!r})")

    source, target = table("encoder"), table("decoder")
    if hf.get("tie_word_embeddings", True) or "lm_head.weight" not in tensors:
        head = target
    else:
        head = tensors["lm_head.weight"]
    bias = tensors.get("final_logits_bias", np.zeros((1, len(head)), "float32"))
    share = source.shape == target.shape and np.array_equal(source, target)
    tie = np.array_equal(head, target) and not np.any(bias)
    out = {**tensors, "model.encoder.embed_tokens.weight": source}
    out["model.decoder.embed_tokens.weight"] = target
    if not tie:
        out["lm_head.weight"], out["final_logits_bias"] = head, bias
    return out, bool(share), bool(tie)


def run_config(hf: dict, share: bool, tie: bool, vocab_size: int) -> TranslationConfig:
    """Our config of the imported model (training settings: the `base` preset's)."""
    return make_config(
        "translation",
        num_layers=hf["encoder_layers"],
        d_model=hf["d_model"],
        num_heads=hf["encoder_attention_heads"],
        dff=hf["encoder_ffn_dim"],
        dropout_rate=hf.get("dropout", 0.1),
        attention_dropout_rate=hf.get("attention_dropout", 0.0),
        norm_first=hf["model_type"] == "pegasus",
        tie_embeddings=tie,
        share_embeddings=share,
        max_length=hf["max_position_embeddings"],
        activation=ACTIVATIONS[hf["activation_function"]],
        layer_norm_epsilon=1e-5,
        vocab_size=vocab_size,
    )


def import_folder(folder: str | Path, run_dir: str | Path, overwrite: bool = False) -> Path:
    """Turns a Hugging Face Marian/Pegasus folder into a run directory; returns its path.

    Raises:
        ValueError: naming the setting, for a model our layers cannot hold, or naming
            tensors its config has no place for.
        FileNotFoundError: a file the folder needs is missing.
        CorruptFileError: a file is damaged.
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: not a Hugging Face model folder")
    hf = read_json_object(folder / "config.json")
    reason = refusal(hf)
    if reason:
        raise ValueError(f"{folder} cannot be imported: {reason}")
    tokenizer = read_tokenizer(folder, hf)
    tensors, share, tie = canonical_tensors(hf, read_tensors(folder))
    config = run_config(hf, share, tie, tokenizer.vocab_size)
    model = build_for_tokenizer(config, tokenizer)
    unused = [name for name in mapping.unused_tensors(model, tensors) if name not in REDUNDANT]
    if unused:
        shown = ", ".join(unused[:3]) + (", ..." if len(unused) > 3 else "")
        raise ValueError(
            f"{folder} cannot be imported: {len(unused)} of its tensors have no place in the "
            f"model its config.json describes ({shown}); the config and weights disagree"
        )
    mapping.import_tensors(model, tensors)
    run = RunDirectory.create(run_dir, config, overwrite=overwrite)
    tokenizer.save(run.tokenizer_path)
    checkpoints.save_variables(run.weights_path, model.weights)
    return run.path
