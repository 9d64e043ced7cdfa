"""Exporting a trained run to ONNX graphs that run without Keras (`mintransformer.onnx_engine`).

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


def _erfc_as_one_minus_erf(ctx, node, name, args):
    """tf2onnx handler: TensorFlow's exact GELU uses Erfc, which ONNX lacks; 1 - Erf(x)."""
    erf = ctx.make_node("Erf", [node.input[0]])
    one = ctx.make_const(f"{name}/one", np.array(1.0, "float32"))
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])
    return node


@contextlib.contextmanager
def _dense_matmul_as_one_op(tf):
    """While tracing: Keras' TensorFlow `matmul` of `(batch, length, d)` by a `(d, units)`
    kernel (every Dense layer) as one `tf.matmul`, which ONNX MatMul broadcasts, instead
    of `tf.tensordot`. tensordot flattens to 2-D and back, which tf2onnx writes as
    reshapes computed from the dynamic input shape: eight nodes per Dense layer, not one.
    """
    from keras.src.backend.tensorflow import numpy as backend_numpy

    keras_matmul = backend_numpy.matmul

    def matmul(x1, x2):
        x1, x2 = tf.convert_to_tensor(x1), tf.convert_to_tensor(x2)
        if (
            (x1.shape.rank or 0) > 2
            and x2.shape.rank == 2
            and x1.dtype == x2.dtype
            and x1.dtype.is_floating
        ):
            return tf.matmul(x1, x2)
        return keras_matmul(x1, x2)

    backend_numpy.matmul = matmul
    try:
        yield
    finally:
        backend_numpy.matmul = keras_matmul


def _select_as_where(ctx, node, name, args):
    """tf2onnx handler: `tf.where` as one ONNX Where.

    tf2onnx writes a float select as cast(c) * x + cast(not c) * y (six nodes; NaN
    where an unselected value is infinite), on the grounds that onnxruntime's Where was
    slow. Where in onnxruntime 1.32 is not, and per-node overhead dominates a decoder
    step at small batches.
    """
    from tf2onnx.onnx_opset.controlflow import Select

    node.set_attr("handles_nan", True)
    Select.version_9(ctx, node)
    return node


def fuse_layer_norms(graph) -> int:
    """Rewrites, in place, each LayerNorm that tf2onnx spells out in thirteen nodes (mean,
    squared difference, variance, rsqrt, scale and shift) as one ONNX LayerNormalization.

    Keras' TensorFlow LayerNorm reaches tf2onnx as `tf.nn.moments` arithmetic, which it
    converts op by op; a decoder step then spends a fifth of its nodes on normalising.
    A chain that does not match exactly is left as it is; the (1, ..., 1, d) scale and
    shift initializers it replaces are left for `drop_unused`.

    Args:
        graph: an `onnx.GraphProto` (opset >= 17).

    Returns:
        How many were fused.
    """
    from onnx import helper, numpy_helper

    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):  # a node reading x twice (x * x) counts once
            consumers.setdefault(name, []).append(node)
    constants = {tensor.name: tensor for tensor in graph.initializer}

    def sole(output, op_type):
        users = consumers.get(output, [])
        return users[0] if len(users) == 1 and users[0].op_type == op_type else None

    def other(node, name):
        inputs = list(node.input)
        return inputs[1 - inputs.index(name)] if name in inputs and len(inputs) == 2 else None

    def vector(name):
        """The initializer `name` if its shape is (1, ..., 1, d), else None."""
        tensor = constants.get(name)
        if tensor is None or not tensor.dims or any(d != 1 for d in tensor.dims[:-1]):
            return None
        return tensor

    def flat(tensor):
        """A (d,) copy of a (1, ..., 1, d) initializer (added once, constants are shared);
        its name."""
        name = f"{tensor.name}/flat"
        if name not in constants:
            values = numpy_helper.to_array(tensor).reshape(-1)
            constants[name] = numpy_helper.from_array(values, name)
            graph.initializer.append(constants[name])
        return name

    fused, dead = 0, []
    for mean in list(graph.node):
        if mean.op_type != "GlobalAveragePool":
            continue
        x, m = mean.input[0], mean.output[0]
        users = {node.op_type: node for node in consumers.get(m, [])}
        sub, neg = users.get("Sub"), users.get("Neg")
        if len(consumers[m]) != 2 or sub is None or neg is None or list(sub.input) != [x, m]:
            continue
        chain = _walk(
            sub.output[0],
            ("Mul", "GlobalAveragePool", "Add", "Sqrt", "Reciprocal", "Mul"),
            sole,
            lambda node: node.output[0],
        )
        if chain is None or list(chain[0].input) != [sub.output[0]] * 2:
            continue
        square, variance, add_eps, sqrt, reciprocal, scale = chain
        epsilon = constants.get(other(add_eps, variance.output[0]) or "")
        gamma = vector(other(scale, reciprocal.output[0]) or "")
        scaled = {other(node, scale.output[0]): node for node in consumers[scale.output[0]]}
        times_x, times_neg = scaled.get(x), scaled.get(neg.output[0])
        shift = times_neg and sole(times_neg.output[0], "Add")
        beta = shift and vector(other(shift, times_neg.output[0]) or "")
        out = times_x and sole(times_x.output[0], "Add")
        if None in (epsilon, gamma, beta, out) or other(out, times_x.output[0]) != shift.output[0]:
            continue
        dead += [mean, sub, neg, *chain, times_x, times_neg, shift, out]
        graph.node.insert(
            list(graph.node).index(out),
            helper.make_node(
                "LayerNormalization",
                [x, flat(gamma), flat(beta)],
                list(out.output),
                name=f"{mean.name}/LayerNormalization",
                axis=-1,
                epsilon=float(numpy_helper.to_array(epsilon)),
            ),
        )
        fused += 1
    for node in dead:
        graph.node.remove(node)
    return fused


def batch_preserving_reshapes(graph) -> int:
    """Rewrites, in place, each reshape to `(batch of its input, c1, c2, ...)` as a reshape
    to the constant `(0, c1, c2, ...)` (ONNX: 0 keeps that dimension); the shape
    arithmetic it no longer reads is left for `drop_unused`.

    `split_heads` and `merge_heads` reshape to `(ops.shape(x)[0], -1, ...)`, which tf2onnx
    writes as Shape -> Cast -> Slice -> Concat -> Cast: five nodes per reshape, about a
    quarter of a decoder step's. Matched only where the batch is read from the reshaped
    tensor itself or from the tensor it transposes with the batch axis first.

    Args:
        graph: an `onnx.GraphProto`.

    Returns:
        How many reshapes were rewritten.
    """
    from onnx import numpy_helper

    producers = {name: node for node in graph.node for name in node.output}
    constants = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}

    def made_by(name, op_type):
        node = producers.get(name)
        return node if node is not None and node.op_type == op_type else None

    def batch_source(reshaped):
        """The tensors whose Shape()[0] is the batch of `reshaped`."""
        sources = {reshaped}
        transpose = made_by(reshaped, "Transpose")
        if transpose is not None:
            perm = [a.ints for a in transpose.attribute if a.name == "perm"]
            if perm and perm[0][0] == 0:
                sources.add(transpose.input[0])
        return sources

    rewritten = 0
    for reshape in graph.node:
        if reshape.op_type != "Reshape":
            continue
        chain = _walk(
            reshape.input[1],
            ("Cast", "Concat", "Slice", "Cast", "Shape"),
            made_by,
            lambda node: node.input[0],
        )
        if chain is None:
            continue
        _, concat, first, _, shape = chain
        if shape.attribute or shape.input[0] not in batch_source(reshape.input[0]):
            continue
        bounds = [constants.get(name) for name in first.input[1:]]
        rest = [constants.get(name) for name in concat.input[1:]]
        if any(b is None for b in bounds + rest) or [b.tolist() for b in bounds[:2]] != [[0], [1]]:
            continue
        if any(b.tolist() not in ([0], [1]) for b in bounds[2:]):  # axes [0], steps [1]
            continue
        target = [0] + [int(value) for part in rest for value in part.reshape(-1)]
        name = f"{reshape.name}/batch_preserving_shape"
        graph.initializer.append(numpy_helper.from_array(np.array(target, "int64"), name))
        reshape.input[1] = name
        rewritten += 1
    return rewritten


def _walk(name: str, op_types: tuple, find, onward) -> list | None:
    """The nodes of a chain `op_types` long starting at tensor `name`, or None.

    `find(name, op_type)` gives the next node (or None); `onward(node)` the tensor to
    continue from: the first output going forward, the first input going back.
    """
    nodes = []
    for op_type in op_types:
        node = find(name, op_type)
        if node is None:
            return None
        nodes.append(node)
        name = onward(node)
    return nodes


def drop_unused(graph) -> None:
    """Removes nodes whose outputs nothing reads (repeatedly), and unused initializers."""
    outputs = {output.name for output in graph.output}
    while True:
        read = outputs | {name for node in graph.node for name in node.input}
        unused = [node for node in graph.node if not read.intersection(node.output)]
        if not unused:
            break
        for node in unused:
            graph.node.remove(node)
    read = outputs | {name for node in graph.node for name in node.input}
    for tensor in [t for t in graph.initializer if t.name not in read]:
        graph.initializer.remove(tensor)


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
        log_probs = ops.log_softmax(model.project(hidden)[:, 0], axis=-1)
        return log_probs, stacked_slots(new_slots)

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
        with _dense_matmul_as_one_op(tf):
            tf2onnx.convert.from_function(
                tf.function(function),
                input_signature=signature,
                opset=OPSET,
                custom_op_handlers={
                    "Erfc": (_erfc_as_one_minus_erf, []),
                    "SelectV2": (_select_as_where, []),
                },
                output_path=str(traced),
            )
        graph_file = onnx.load(traced)
        fuse_layer_norms(graph_file.graph)
        batch_preserving_reshapes(graph_file.graph)
        drop_unused(graph_file.graph)
        onnx.save(graph_file, traced)
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
