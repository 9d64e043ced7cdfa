"""See the attention: real weights of a trained model, every layer and head, as heatmaps.

`attention_maps` runs the model once with teacher forcing on a text and its
translation (the model's own, by default) and returns every attention matrix
with the tokens that label its rows and columns. The plotting functions draw
them with matplotlib's Agg backend (no display needed) to PNG or SVG.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from mintransformer.core.files import atomic_write  # noqa: E402
from mintransformer.layers.positional import sinusoidal_table  # noqa: E402, F401

KINDS = {
    "encoder": "encoder_layer{}",
    "decoder": "decoder_layer{}_self_attention",
    "cross": "decoder_layer{}_cross_attention",
}


@dataclass
class AttentionMaps:
    """Every attention matrix of one sentence pair, with the labels of its axes.

    Attributes:
        source_tokens: subword strings of the source (</s> included).
        input_tokens: decoder inputs, `<s>` then the translation's subwords.
        output_tokens: what each decoder position predicts: the translation's
            subwords then `</s>`. Rows of decoder and cross-attention maps.
        translation: the translated text.
        weights: {"encoder_layer1": (heads, src, src),
            "decoder_layer1_self_attention": (heads, tgt, tgt),
            "decoder_layer1_cross_attention": (heads, tgt, src), ...}.
    """

    source_tokens: list[str]
    input_tokens: list[str]
    output_tokens: list[str]
    translation: str
    weights: dict[str, np.ndarray]

    def get(self, kind: str, layer: int) -> tuple[np.ndarray, list[str], list[str]]:
        """(weights (heads, rows, cols), row labels, column labels) of one layer."""
        if kind not in KINDS:
            raise ValueError(f"`kind` must be one of {sorted(KINDS)}, got {kind!r}.")
        key = KINDS[kind].format(layer)
        if key not in self.weights:
            layers = sum(name.startswith("encoder_layer") for name in self.weights)
            raise ValueError(f"`layer` must be in 1..{layers}, got {layer}.")
        rows = self.source_tokens if kind == "encoder" else self.output_tokens
        cols = self.output_tokens if kind == "decoder" else self.source_tokens
        if kind == "decoder":
            cols = self.input_tokens
        return self.weights[key], rows, cols


def attention_maps(translator, text: str, translation: str | None = None) -> AttentionMaps:
    """Runs `translator.model` on `text` and its translation and collects all attention.

    Args:
        translator: a `mintransformer.inference.translator.Translator`.
        text: the source sentence.
        translation: the target sentence to force; by default the model's greedy output.
    """
    if translator.model is None:
        from mintransformer.inference.engines import ONNX_HAS_NO_ATTENTION

        raise ValueError(ONNX_HAS_NO_ATTENTION)
    tokenizer = translator.tokenizer
    if translation is None:
        translation = translator.translate([text])[0]
    source = translator.encode_sources([text])[0]
    # <s> takes one decoder position; an unfinished translation may fill all of them.
    target = tokenizer.encode(translation)[: translator.model.decoder.max_length - 1]
    decoder_input = [tokenizer.start_id, *target]
    # Every decoder position is real, also an imported Marian model's start token (its pad).
    _, weights = translator.model(
        (np.array([source], "int32"), np.array([decoder_input], "int32")),
        target_mask=np.ones((1, len(decoder_input)), bool),
        return_attention_weights=True,
    )
    names = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
    return AttentionMaps(
        source_tokens=[names[i] for i in source],
        input_tokens=[names[i] for i in decoder_input],
        output_tokens=[names[i] for i in [*target, tokenizer.end_id]],
        translation=translation,
        weights={k: np.asarray(ops.convert_to_numpy(v))[0] for k, v in weights.items()},
    )


def _word(token: str) -> str:
    return token.replace("▁", "").strip("-")


def alignment_rate(maps_list, lexicon: dict[str, set[str]], layer: int) -> float:
    """How often the most-attended source token (mean over heads) translates the output token.

    Args:
        maps_list: `AttentionMaps` of several sentences.
        lexicon: output word -> the source words it may translate; output tokens whose
            word is not in it (and every `</s>`) are not counted.
        layer: the decoder layer whose cross-attention is read.

    Returns:
        the fraction of counted output tokens whose arg-max source word is in the lexicon entry.
    """
    hits = counted = 0
    for maps in maps_list:
        weights, rows, cols = maps.get("cross", layer)
        strongest = weights.mean(0).argmax(-1)
        for row, column in zip(rows, strongest, strict=True):
            if _word(row) in lexicon:
                counted += 1
                hits += _word(cols[column]) in lexicon[_word(row)]
    if not counted:
        raise ValueError("no output token of these sentences is in the lexicon")
    return hits / counted


def _heatmap(ax, matrix, rows, cols, title):
    ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=max(float(matrix.max()), 1e-9), aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_title(title, fontsize=9)


def plot_head(maps: AttentionMaps, kind: str, layer: int, head: int):
    """One head of one layer as a heatmap; returns the matplotlib Figure."""
    weights, rows, cols = maps.get(kind, layer)
    if not 0 <= head < len(weights):
        raise ValueError(f"`head` must be in 0..{len(weights) - 1}, got {head}.")
    fig, ax = plt.subplots(figsize=(1.5 + 0.35 * len(cols), 1.2 + 0.3 * len(rows)))
    _heatmap(ax, weights[head], rows, cols, f"{kind} attention, layer {layer}, head {head}")
    fig.tight_layout()
    return fig


def plot_layer(maps: AttentionMaps, kind: str, layer: int):
    """All heads of one layer in a grid; returns the Figure."""
    weights, rows, cols = maps.get(kind, layer)
    columns = min(4, len(weights))
    grid_rows = -(-len(weights) // columns)
    fig, axes = plt.subplots(
        grid_rows,
        columns,
        squeeze=False,
        figsize=(columns * (1.0 + 0.3 * len(cols)), grid_rows * (1.0 + 0.28 * len(rows))),
    )
    for head, ax in enumerate(axes.flat):
        if head < len(weights):
            _heatmap(ax, weights[head], rows, cols, f"head {head}")
        else:
            ax.axis("off")
    fig.suptitle(f"{kind} attention, layer {layer}")
    fig.tight_layout()
    return fig


def plot_alignment(maps: AttentionMaps, layer: int):
    """Cross-attention averaged over heads: which source token each output token reads."""
    weights, rows, cols = maps.get("cross", layer)
    fig, ax = plt.subplots(figsize=(1.5 + 0.4 * len(cols), 1.2 + 0.32 * len(rows)))
    _heatmap(ax, weights.mean(0), rows, cols, f"source -> translation, layer {layer} (mean)")
    ax.set_xlabel("source")
    ax.set_ylabel("generated")
    fig.tight_layout()
    return fig


def plot_positional_encoding(length: int = 64, d_model: int = 128):
    """The sinusoidal position table, positions down, dimensions across."""
    fig, ax = plt.subplots(figsize=(7, 4))
    image = ax.imshow(sinusoidal_table(length, d_model), cmap="RdBu", aspect="auto")
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(f"sinusoidal positional encoding ({length} x {d_model})")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def plot_attention(
    maps: AttentionMaps, kind: str, layer: int, head: int | None = None, mean: bool = False
):
    """One head (`head`), the heads' mean alignment (`mean`, cross-attention only), or
    every head of the layer in a grid."""
    if head is not None:
        return plot_head(maps, kind, layer, head)
    if mean:
        if kind != "cross":
            raise ValueError("--mean draws the cross-attention alignment: use --kind cross")
        return plot_alignment(maps, layer)
    return plot_layer(maps, kind, layer)


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Writes a Figure as PNG or SVG (by the file's suffix) and closes it."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"output must end in .png or .svg, got {path.name!r}.")
    atomic_write(path, lambda f: fig.savefig(f, dpi=dpi, format=path.suffix[1:].lower()))
    plt.close(fig)
    return path
