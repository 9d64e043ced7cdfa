"""Rewrites of the graphs tf2onnx writes: handlers for ops it converts badly, and passes
over the ONNX graph that fuse or drop what it spells out node by node.

Fewer nodes matter because a decoder step at small batches costs per node, not per
FLOP. Every pass works in place on an `onnx.GraphProto` and leaves its inputs and
outputs as they were.
"""

from __future__ import annotations

import contextlib

import numpy as np


def erfc_as_one_minus_erf(ctx, node, name, args):
    """tf2onnx handler: TensorFlow's exact GELU uses Erfc, which ONNX lacks; 1 - Erf(x)."""
    erf = ctx.make_node("Erf", [node.input[0]])
    one = ctx.make_const(f"{name}/one", np.array(1.0, "float32"))
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])
    return node


@contextlib.contextmanager
def dense_matmul_as_one_op(tf):
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


def select_as_where(ctx, node, name, args):
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
