"""Our `Transformer`'s variables <-> the tensors of a `transformers` Marian/Pegasus model.

One table (`tensor_pairs`) names, for every variable, its Hugging Face name and how
the array changes on the way:

- Linear weights are stored `(out, in)` in PyTorch, our Dense kernels `(in, out)`.
- Our sinusoidal table interleaves sines and cosines (column 2i sin, 2i+1 cos);
  theirs puts all sines first, then all cosines, at the same frequencies. The two
  differ by one fixed permutation of the model dimension (`feature_permutation`).
  The positions are added to the residual stream, so every tensor that reads or
  writes the residual stream is permuted along its `d_model` axis: embeddings,
  the inputs of Q/K/V and of the first feed-forward layer, the outputs (and
  output biases) of the attention output and second feed-forward layer, every
  LayerNorm's scale and offset, and the output projection's input. LayerNorm
  does not care about the order of features, so the permuted model computes the
  same function exactly.
"""

from __future__ import annotations

import numpy as np
from keras import ops

# How an array changes from ours to theirs; `from_hf` inverts it.
KINDS = ("table", "in", "out", "vector", "bias", "logits_bias")


def feature_permutation(d_model: int) -> np.ndarray:
    """int `(d_model,)` p: their feature k is our feature p[k] (sines, then cosines)."""
    if d_model % 2:
        raise ValueError(f"d_model must be even to map the sinusoidal table, got {d_model}")
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def hf_position_table(positions: int, d_model: int) -> np.ndarray:
    """float32 `(positions, d_model)`: the sinusoidal table in transformers' layout (the
    sines of every frequency, then their cosines), computed as transformers computes it,
    in float64 and then rounded, so that a checkpoint holding it loads the same values."""
    angles = np.arange(positions)[:, None] / np.power(
        10000, 2 * (np.arange(d_model) // 2) / d_model
    )
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1).astype(
        "float32"
    )


def to_hf(array: np.ndarray, kind: str, perm: np.ndarray) -> np.ndarray:
    """Our array of `kind` -> theirs (`table` `(vocab, d)`, `in` kernel `(d, n)` ->
    `(n, d)`, `out` kernel `(n, d)` -> `(d, n)`, `vector` `(d,)`, `bias`, `logits_bias`
    `(vocab,)` -> `(1, vocab)`)."""
    if kind == "table":
        return array[:, perm]
    if kind == "in":
        return array[perm].T
    if kind == "out":
        return array[:, perm].T
    if kind == "vector":
        return array[perm]
    if kind == "logits_bias":
        return array[None]
    return array


def from_hf(array: np.ndarray, kind: str, perm: np.ndarray) -> np.ndarray:
    """The inverse of `to_hf`."""
    inverse = np.argsort(perm)
    if kind == "table":
        return array[:, inverse]
    if kind == "in":
        return array.T[inverse]
    if kind == "out":
        return array.T[:, inverse]
    if kind == "vector":
        return array[inverse]
    if kind == "logits_bias":
        return array.reshape(-1)
    return array


def _linear(prefix: str, dense, kind: str) -> list[tuple[str, object, str]]:
    bias_kind = "vector" if kind == "out" else "bias"
    return [(f"{prefix}.weight", dense.kernel, kind), (f"{prefix}.bias", dense.bias, bias_kind)]


def _attention(prefix: str, attention) -> list:
    return [
        *_linear(f"{prefix}.q_proj", attention.query_dense, "in"),
        *_linear(f"{prefix}.k_proj", attention.key_dense, "in"),
        *_linear(f"{prefix}.v_proj", attention.value_dense, "in"),
        *_linear(f"{prefix}.out_proj", attention.output_dense, "out"),
    ]


def _norm(prefix: str, norm) -> list:
    return [(f"{prefix}.weight", norm.gamma, "vector"), (f"{prefix}.bias", norm.beta, "vector")]


def _block(prefix: str, block, cross: bool) -> list:
    pairs = _attention(f"{prefix}.self_attn", block.self_attention)
    pairs += _norm(f"{prefix}.self_attn_layer_norm", block.self_attention_norm)
    if cross:
        pairs += _attention(f"{prefix}.encoder_attn", block.cross_attention)
        pairs += _norm(f"{prefix}.encoder_attn_layer_norm", block.cross_attention_norm)
    pairs += _linear(f"{prefix}.fc1", block.ffn.inner, "in")
    pairs += _linear(f"{prefix}.fc2", block.ffn.outer, "out")
    return pairs + _norm(f"{prefix}.final_layer_norm", block.ffn_norm)


def tensor_pairs(model) -> list[tuple[str, object, str]]:
    """`(hf_name, our variable, kind)` for every variable of a built `Transformer`.

    The token tables are named `model.encoder.embed_tokens.weight` and
    `model.decoder.embed_tokens.weight` (one variable twice when shared); an untied
    output projection is `lm_head.weight` and `final_logits_bias`; a pre-LN stack's
    final LayerNorm is `model.{encoder,decoder}.layer_norm` (Pegasus).
    """
    pairs = []
    for side, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        table = stack.embedding.token_embedding.embeddings
        pairs.append((f"model.{side}.embed_tokens.weight", table, "table"))
        for i, block in enumerate(stack.blocks):
            pairs += _block(f"model.{side}.layers.{i}", block, cross=side == "decoder")
        if stack.final_norm is not None:
            pairs += _norm(f"model.{side}.layer_norm", stack.final_norm)
    if model.output_projection is not None:
        pairs.append(("lm_head.weight", model.output_projection.kernel, "in"))
        pairs.append(("final_logits_bias", model.output_projection.bias, "logits_bias"))
    return pairs


def export_tensors(model) -> dict[str, np.ndarray]:
    """Every tensor of `model` under its Hugging Face name, float32 (`tensor_pairs`)."""
    perm = feature_permutation(model.config["d_model"])
    return {
        name: np.ascontiguousarray(to_hf(np.asarray(ops.convert_to_numpy(v)), kind, perm)).astype(
            "float32"
        )
        for name, v, kind in tensor_pairs(model)
    }


def import_tensors(model, tensors: dict[str, np.ndarray]) -> None:
    """Assigns `tensors` (Hugging Face names, as `tensor_pairs`) to `model`'s variables.

    Raises:
        ValueError: naming a missing tensor, or one whose shape differs from ours.
    """
    perm = feature_permutation(model.config["d_model"])
    for name, variable, kind in tensor_pairs(model):
        if name not in tensors:
            raise ValueError(f"the checkpoint has no tensor {name!r}")
        array = from_hf(np.asarray(tensors[name], "float32"), kind, perm)
        if tuple(array.shape) != tuple(variable.shape):
            raise ValueError(
                f"tensor {name!r} has shape {tuple(tensors[name].shape)}, which does not fit "
                f"our {variable.path} {tuple(variable.shape)}"
            )
        variable.assign(array)


def unused_tensors(model, tensors: dict[str, np.ndarray]) -> list[str]:
    """The names in `tensors` that no variable of `model` takes (`tensor_pairs`), sorted."""
    return sorted(set(tensors) - {name for name, _, _ in tensor_pairs(model)})
