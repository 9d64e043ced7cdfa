"""Benchmark: the matrix products of one training step alone, against whole train steps.

    python -m benchmarks.gemm_floor              # configs A and B of benchmarks.train_step, fp32

A training step of configs A and B (`benchmarks.train_step`) multiplies the same matrices
whoever writes it. This benchmark runs just those products, forward and backward, with the
step's shapes on random data (the "GEMM floor"), then times every implementation's whole fp32
step in the same process, and prints:

- `step / floor`: how much of a step is matrix products (1.0: nothing else);
- `best peer / floor`: the most any implementation doing these products could be faster
  than the best peer, if everything else in its step (embedding look-ups, softmax, masks,
  dropout, normalisation, the loss, Adam) cost nothing;
- the same bound once the attention maps are counted too: each attention call's masked
  softmax and the dropout of its weights, forward and backward, over every
  `(batch, heads, queries, keys)` map of the step, as one compiled TensorFlow function (our
  attention's `masked_softmax` and `backend.kernels.dropout` at the config's rate). Every
  implementation here materialises these maps; none has a fused attention kernel on the CPU;
- for config A, the same bound once the output layer's softmax is counted too: one softmax
  over the step's `(target positions, vocab)` logits, as one compiled TensorFlow function.
  Every implementation's loss and its gradient (softmax minus the smoothed labels) need at
  least that pass over the logits; config B's output is one unit, and has none to count.

Forward, a dense layer is X[M, K] @ W[K, N]; backward it adds dY @ W^T (M, N, K) and
X^T @ dY (K, M, N). Attention's two batched products per head (Q K^T, then weights @ V) are
counted the same way; config A's output projection covers every target position, padding
included, as every implementation here computes it. Config B is
counted twice: at its `key_dim` (ours and the Keras tutorial) and at d_model / heads, the
width keras-hub's `TransformerEncoder` fixes. The floor is the faster of TensorFlow and torch.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from benchmarks.common import (
    RESULTS_DIR,
    ClassifierShape,
    TranslationShape,
    format_table,
    machine,
    median,
    time_calls,
    time_in_turns,
    versions,
    write_json,
)

# (batch, M, K, N): batch independent products of [M, K] @ [K, N]; batch 0 is a plain one.
Product = tuple[int, int, int, int]
# (batch, heads, queries, keys): one attention call's weights.
AttentionMap = tuple[int, int, int, int]


def dense(tokens: int, units_in: int, units_out: int, count: int = 1) -> list[Product]:
    return [(0, tokens, units_in, units_out)] * count


def translation_products(shape: TranslationShape) -> list[Product]:
    """The forward products of one config-A-like step, as our `Transformer` computes them."""
    d, f, layers = shape.d_model, shape.dff, shape.num_layers
    sources, targets = shape.batch * shape.source_length, shape.batch * shape.target_length
    s, t, heads = shape.source_length, shape.target_length, shape.batch * shape.num_heads
    width = d // shape.num_heads
    encoder = dense(sources, d, d, 4) + dense(sources, d, f) + dense(sources, f, d)
    encoder += [(heads, s, width, s), (heads, s, s, width)]
    decoder = dense(targets, d, d, 6) + dense(sources, d, d, 2)
    decoder += dense(targets, d, f) + dense(targets, f, d)
    decoder += [(heads, t, width, t), (heads, t, t, width)]
    decoder += [(heads, t, width, s), (heads, t, s, width)]
    return layers * (encoder + decoder) + dense(targets, d, shape.target_vocab)


def classifier_products(shape: ClassifierShape, key_dim: int) -> list[Product]:
    """The forward products of one config-B-like step with heads of width `key_dim`."""
    tokens, d, width = shape.batch * shape.length, shape.d_model, shape.num_heads * key_dim
    heads, length = shape.batch * shape.num_heads, shape.length
    block = dense(tokens, d, width, 3) + dense(tokens, width, d)
    block += dense(tokens, d, shape.dff) + dense(tokens, shape.dff, d)
    block += [(heads, length, key_dim, length), (heads, length, length, key_dim)]
    head = dense(shape.batch, d, shape.hidden) + dense(shape.batch, shape.hidden, 1)
    return shape.num_layers * block + head


def attention_maps(shape: TranslationShape | ClassifierShape) -> list[AttentionMap]:
    """The attention weights one step computes: encoder, decoder and cross maps per layer."""
    if isinstance(shape, TranslationShape):
        s, t = shape.source_length, shape.target_length
        per_layer = [(s, s), (t, t), (t, s)]
    else:
        per_layer = [(shape.length, shape.length)]
    maps = [(shape.batch, shape.num_heads, queries, keys) for queries, keys in per_layer]
    return shape.num_layers * maps


def weights_backward(scores, keep, upstream, rate: float, seed_generator):
    """The gradient of `sum(dropout(softmax(masked scores)) * upstream)` over `scores`.

    One attention call's work on its map, forward and backward, without the products, as
    our `MultiHeadAttention` does it in training: `masked_softmax` with `keep` (bool,
    broadcastable to `scores`) as the mask, rows left for the output to zero.
    """
    import tensorflow as tf

    from mintransformer.backend.kernels import dropout
    from mintransformer.layers.attention import masked_softmax

    with tf.GradientTape() as tape:
        tape.watch(scores)
        weights = masked_softmax(scores, keep, zero_masked_rows=False)
        if rate > 0:
            weights = dropout(weights, rate, seed_generator)
        total = tf.reduce_sum(weights * upstream)
    return tape.gradient(total, scores)


def maps_runner(maps: list[AttentionMap], rate: float):
    """A compiled TensorFlow function doing every map's `weights_backward`; returns a runner."""
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(0)
    seed_generator = keras.random.SeedGenerator(0)
    work = []
    for batch, heads, queries, keys in maps:
        shape = (batch, heads, queries, keys)
        scores = tf.constant(rng.standard_normal(shape, dtype=np.float32))
        keep = tf.constant(rng.random((batch, 1, 1, keys)) > 0.1)  # about 10% padding
        upstream = tf.constant(rng.standard_normal(shape, dtype=np.float32))
        work.append((scores, keep, upstream))

    @tf.function
    def run_all():
        return [
            weights_backward(scores, keep, upstream, rate, seed_generator)[..., :1, :1]
            for scores, keep, upstream in work
        ]

    return lambda: [output.numpy() for output in run_all()]


def output_softmax_runner(rows: int, vocab: int):
    """A compiled TensorFlow function taking one softmax over `(rows, vocab)` logits."""
    import tensorflow as tf

    logits = tf.constant(np.random.default_rng(0).standard_normal((rows, vocab), np.float32))

    @tf.function
    def run():
        return tf.nn.softmax(logits)[:1, :1]

    return lambda: run().numpy()


def with_backward(products: list[Product]) -> list[tuple[Product, bool, bool]]:
    """Each product with its two gradient products: `(product, transpose_a, transpose_b)`.

    The gradient products are written as the transposed products TensorFlow's and torch's
    matmul gradients run, so no transpose is materialised.
    """
    steps = []
    for batch, m, k, n in products:
        steps.append(((batch, m, k, n), False, False))  # Y = X W
        steps.append(((batch, m, n, k), False, True))  # dX = dY W^T
        steps.append(((batch, k, m, n), True, False))  # dW = X^T dY
    return steps


def flops(products: list[Product]) -> int:
    """FLOPs of the products forward and backward: 3 x 2 M K N each (x batch)."""
    return sum(6 * max(batch, 1) * m * k * n for batch, m, k, n in products)


def operand_shapes(product: Product, transpose_a: bool, transpose_b: bool):
    batch, m, k, n = product
    lead = (batch,) if batch else ()
    a = lead + ((k, m) if transpose_a else (m, k))
    b = lead + ((n, k) if transpose_b else (k, n))
    return a, b


def tensorflow_runner(products: list[Product]):
    """A compiled TensorFlow function running every product once; returns a runner."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    work = []
    for product, transpose_a, transpose_b in with_backward(products):
        shapes = operand_shapes(product, transpose_a, transpose_b)
        a, b = (tf.constant(rng.standard_normal(shape, dtype=np.float32)) for shape in shapes)
        work.append((a, b, transpose_a, transpose_b))

    @tf.function
    def run_all():
        # A corner of each product comes back: the whole product is still computed.
        return [
            tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb)[..., :1, :1]
            for a, b, ta, tb in work
        ]

    return lambda: [output.numpy() for output in run_all()]


def torch_runner(products: list[Product]):
    """The same products in torch (eager: one kernel per product, no graph to build)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    work = []
    for product, transpose_a, transpose_b in with_backward(products):
        a, b = operand_shapes(product, transpose_a, transpose_b)
        a = torch.randn(a, generator=generator)
        b = torch.randn(b, generator=generator)
        work.append((a.mT if transpose_a else a, b.mT if transpose_b else b))

    def run():
        with torch.no_grad():
            return [torch.matmul(a, b) for a, b in work]  # eager on the CPU: done on return

    return run


def floors(products: list[Product], steps: int, warmup: int) -> dict[str, float]:
    """Median ms of running `products` (forward and backward) once, per library found."""
    found = {}
    for library, runner in (("tensorflow", tensorflow_runner), ("torch", torch_runner)):
        try:
            run = runner(products)
        except ImportError:
            continue
        found[library] = median(time_calls(run, steps, warmup))
    return found


def whole_steps(config: str, shape, steps: int, warmup: int, only: str) -> list[dict]:
    """The fp32 implementations of `benchmarks.train_step` for `config` (`only`: "ours",
    "peers" or "all"), timed here in turns."""
    from benchmarks import train_step

    chosen = train_step.candidates(config, shape, "fp32", only)
    measured = time_in_turns({c.implementation: c.build for c in chosen}, steps, warmup)
    timed = []
    for candidate in chosen:
        times, reason = measured[candidate.implementation]
        row = {"implementation": candidate.implementation, "backend": candidate.backend}
        timed.append({**row, "median_ms": median(times)} if times else {**row, "skipped": reason})
    return timed


def run(steps: int, warmup: int, tiny: bool = False, only: str = "all") -> dict:
    from benchmarks.train_step import CONFIGS, TINY_CONFIGS
    from mintransformer.backend.runtime import configure_runtime

    runtime = configure_runtime()

    shapes = TINY_CONFIGS if tiny else CONFIGS
    a, b = shapes["A"], shapes["B"]
    narrow = b.d_model // b.num_heads
    counted = {
        "A": translation_products(a),
        "B": classifier_products(b, b.key_dim),
        f"B, key_dim {narrow}": classifier_products(b, narrow),
    }
    report = {"benchmark": "gemm_floor", "machine": machine(), "versions": versions()}
    report["runtime"] = runtime
    report["floors"] = {}
    for name, products in counted.items():
        by_library = floors(products, steps, warmup)
        report["floors"][name] = {
            "gflop": flops(products) / 1e9,
            "ms": by_library,
            "floor_ms": min(by_library.values()),
        }
    report["maps"] = {}
    for name in "AB":
        maps = attention_maps(shapes[name])
        report["maps"][name] = {
            "maps": len(maps),
            "elements": sum(int(np.prod(one)) for one in maps),
            "dropout": shapes[name].dropout,
            "ms": median(time_calls(maps_runner(maps, shapes[name].dropout), steps, warmup)),
        }
    rows = a.batch * a.target_length
    report["output_softmax"] = {
        "A": {
            "rows": rows,
            "vocab": a.target_vocab,
            "ms": median(time_calls(output_softmax_runner(rows, a.target_vocab), steps, warmup)),
        }
    }
    report["steps"] = {name: whole_steps(name, shapes[name], steps, warmup, only) for name in "AB"}
    return report


def table(report: dict) -> str:
    rows = []
    for config, timed in report["steps"].items():
        floor = report["floors"][config]["floor_ms"]
        for row in timed:
            if "skipped" in row:
                continue
            rows.append(
                [
                    config,
                    row["implementation"],
                    row["backend"],
                    f"{row['median_ms']:.1f}",
                    f"{floor:.1f}",
                    f"{row['median_ms'] / floor:.2f}",
                ]
            )
    headers = ["config", "implementation", "backend", "step ms", "floor ms", "step / floor"]
    return format_table(headers, rows)


def bounds(report: dict) -> list[str]:
    """For each config: the best peer and the most a step could gain on it."""
    from benchmarks.train_step import OURS

    lines = []
    for config, timed in report["steps"].items():
        peers = [r for r in timed if r["implementation"] != OURS and "median_ms" in r]
        if not peers:
            continue
        best = min(peers, key=lambda r: r["median_ms"])
        floor = report["floors"][config]
        line = (
            f"{config}: best peer {best['implementation']} [{best['backend']}] "
            f"{best['median_ms']:.1f} ms; the config's products alone {floor['floor_ms']:.1f} ms "
            f"({floor['gflop']:.1f} GFLOP): a step doing them is at most "
            f"{best['median_ms'] / floor['floor_ms']:.2f}x faster than that peer"
        )
        lines.append(line)
        maps = report.get("maps", {}).get(config)
        if maps:
            both = floor["floor_ms"] + maps["ms"]
            lines.append(
                f"{config}: with its attention maps' softmax and dropout ({maps['maps']} maps, "
                f"forward and backward, {maps['ms']:.1f} ms) {both:.1f} ms: at most "
                f"{best['median_ms'] / both:.2f}x faster than that peer"
            )
            softmax = report.get("output_softmax", {}).get(config)
            if softmax:
                all_three = both + softmax["ms"]
                lines.append(
                    f"{config}: and with the output's softmax over its ({softmax['rows']}, "
                    f"{softmax['vocab']}) logits ({softmax['ms']:.1f} ms) {all_three:.1f} ms: "
                    f"at most {best['median_ms'] / all_three:.2f}x faster than that peer"
                )
    narrow = [name for name in report["floors"] if name.startswith("B, ")]
    for name in narrow:
        floor = report["floors"][name]
        lines.append(
            f"{name} (keras-hub's width): products alone {floor['floor_ms']:.1f} ms "
            f"({floor['gflop']:.1f} GFLOP)"
        )
    return lines


def main(argv: list[str] | None = None) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed calls")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls first")
    parser.add_argument("--only", choices=["ours", "peers", "all"], default="all")
    parser.add_argument("--tiny", action="store_true", help="shrunk configs, for smoke tests")
    parser.add_argument("--json", default=str(RESULTS_DIR / "gemm_floor.json"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report = run(args.steps, args.warmup, args.tiny, args.only)
    report["wall_s"] = round(time.perf_counter() - start, 1)
    print("\n" + table(report) + "\n\n" + "\n".join([*bounds(report), report["runtime"]]))
    print(f"\nwrote {write_json(report, args.json)}")
    return report


if __name__ == "__main__":
    main()
