"""The encoder-decoder Transformer ("Attention Is All You Need"), as one Keras model.

    logits = Linear(Decoder(target_ids, Encoder(source_ids)))

Masks are built inside from `pad_id`, so callers pass only token ids; explicit
`(batch, length)` boolean padding masks are accepted too (and are the only masks
when `pad_id` is None).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from mintransformer.core import checks
from mintransformer.layers.arguments import constructor_arguments
from mintransformer.layers.decoder import Decoder
from mintransformer.layers.encoder import Encoder

DEFAULT_DROPOUT_RATE = 0.1
# The constructor arguments that are the model's own; the others go to both stacks.
MODEL_SETTINGS = (
    "input_vocab_size",
    "target_vocab_size",
    "pe_input",
    "pe_target",
    "tie_embeddings",
    "share_embeddings",
)


def _check_pair(inputs) -> None:
    """Raises ValueError unless `inputs` (or their shapes) are a pair of sequences."""
    if not (
        isinstance(inputs, list | tuple)
        and len(inputs) == 2
        and all(isinstance(part, list | tuple) or hasattr(part, "shape") for part in inputs)
    ):
        raise ValueError(
            f"`inputs` must be a pair (source_ids, target_ids), got {type(inputs).__name__}."
        )


def _dropout_rate(dropout_rate, rate) -> float:
    """`dropout_rate`, or its other name `rate`; the default when neither is given."""
    if rate is None:
        return DEFAULT_DROPOUT_RATE if dropout_rate is None else dropout_rate
    if dropout_rate is not None and dropout_rate != rate:
        raise ValueError(
            f"`rate` is another name for `dropout_rate`: give one of them, got rate={rate!r} "
            f"and dropout_rate={dropout_rate!r}."
        )
    return rate


@keras.saving.register_keras_serializable(package="mintransformer")
class Transformer(keras.Model):
    """Encoder-decoder Transformer; also importable as `MinTransformer`.

    Args:
        num_layers: encoder layers and decoder layers (each).
        d_model: model width.
        num_heads: attention heads; must divide `d_model`.
        dff: feed-forward inner width.
        input_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size.
        pe_input: longest source sequence (size of its position table).
        pe_target: longest target sequence.
        dropout_rate: dropout on embeddings, sub-layer outputs and attention
            weights; 0.1 by default.
        pad_id: padding token id, used to build the masks; None: every token is
            real unless an explicit mask says otherwise.
        activation: feed-forward activation, "relu" (the paper) or "gelu".
        norm_first: pre-LN layers (plus a final LayerNorm) instead of post-LN.
        position: "sinusoidal" (the paper) or "learned".
        layer_norm_epsilon: LayerNorm epsilon.
        tie_embeddings: use the target embedding matrix as the output projection.
        share_embeddings: one token table for source and target (the vocabularies
            must be one, e.g. a joint BPE); with `tie_embeddings` the matrix
            serves three ways.
        attention_dropout_rate: dropout on the attention weights; None (the
            default) uses `dropout_rate`.
        embedding_init: token table initialiser, "uniform" (Keras' default) or
            "normal" (N(0, d_model^-0.5), the `pad_id` row zero).
        scale_embeddings: multiply token embeddings by sqrt(d_model) (the paper).
        use_bias: biases in the attention and feed-forward projections.
        rate: another name for `dropout_rate` (the one TensorFlow's Transformer
            tutorial uses); giving both with different values is an error.

    Call arguments:
        inputs: `(source_ids, target_ids)`, int `(batch, source_length)` and
            `(batch, target_length)`.
        source_mask, target_mask: optional bool `(batch, length)` padding masks,
            True at real tokens; by default `ids != pad_id`.
        training: enables dropout.
        return_attention_weights: also return a dict of every layer's weights,
            keyed "encoder_layer{i}", "decoder_layer{i}_self_attention" and
            "decoder_layer{i}_cross_attention".

    Returns:
        float32 logits `(batch, target_length, target_vocab_size)`, or `(logits, weights)`.
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        input_vocab_size,
        target_vocab_size,
        pe_input,
        pe_target,
        dropout_rate=None,
        pad_id=0,
        activation="relu",
        norm_first=False,
        position="sinusoidal",
        layer_norm_epsilon=1e-5,
        tie_embeddings=False,
        scale_embeddings=True,
        use_bias=True,
        rate=None,
        share_embeddings=False,
        attention_dropout_rate=None,
        embedding_init="uniform",
        **kwargs,
    ):
        # Every argument above, by name (`rate` folded into `dropout_rate`): the saved config.
        config = constructor_arguments(locals())
        config["dropout_rate"] = _dropout_rate(dropout_rate, config.pop("rate"))
        super().__init__(**kwargs)
        self.config = config
        shared = {k: v for k, v in config.items() if k not in MODEL_SETTINGS}
        if share_embeddings and input_vocab_size != target_vocab_size:
            raise ValueError(
                "`share_embeddings` needs one vocabulary for source and target, got "
                f"input_vocab_size={input_vocab_size} and target_vocab_size={target_vocab_size}."
            )
        self.encoder = Encoder(
            vocab_size=checks.positive_int(input_vocab_size, "input_vocab_size"),
            max_length=checks.positive_int(pe_input, "pe_input"),
            dtype=self.dtype_policy,
            name="encoder",
            **shared,
        )
        self.decoder = Decoder(
            vocab_size=checks.positive_int(target_vocab_size, "target_vocab_size"),
            max_length=checks.positive_int(pe_target, "pe_target"),
            token_embedding=self.encoder.embedding.token_embedding if share_embeddings else None,
            dtype=self.dtype_policy,
            name="decoder",
            **shared,
        )
        self.output_projection = (
            None
            if tie_embeddings
            else keras.layers.Dense(target_vocab_size, dtype=self.dtype_policy, name="logits")
        )

    def build(self, input_shape):
        _check_pair(input_shape)
        source_shape, target_shape = input_shape
        self.encoder.build(source_shape)
        self.decoder.build(target_shape)
        if self.output_projection is not None:
            self.output_projection.build(tuple(target_shape) + (self.config["d_model"],))
        self.built = True

    def encode(self, source_ids, source_mask=None, training=None, return_attention_weights=False):
        """Runs the encoder; returns `(encoder_output, source_mask[, weights])`."""
        out, source_mask = self.encoder.call_with_mask(
            source_ids,
            source_mask,
            "source_mask",
            training=training,
            return_attention_weights=return_attention_weights,
        )
        return (*out, source_mask) if return_attention_weights else (out, source_mask)

    def output_weights(self):
        """The output projection as `(kernel (d_model, vocab), bias (vocab,) or None)`."""
        if self.output_projection is None:
            return self.decoder.embedding.output_kernel(), None
        return self.output_projection.kernel, self.output_projection.bias

    def output_table(self):
        """The output projection as `(table (vocab, d_model), bias (vocab,) or None)`, one
        row per token: what the training loss takes. Tied, it is the target embedding
        table itself, so the loss's gradient reaches the table with no transpose."""
        if self.output_projection is None:
            return self.decoder.embedding.token_table(), None
        return ops.transpose(self.output_projection.kernel), self.output_projection.bias

    def project(self, hidden):
        """Decoder output `(batch, length, d_model)` -> float32 vocabulary logits.

        The product is float32 under mixed precision too: bf16 logits keep 8 bits, and
        the searches' choices between close candidates would follow their rounding.
        """
        kernel, bias = self.output_weights()
        logits = ops.matmul(ops.cast(hidden, "float32"), ops.cast(kernel, "float32"))
        return logits if bias is None else logits + ops.cast(bias, "float32")

    def next_token_log_probs(self, hidden):
        """Decoder output at one position `(batch, 1, d_model)` -> float32 log-probabilities
        `(batch, target_vocab_size)` of the next token, what every search reads.

        The pad token is never a next token: its log-probability is set to -inf after the
        softmax, so the others keep their values (as transformers' `bad_words_ids` ban
        does, which beam scores then match). A model whose pad row was never trained, as
        in converted OPUS-MT checkpoints, may score the pad high.
        """
        log_probs = ops.log_softmax(self.project(hidden)[:, 0], axis=-1)
        pad_id = self.config["pad_id"]
        if pad_id is None:
            return log_probs
        is_pad = np.arange(log_probs.shape[-1]) == pad_id  # a constant of the graph
        return ops.where(is_pad, float("-inf"), log_probs)

    def hidden_states(
        self,
        inputs,
        training=None,
        source_mask=None,
        target_mask=None,
        return_attention_weights=False,
    ):
        """The decoder's output `(batch, target_length, d_model)`, before the projection.

        Arguments as `call`; returns `(hidden, weights)` with `return_attention_weights`.
        """
        _check_pair(inputs)
        source_ids, target_ids = inputs
        checks.rank(source_ids, 2, "source_ids", "(batch, length)")
        checks.rank(target_ids, 2, "target_ids", "(batch, length)")
        encoded = self.encode(source_ids, source_mask, training, return_attention_weights)
        decoded = self.decoder(
            target_ids,
            encoded[0],
            source_padding_mask=encoded[-1],
            target_padding_mask=self.decoder.padding_mask(target_ids, target_mask, "target_mask"),
            training=training,
            return_attention_weights=return_attention_weights,
        )
        if not return_attention_weights:
            return decoded
        hidden, decoder_weights = decoded
        return hidden, {**encoded[1], **decoder_weights}

    def call(
        self,
        inputs,
        training=None,
        source_mask=None,
        target_mask=None,
        return_attention_weights=False,
    ):
        out = self.hidden_states(
            inputs, training, source_mask, target_mask, return_attention_weights
        )
        if not return_attention_weights:
            return self.project(out)
        return self.project(out[0]), out[1]

    def get_config(self):
        return {**super().get_config(), **self.config}


MinTransformer = Transformer
