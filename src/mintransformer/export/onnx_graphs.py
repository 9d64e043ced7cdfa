"""Exporting a trained run to ONNX graphs that run without Keras (`export.onnx_engine`).

A translation run becomes two graphs, the split of encoder-decoder exports with a
key/value cache: the encoder runs once per batch of sources, the decoder step once
per target position, and the search loop (greedy or beam) stays in Python:

    encoder.onnx       source_ids int32 (batch, source_length)
                       -> cross float32 (layers, 2, batch, heads, source_length, depth),
                          source_mask bool (batch, source_length)
    decoder_step.onnx  tokens int32 (n,), index int32 (), cross float32 (layers, 2,
                       n, heads, source_length, depth), source_mask, cache_1 ... cache_L
                       float32 (2, n, heads, max_length, depth), one per decoder layer
                       -> log_probs float32 (n, vocab), new_key_values float32
                          (layers, 2, n, heads, depth): slot `index` of each cache

The step graph returns only the new slot, not the whole cache: the caller writes it
into its arrays in place, so no step copies the cache in or out of the graph.

A language-model run becomes one graph, the decoder step without cross-attention:

    lm_step.onnx       tokens int32 (n,), index int32 (), cache_1 ... cache_L
                       -> logits float32 (n, vocab), new_key_values

A classification run becomes one graph, token_ids int32 (batch, length) -> class
probabilities float32 (batch, classes). Every batch and length dimension is dynamic.

The graphs are traced with TensorFlow and converted by tf2onnx, so exporting needs
the TensorFlow backend; `int8` then quantizes the weights of the matrix products with
onnxruntime's dynamic quantization.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from pathlib import Path

import keras
from keras import ops

from mintransformer.config import ClassificationConfig, TranslationConfig
from mintransformer.core.files import replacing_folder
from mintransformer.export.folder import (
    DEFAULT_FOLDER,
    EXPORT_FILES,
    GRAPHS,
    ExportFolder,
    file_digest,
    run_identity,
)
from mintransformer.export.graph_passes import (
    batch_preserving_reshapes,
    dense_matmul_as_one_op,
    drop_unused,
    erfc_as_one_minus_erf,
    fuse_layer_norms,
    select_as_where,
)
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import load_trained

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
        import onnx
        import tensorflow as tf
        import tf2onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"exporting to ONNX needs tf2onnx, onnx and onnxruntime ({err.name} is missing): "
            f"{INSTALL_HINT}"
        ) from err
    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    return tf, tf2onnx, onnx, (quantize_dynamic, QuantType)


def translation_graphs(model) -> dict:
    """The encoder and decoder-step functions of a `Transformer`.

    Returns:
        `{file name: (function, [(input name, shape, dtype)])}`, the layouts in the
        module docstring.
    """
    layout = cache_layout(model)
    layers = layout["layers"]
    stacked = (layers, 2, None, layout["heads"], None, layout["depth"])

    def encode(source_ids):
        memory, source_mask = model.encode(source_ids)
        cross = model.decoder.cross_key_values(memory)
        return ops.stack([ops.stack(key_value) for key_value in cross]), source_mask

    def step(tokens, index, cross, source_mask, *layer_caches):
        cross_key_values = [(cross[i, 0], cross[i, 1]) for i in range(layers)]
        hidden, new_slots = model.decoder.step_new_slots(
            tokens[:, None], index, layer_caches, cross_key_values, source_mask
        )
        return model.next_token_log_probs(hidden), stacked_slots(new_slots)

    encoder_file, step_file = GRAPHS["translation"]
    step_inputs = [
        ("tokens", (None,), "int32"),
        ("index", (), "int32"),
        ("cross", stacked, "float32"),
        ("source_mask", (None, None), "bool"),
    ]
    return {
        encoder_file: (encode, [("source_ids", (None, None), "int32")]),
        step_file: (step, step_inputs + cache_inputs(layout)),
    }


def language_model_graphs(model) -> dict:
    """The step function of a `LanguageModel`, as `translation_graphs`."""
    layout = cache_layout(model)

    def step(tokens, index, *layer_caches):
        hidden, new_slots = model.decoder.step_new_slots(tokens[:, None], index, layer_caches)
        return model.project(hidden)[:, 0], stacked_slots(new_slots)

    inputs = [("tokens", (None,), "int32"), ("index", (), "int32"), *cache_inputs(layout)]
    return {GRAPHS["language_model"][0]: (step, inputs)}


def cache_inputs(layout: dict) -> list[tuple]:
    """The step graph's per-layer cache inputs `cache_1 ... cache_L`, `(2, n, heads,
    max_length, depth)` each."""
    shape = (2, None, layout["heads"], None, layout["depth"])
    return [(f"cache_{i}", shape, "float32") for i in range(1, layout["layers"] + 1)]


def stacked_slots(new_slots):
    """The layers' new slots `(2, n, heads, 1, depth)` as one `(layers, 2, n, heads, depth)`."""
    return ops.stack([slot[:, :, :, 0] for slot in new_slots])


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
    tf, tf2onnx, onnx, (quantize_dynamic, quant_type) = _import_converters()
    for name, (function, inputs) in graphs.items():
        signature = [tf.TensorSpec(shape, dtype, name=n) for n, shape, dtype in inputs]
        path = Path(folder) / name
        traced = path.with_suffix(".fp32.onnx") if int8 else path
        with dense_matmul_as_one_op(tf):
            tf2onnx.convert.from_function(
                tf.function(function),
                input_signature=signature,
                opset=OPSET,
                custom_op_handlers={
                    "Erfc": (erfc_as_one_minus_erf, []),
                    "SelectV2": (select_as_where, []),
                },
                output_path=str(traced),
            )
        graph_file = onnx.load(traced)
        fuse_layer_norms(graph_file.graph)
        batch_preserving_reshapes(graph_file.graph)
        drop_unused(graph_file.graph)
        onnx.save(graph_file, traced)
        if int8:
            with _without_preprocessing_advice():
                quantize_dynamic(traced, path, weight_type=quant_type.QInt8)
            traced.unlink()


@contextlib.contextmanager
def _without_preprocessing_advice():
    """Within the block, drops onnxruntime's log line that advises running its shape
    pre-processing before quantizing: dynamic quantization of our graphs' weights needs
    none, and the line asks the user to do something they need not."""

    def keep(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def export_run(run_path: str | Path, output: str | Path | None = None, int8: bool = False) -> Path:
    """Exports a finished run (translation, classification or language model) to a folder.

    Args:
        run_path: the run directory (its final weights, config and tokenizer).
        output: the export folder (default: `RUN/onnx`). An earlier export there is
            replaced once the new one is complete; a folder holding anything else is refused.
        int8: quantize the weights to int8 (smaller and faster, slightly different scores).

    Returns:
        The export folder's path.

    Raises:
        ValueError: on another backend than TensorFlow.
        ModuleNotFoundError: without the `export` extra.
        FileNotFoundError: for a run without final weights.
        FileExistsError: `output` holds files that are not an export's (a run, say).
    """
    _import_converters()
    run = RunDirectory.open(run_path)
    output = Path(output) if output is not None else run.path / DEFAULT_FOLDER
    with replacing_folder(output, EXPORT_FILES, "an ONNX export") as staging:
        # The graphs compute in float32 whatever precision the run trained in, or this
        # machine would choose: a bf16 run keeps its weights in float32.
        model, _, config = load_trained(run, mixed_precision=False)
        folder = ExportFolder(staging)
        manifest = {"task": config.task, "int8": bool(int8), "run": run_identity(run)}
        manifest["tokenizer_sha256"] = file_digest(run.tokenizer_path)
        if isinstance(config, ClassificationConfig):
            write_graphs(classification_graphs(model), folder.path, int8)
        else:
            graphs = (
                translation_graphs
                if isinstance(config, TranslationConfig)
                else language_model_graphs
            )
            write_graphs(graphs(model), folder.path, int8)
            manifest["cache"] = cache_layout(model)
        shutil.copyfile(run.config_path, folder.config_path)
        shutil.copyfile(run.tokenizer_path, folder.tokenizer_path)
        folder.write_manifest(manifest)
    return output
