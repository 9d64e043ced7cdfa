"""Exporting a trained run to ONNX graphs that run without Keras (`mintransformer.onnx_engine`).

A translation run becomes two graphs, the split of encoder-decoder exports with a
key/value cache: the encoder runs once per batch of sources, the decoder step once
per target position, and the search loop (greedy or beam) stays in Python:

    encoder.onnx       source_ids int32 (batch, source_length)
                       -> cross float32 (layers, 2, batch, heads, source_length, depth),
                          source_mask bool (batch, source_length)
    decoder_step.onnx  tokens int32 (n,), index int32 (), cache float32
                       (layers, 2, n, heads, max_length, depth), cross, source_mask
                       -> log_probs float32 (n, vocab), cache (the slot `index` written)

A language-model run becomes one graph, the decoder step without cross-attention:

    lm_step.onnx       tokens int32 (n,), index int32 (), cache -> logits float32
                       (n, vocab), cache

A classification run becomes one graph, token_ids int32 (batch, length) -> class
probabilities float32 (batch, classes). Every batch and length dimension is dynamic.

The graphs are traced with TensorFlow and converted by tf2onnx, so exporting needs
the TensorFlow backend; `int8` then quantizes the weights of the matrix products with
onnxruntime's dynamic quantization.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import keras
import numpy as np
from keras import ops

from mintransformer.config import ClassificationConfig, TranslationConfig
from mintransformer.export_folder import DEFAULT_FOLDER, GRAPHS, ExportFolder, run_identity
from mintransformer.loading import load_trained
from mintransformer.run import RunDirectory

OPSET = 17
INSTALL_HINT = "pip install mintransformer[export]"


def _import_converters():
    """tensorflow, tf2onnx and onnxruntime's quantization, or a one-line install hint."""
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"exporting to ONNX needs the TensorFlow backend, but Keras runs on "
            f"{keras.backend.backend()}: run with KERAS_BACKEND=tensorflow "
            "(or --backend tensorflow)"
        )
    try:
        import tensorflow as tf
        import tf2onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"exporting to ONNX needs tf2onnx, onnx and onnxruntime ({err.name} is missing): "
            f"{INSTALL_HINT}"
        ) from err
    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    return tf, tf2onnx, (quantize_dynamic, QuantType)


def _erfc_as_one_minus_erf(ctx, node, name, args):
    """tf2onnx handler: TensorFlow's exact GELU uses Erfc, which ONNX lacks; 1 - Erf(x)."""
    erf = ctx.make_node("Erf", [node.input[0]])
    one = ctx.make_const(f"{name}/one", np.array(1.0, "float32"))
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])
    return node


def translation_graphs(model) -> dict:
    """The encoder and decoder-step functions of a `Transformer`, over stacked states.

    Returns:
        `{file name: (function, [(input name, shape, dtype)])}`, the layouts in the
        module docstring.
    """
    layout = cache_layout(model)
    layers = layout["layers"]
    state = (layers, 2, None, layout["heads"], None, layout["depth"])

    def encode(source_ids):
        memory, source_mask = model.encode(source_ids)
        cross = model.decoder.cross_key_values(memory)
        return ops.stack([ops.stack(key_value) for key_value in cross]), source_mask

    def step(tokens, index, cache, cross, source_mask):
        layer_caches = tuple(cache[i] for i in range(layers))
        cross_key_values = [(cross[i, 0], cross[i, 1]) for i in range(layers)]
        hidden, layer_caches = model.decoder.step(
            tokens[:, None], index, layer_caches, cross_key_values, source_mask
        )
        log_probs = ops.log_softmax(model.project(hidden)[:, 0], axis=-1)
        return log_probs, ops.stack(layer_caches)

    encoder_file, step_file = GRAPHS["translation"]
    return {
        encoder_file: (encode, [("source_ids", (None, None), "int32")]),
        step_file: (
            step,
            [
                ("tokens", (None,), "int32"),
                ("index", (), "int32"),
                ("cache", state, "float32"),
                ("cross", state, "float32"),
                ("source_mask", (None, None), "bool"),
            ],
        ),
    }


def language_model_graphs(model) -> dict:
    """The step function of a `LanguageModel`, as `translation_graphs`."""
    layout = cache_layout(model)
    layers = layout["layers"]
    state = (layers, 2, None, layout["heads"], None, layout["depth"])

    def step(tokens, index, cache):
        logits, layer_caches = model.step(
            tokens[:, None], index, tuple(cache[i] for i in range(layers))
        )
        return logits, ops.stack(layer_caches)

    inputs = [("tokens", (None,), "int32"), ("index", (), "int32"), ("cache", state, "float32")]
    return {GRAPHS["language_model"][0]: (step, inputs)}


def classification_graphs(model) -> dict:
    """The probabilities function of a `TextClassifier`, as `translation_graphs`."""

    def probabilities(token_ids):
        return ops.softmax(model(token_ids, training=False), axis=-1)

    return {GRAPHS["classification"][0]: (probabilities, [("token_ids", (None, None), "int32")])}


def cache_layout(model) -> dict:
    """The step graph's cache layout of a `Transformer` or `LanguageModel`: layers, heads,
    depth."""
    attention = model.decoder.blocks[0].self_attention
    return {
        "layers": len(model.decoder.blocks),
        "heads": attention.num_heads,
        "depth": attention.depth,
    }


def write_graphs(graphs: dict, folder: str | Path, int8: bool = False) -> None:
    """Traces and converts `translation_graphs` or `classification_graphs` into `folder`.

    Args:
        graphs: `{file name: (function, inputs)}`.
        folder: an existing folder; its graph files are replaced.
        int8: quantize the weights to int8 (smaller and faster, slightly different scores).
    """
    tf, tf2onnx, (quantize_dynamic, quant_type) = _import_converters()
    for name, (function, inputs) in graphs.items():
        signature = [tf.TensorSpec(shape, dtype, name=n) for n, shape, dtype in inputs]
        path = Path(folder) / name
        traced = path.with_suffix(".fp32.onnx") if int8 else path
        tf2onnx.convert.from_function(
            tf.function(function),
            input_signature=signature,
            opset=OPSET,
            custom_op_handlers={"Erfc": (_erfc_as_one_minus_erf, [])},
            output_path=str(traced),
        )
        if int8:
            quantize_dynamic(traced, path, weight_type=quant_type.QInt8)
            traced.unlink()


def export_run(run_path: str | Path, output: str | Path | None = None, int8: bool = False) -> Path:
    """Exports a finished run (translation, classification or language model) to a folder.

    Args:
        run_path: the run directory (its final weights, config and tokenizer).
        output: the export folder (default: `RUN/onnx`); files in it are replaced.
        int8: quantize the weights to int8 (smaller and faster, slightly different scores).

    Returns:
        The export folder's path.

    Raises:
        ValueError: on another backend than TensorFlow, or a bf16 model.
        ModuleNotFoundError: without the `export` extra.
        FileNotFoundError: for a run without final weights.
    """
    _import_converters()
    run = RunDirectory.open(run_path)
    model, _, config = load_trained(run.path)
    if model.compute_dtype != "float32":
        raise ValueError(f"{run.path} computes in {model.compute_dtype}: export needs float32")
    folder = ExportFolder(output if output is not None else run.path / DEFAULT_FOLDER)
    folder.path.mkdir(parents=True, exist_ok=True)
    manifest = {"task": config.task, "int8": bool(int8), "run": run_identity(run)}
    if isinstance(config, ClassificationConfig):
        write_graphs(classification_graphs(model), folder.path, int8)
    else:
        graphs = (
            translation_graphs if isinstance(config, TranslationConfig) else language_model_graphs
        )
        write_graphs(graphs(model), folder.path, int8)
        manifest["cache"] = cache_layout(model)
    shutil.copyfile(run.config_path, folder.config_path)
    shutil.copyfile(run.tokenizer_path, folder.tokenizer_path)
    folder.write_manifest(manifest)
    return folder.path
