"""Benchmark: one training step (forward + backward + Adam update), ours against peers.

    python -m benchmarks.train_step --backends tensorflow,jax,torch     # the full run
    python -m benchmarks.train_step --config A --precision fp32         # this process's backend

Config A is a 4+4-layer translation model (d 128, 8 heads), config B a one-block IMDB classifier
(see `CONFIGS`); every implementation trains on the same fixed-seed batch (~10% tail
padding). The implementations of a config and precision are built first, then stepped in
turns, one step each per round (`common.time_in_turns`), so that drift in the machine's speed
during the run falls on all of them alike; with `--backends`, each Keras backend runs in
its own process and the shared peers in the first. For each implementation and precision
it prints the median ms/step, tokens/s
(real, non-padding target tokens for A, input tokens for B), achieved GFLOP/s and its
fraction of the machine's matmul peak (best of a `--matmul-size`^3 matmul in torch and
TensorFlow, per precision), and for ours the best peer's ms / our ms (> 1: we are faster).

FLOPs per step are counted analytically: a training step is 3x the forward pass
(backward = 2x forward), and the forward pass is 2 FLOPs per multiply-add of every
weight matrix with every token that goes through it, plus attention:

    flops = 6 * sum_W (weights in W * tokens through W) + 3 * attention_forward
          ~ 6 * params_nonembedding * tokens + attention FLOPs

    A: per source token  L * (4 d^2 + 2 d dff)  (encoder)  +  L * 2 d^2  (cross-attention K, V)
       per target token  L * (4 d^2 + 2 d^2 + 2 d dff) + d * target_vocab
       attention_forward = 4 * batch * d * L * (S^2 + T^2 + T * S)    (QK^T and AV)
    B: per token  L * (4 d h + 2 d dff)  with h = heads * key_dim, per sequence
       d * hidden + hidden;  attention_forward = 4 * batch * h * L * length^2

Embedding look-ups, biases, LayerNorm, softmax and the loss are not counted; padded
positions are (every implementation computes them); causal attention is counted in full.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np

from benchmarks.common import (
    PAD_ID,
    RESULTS_DIR,
    SEED,
    ClassifierShape,
    TranslationShape,
    UnavailableError,
    classification_batch,
    format_table,
    keras_backend,
    machine,
    median,
    run_per_backend,
    time_calls,
    time_in_turns,
    translation_batch,
    versions,
    write_json,
)

CONFIGS = {
    "A": TranslationShape(
        num_layers=4,
        d_model=128,
        num_heads=8,
        dff=512,
        source_vocab=8500,
        target_vocab=8000,
        batch=64,
        source_length=38,
        target_length=36,
    ),
    "B": ClassifierShape(
        num_layers=1, d_model=64, num_heads=4, key_dim=64, dff=128, vocab=5000, batch=64, length=200
    ),
    # B like for like: keras-hub's encoder fixes key_dim at d_model // num_heads (16).
    "B16": ClassifierShape(
        num_layers=1, d_model=64, num_heads=4, key_dim=16, dff=128, vocab=5000, batch=64, length=200
    ),
}
TINY_CONFIGS = {
    "A": TranslationShape(
        num_layers=1,
        d_model=32,
        num_heads=2,
        dff=64,
        source_vocab=100,
        target_vocab=120,
        batch=4,
        source_length=10,
        target_length=8,
    ),
    "B": ClassifierShape(
        num_layers=1, d_model=16, num_heads=2, key_dim=16, dff=32, vocab=100, batch=4, length=16
    ),
    "B16": ClassifierShape(
        num_layers=1, d_model=16, num_heads=2, key_dim=8, dff=32, vocab=100, batch=4, length=16
    ),
}
# Bn and B16n: B and B16 like for like with the tutorial's model, which has no dropout on
# the attention weights.
for _configs in (CONFIGS, TINY_CONFIGS):
    for _name in ("B", "B16"):
        _configs[f"{_name}n"] = dataclasses.replace(_configs[_name], attention_dropout=0.0)
MATMUL_SIZE = 2048
TINY_MATMUL_SIZE = 256
LABEL_SMOOTHING = 0.1  # TranslationConfig's default, used by every translation implementation
STEPS_PER_EPOCH = 1000  # only sets the Noam schedule's warm-up in compile_model
OURS = "ours"


# --------------------------------------------------------------------------- FLOPs


def translation_flops(shape: TranslationShape) -> dict[str, int]:
    """Analytic FLOPs of one training step of config-A-like models (see the module docstring)."""
    d, f, layers = shape.d_model, shape.dff, shape.num_layers
    source, target = shape.source_length, shape.target_length
    encoder_layer = 4 * d * d + 2 * d * f  # Q, K, V, O and the feed-forward
    decoder_layer = 8 * d * d + 2 * d * f  # self-attention, cross-attention, feed-forward
    cross_key_value = 2 * d * d  # cross-attention K, V: applied to the encoder output
    per_source_token = layers * (encoder_layer + cross_key_value)
    per_target_token = layers * (decoder_layer - cross_key_value) + d * shape.target_vocab
    attention = 4 * shape.batch * d * layers * (source**2 + target**2 + target * source)
    matmuls = per_source_token * shape.batch * source + per_target_token * shape.batch * target
    return {
        "flops_per_step": 6 * matmuls + 3 * attention,
        "params_nonembedding": layers * (encoder_layer + decoder_layer) + d * shape.target_vocab,
    }


def classifier_flops(shape: ClassifierShape, key_dim: int | None = None) -> dict[str, int]:
    """Analytic FLOPs of one training step of config-B-like models; `key_dim` overrides."""
    d, width = shape.d_model, shape.num_heads * (key_dim or shape.key_dim)
    per_token = shape.num_layers * (4 * d * width + 2 * d * shape.dff)
    per_sequence = d * shape.hidden + shape.hidden
    attention = 4 * shape.batch * width * shape.num_layers * shape.length**2
    tokens = shape.batch * shape.length
    flops = 6 * (per_token * tokens + per_sequence * shape.batch) + 3 * attention
    return {"flops_per_step": flops, "params_nonembedding": per_token + per_sequence}


def describe_config(name: str, shape: TranslationShape | ClassifierShape) -> dict:
    """The config's shape, FLOPs, tokens per step and padding, for the report."""
    if isinstance(shape, TranslationShape):
        source, _, labels = translation_batch(shape)
        tokens = int((labels != PAD_ID).sum())
        padding = float(np.mean(np.concatenate([source.ravel(), labels.ravel()]) == PAD_ID))
        counts = translation_flops(shape)
        unit = "real target tokens"
    else:
        ids, _ = classification_batch(shape)
        tokens = int((ids != PAD_ID).sum())
        padding = float(np.mean(ids == PAD_ID))
        counts = classifier_flops(shape)
        unit = "real input tokens"
    return {
        "name": name,
        "shape": dataclasses.asdict(shape),
        **counts,
        "tokens_per_step": tokens,
        "tokens_unit": unit,
        "padding_fraction": round(padding, 4),
    }


# --------------------------------------------------------------------------- matmul peak


def matmul_gflops(size: int, repeats: int) -> dict[str, dict[str, float]]:
    """Best GFLOP/s of a `size`^3 matmul, per library and precision (fp32, bf16)."""
    flops = 2.0 * size**3
    found: dict[str, dict[str, float]] = {}
    try:
        import torch

        where = "cuda" if torch.cuda.is_available() else "cpu"
        found["torch"] = {}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            a = torch.randn(size, size, device=where).to(dtype)
            b = torch.randn(size, size, device=where).to(dtype)

            def run(a=a, b=b):
                (a @ b)[0, 0].item()

            found["torch"][name] = flops / min(time_calls(run, repeats, 1)) / 1e6
    except ImportError:
        pass
    try:
        import tensorflow as tf

        found["tensorflow"] = {}
        for name, dtype in (("fp32", tf.float32), ("bf16", tf.bfloat16)):
            a = tf.cast(tf.random.normal((size, size)), dtype)
            b = tf.cast(tf.random.normal((size, size)), dtype)

            def run(a=a, b=b):
                tf.linalg.matmul(a, b)[0, 0].numpy()

            found["tensorflow"][name] = flops / min(time_calls(run, repeats, 1)) / 1e6
    except ImportError:
        pass
    return found


# --------------------------------------------------------------------------- implementations


def keras_policy(precision: str) -> str:
    return "mixed_bfloat16" if precision == "bf16" else "float32"


def keras_adam():
    import keras

    return keras.optimizers.Adam(1e-3, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def ours_translation(shape: TranslationShape, precision: str) -> Callable[[], object]:
    """`Transformer` in the trainer `compile_model` returns, stepped with `train_on_batch`.

    `train_on_batch` runs the train function `fit` builds (`make_train_function`) on one
    batch and returns the logs as Python floats, so each call ends synchronised.
    """
    trainer, inputs, labels = ours_translation_trainer(shape, precision)
    return lambda: trainer.train_on_batch(inputs, labels)


def ours_translation_trainer(
    shape: TranslationShape, precision: str, attention_dropout_rate: float | None = None
):
    """`(trainer, inputs, labels)`: config-A-like `Transformer` compiled for training, its batch.

    `attention_dropout_rate` None: the dropout rate, as the `Transformer` default.
    """
    import keras

    from mintransformer import Transformer
    from mintransformer.config import TranslationConfig
    from mintransformer.training.translation import compile_model

    keras.utils.set_random_seed(SEED)
    source, target_in, labels = translation_batch(shape)
    model = Transformer(
        shape.num_layers,
        shape.d_model,
        shape.num_heads,
        shape.dff,
        shape.source_vocab,
        shape.target_vocab,
        pe_input=shape.source_length,
        pe_target=shape.target_length,
        dropout_rate=shape.dropout,
        attention_dropout_rate=attention_dropout_rate,
        pad_id=PAD_ID,
        dtype=keras_policy(precision),
    )
    model((source[:1], target_in[:1]))
    config = TranslationConfig(
        num_layers=shape.num_layers,
        d_model=shape.d_model,
        num_heads=shape.num_heads,
        dff=shape.dff,
        dropout_rate=shape.dropout,
        attention_dropout_rate=attention_dropout_rate,
        tie_embeddings=False,
        max_length=max(shape.source_length, shape.target_length),
        label_smoothing=LABEL_SMOOTHING,
        mixed_precision=precision == "bf16",
    )
    trainer = compile_model(model, config, STEPS_PER_EPOCH)
    return trainer, (source, target_in), labels


def ours_classification(shape: ClassifierShape, precision: str) -> Callable[[], object]:
    """`TextClassifier` (2 classes, float32 logits) compiled by its `compile_model`."""
    import keras

    try:
        from mintransformer.config import ClassificationConfig
        from mintransformer.models.classifier import TextClassifier
        from mintransformer.training.classification import compile_model
    except ImportError:
        raise UnavailableError("TextClassifier not available") from None

    keras.utils.set_random_seed(SEED)
    ids, labels = classification_batch(shape)
    model = TextClassifier(
        shape.num_layers,
        shape.d_model,
        shape.num_heads,
        shape.dff,
        shape.vocab,
        shape.length,
        num_classes=2,
        dropout_rate=shape.dropout,
        pad_id=PAD_ID,
        pooling="mean",
        hidden_units=shape.hidden,
        key_dim=shape.key_dim,
        attention_dropout_rate=shape.attention_dropout,
        dtype=keras_policy(precision),
    )
    model(ids[:1])
    config = ClassificationConfig(
        num_layers=shape.num_layers,
        d_model=shape.d_model,
        num_heads=shape.num_heads,
        dff=shape.dff,
        key_dim=shape.key_dim,
        dropout_rate=shape.dropout,
        attention_dropout_rate=shape.attention_dropout,
        hidden_units=shape.hidden,
        max_length=shape.length,
        labels=["negative", "positive"],
        mixed_precision=precision == "bf16",
    )
    compile_model(model, config, STEPS_PER_EPOCH)
    return lambda: model.train_on_batch(ids, labels)


def import_keras_hub():
    try:
        from benchmarks import peers_keras_hub
    except ImportError as error:
        raise UnavailableError(f"keras-hub cannot be imported ({error})") from None
    return peers_keras_hub


def keras_hub_translation(shape: TranslationShape, precision: str) -> Callable[[], object]:
    """keras-hub layers, trained exactly like ours (same loss, metric, Adam, train_on_batch)."""
    import keras

    from mintransformer.training.losses import MaskedAccuracy, MaskedLoss

    peers = import_keras_hub()
    keras.utils.set_random_seed(SEED)
    source, target_in, labels = translation_batch(shape)
    model = peers.Translator(shape, dtype=keras_policy(precision))
    model((source[:1], target_in[:1]))
    model.compile(
        optimizer=keras_adam(),
        loss=MaskedLoss(LABEL_SMOOTHING, pad_id=PAD_ID),
        metrics=[MaskedAccuracy(pad_id=PAD_ID)],
    )
    return lambda: model.train_on_batch((source, target_in), labels)


def keras_hub_classification(shape: ClassifierShape, precision: str) -> Callable[[], object]:
    import keras

    peers = import_keras_hub()
    keras.utils.set_random_seed(SEED)
    ids, labels = classification_batch(shape)
    model = peers.classifier(shape, dtype=keras_policy(precision))
    model.compile(optimizer=keras_adam(), loss="binary_crossentropy", metrics=["accuracy"])
    labels = labels[:, None].astype("float32")
    return lambda: model.train_on_batch(ids, labels)


def tf_tutorial(config: str, shape: TranslationShape | ClassifierShape) -> Callable[[], object]:
    try:
        from benchmarks import peers_tf
    except ImportError as error:
        raise UnavailableError(f"tensorflow cannot be imported ({error})") from None
    if config == "A":
        return peers_tf.translation_step(shape, LABEL_SMOOTHING)
    return peers_tf.classification_step(shape)


def torch_peer(
    config: str, shape: TranslationShape | ClassifierShape, precision: str
) -> Callable[[], object]:
    try:
        from benchmarks import peers_torch
    except ImportError as error:
        raise UnavailableError(f"torch cannot be imported ({error})") from None
    if config == "A":
        return peers_torch.translation_step(shape, precision, LABEL_SMOOTHING)
    return peers_torch.classification_step(shape, precision)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One implementation to time: `build()` returns a runner of one train step."""

    implementation: str
    backend: str
    shared: bool  # independent of the Keras backend: run once, not once per backend
    build: Callable[[], Callable[[], object]]
    flops_per_step: int


def candidates(
    config: str, shape: TranslationShape | ClassifierShape, precision: str, only: str
) -> list[Candidate]:
    """The implementations of `config` at `precision` selected by `only`."""
    backend = keras_backend()
    flops = (translation_flops if config == "A" else classifier_flops)(shape)["flops_per_step"]
    if config == "A":
        ours = Candidate(OURS, backend, False, lambda: ours_translation(shape, precision), flops)
        hub = Candidate(
            "keras-hub", backend, False, lambda: keras_hub_translation(shape, precision), flops
        )
    else:
        ours = Candidate(OURS, backend, False, lambda: ours_classification(shape, precision), flops)
        narrow = classifier_flops(shape, key_dim=shape.d_model // shape.num_heads)
        hub = Candidate(
            "keras-hub",
            backend,
            False,
            lambda: keras_hub_classification(shape, precision),
            narrow["flops_per_step"],
        )
    tutorial = Candidate("tf-tutorial", "tf-xla", True, lambda: tf_tutorial(config, shape), flops)
    torch_name = "torch nn.Transformer" if config == "A" else "torch"
    torch = Candidate(
        torch_name, "torch-eager", True, lambda: torch_peer(config, shape, precision), flops
    )
    # keras-hub and torch drop attention weights at the dropout rate, with no way to
    # switch that alone off; the tutorial model is fp32 only.
    without_attention_dropout = getattr(shape, "attention_dropout", None) == 0.0
    peers = [] if without_attention_dropout else [hub]
    peers += [tutorial] if precision == "fp32" else []
    peers += [] if without_attention_dropout else [torch]
    return {"ours": [ours], "peers": peers, "all": [ours, *peers]}[only]


# --------------------------------------------------------------------------- running


def run_here(args: argparse.Namespace) -> dict:
    """Runs the selected configs, precisions and implementations in this process."""
    shapes = TINY_CONFIGS if args.tiny else CONFIGS
    configs = list(shapes) if args.config == "all" else [args.config]
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    report = new_report(args)
    from mintransformer.backend.runtime import configure_runtime

    report["meta"]["runtime"][keras_backend()] = configure_runtime()
    report["meta"]["versions"] = versions()
    for config in configs:
        report["configs"][config] = describe_config(config, shapes[config])
    if not args.skip_shared:
        size = args.matmul_size or (TINY_MATMUL_SIZE if args.tiny else MATMUL_SIZE)
        gflops = matmul_gflops(size, repeats=2 if args.tiny else 5)
        report["matmul"] = {"size": size, "gflops": gflops}
    for config in configs:
        for precision in precisions:
            chosen = [
                candidate
                for candidate in candidates(config, shapes[config], precision, args.only)
                if not (candidate.shared and args.skip_shared)
            ]
            print(f"timing config {config} {precision} in turns ...", flush=True)
            builders = {candidate.implementation: candidate.build for candidate in chosen}
            measured = time_in_turns(builders, args.steps, args.warmup)
            for candidate in chosen:
                times, reason = measured[candidate.implementation]
                entry = {
                    "config": config,
                    "implementation": candidate.implementation,
                    "backend": candidate.backend,
                    "precision": precision,
                }
                if reason is not None:
                    print(f"  skipped {candidate.implementation}: {reason}", flush=True)
                    report["skipped"].append({**entry, "reason": reason})
                    continue
                report["results"].append(
                    {
                        **entry,
                        "median_ms": median(times),
                        "times_ms": times,
                        "flops_per_step": candidate.flops_per_step,
                    }
                )
    return finalize(report)


def new_report(args: argparse.Namespace) -> dict:
    return {
        "benchmark": "train_step",
        "meta": {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "argv": args.argv,
            "steps": args.steps,
            "warmup": args.warmup,
            "tiny": args.tiny,
            "keras_backends": args.backends.split(",") if args.backends else [keras_backend()],
            "runtime": {},  # the runtime log line of each backend
            "machine": machine(),
        },
        "configs": {},
        "results": [],
        "skipped": [],
    }


def finalize(report: dict) -> dict:
    """Adds tokens/s, GFLOP/s and fraction of the matmul peak; for ours, peer ms / our ms of
    the best peer (any backend) and of keras-hub on the same backend."""
    matmul = report.get("matmul")
    if matmul:
        matmul["peak_gflops"] = {
            precision: max(found[precision] for found in matmul["gflops"].values())
            for precision in ("fp32", "bf16")
            if any(precision in found for found in matmul["gflops"].values())
        }
    peaks = matmul["peak_gflops"] if matmul else {}
    rows = report["results"]
    for row in rows:
        seconds = row["median_ms"] / 1000.0
        row["tokens_per_s"] = report["configs"][row["config"]]["tokens_per_step"] / seconds
        row["gflops"] = row["flops_per_step"] / seconds / 1e9
        peak = peaks.get(row["precision"])
        row["fraction_of_peak"] = row["gflops"] / peak if peak else None
    for row in rows:
        if row["implementation"] != OURS:
            continue
        peers = [
            other
            for other in rows
            if other["implementation"] != OURS
            and other["config"] == row["config"]
            and other["precision"] == row["precision"]
        ]
        best = min(peers, key=lambda other: other["median_ms"], default=None)
        row["best_peer"] = f"{best['implementation']} [{best['backend']}]" if best else None
        row["ratio_to_best_peer"] = best["median_ms"] / row["median_ms"] if best else None
        hub = [other for other in peers if other["implementation"] == "keras-hub"]
        same = [other for other in hub if other["backend"] == row["backend"]]
        row["ratio_to_keras_hub"] = same[0]["median_ms"] / row["median_ms"] if same else None
    report["best_precision"] = best_precision(rows)
    return report


def best_precision(rows: list[dict]) -> list[dict]:
    """Per config: ours and the best peer, each implementation in its faster precision."""
    fastest: dict[tuple, dict] = {}
    for row in rows:
        key = (row["config"], row["implementation"], row["backend"])
        if key not in fastest or row["median_ms"] < fastest[key]["median_ms"]:
            fastest[key] = row
    found = []
    for config in dict.fromkeys(row["config"] for row in rows):
        candidates = [row for (name, *_), row in fastest.items() if name == config]
        ours = [row for row in candidates if row["implementation"] == OURS]
        peers = [row for row in candidates if row["implementation"] != OURS]
        if not ours or not peers:
            continue
        best_ours = min(ours, key=lambda row: row["median_ms"])
        best_peer = min(peers, key=lambda row: row["median_ms"])
        found.append(
            {
                "config": config,
                "ours": f"{OURS} [{best_ours['backend']}] {best_ours['precision']}",
                "ours_ms": best_ours["median_ms"],
                "best_peer": f"{best_peer['implementation']} [{best_peer['backend']}] "
                f"{best_peer['precision']}",
                "best_peer_ms": best_peer["median_ms"],
                "ratio": best_peer["median_ms"] / best_ours["median_ms"],
            }
        )
    return found


def merge(reports: list[dict], args: argparse.Namespace) -> dict:
    """One report from the per-backend child reports."""
    merged = new_report(args)
    for report in reports:
        merged["meta"].setdefault("versions", report["meta"]["versions"])
        merged["meta"]["runtime"].update(report["meta"]["runtime"])
        merged["configs"].update(report["configs"])
        merged["results"] += report["results"]
        merged["skipped"] += report["skipped"]
        if "matmul" in report:
            merged["matmul"] = report["matmul"]
    return finalize(merged)


def table(report: dict) -> str:
    headers = [
        "config",
        "implementation",
        "backend",
        "prec",
        "median ms",
        "tokens/s",
        "GFLOP/s",
        "% peak",
        "best peer / ours",
    ]
    rows = []
    for row in report["results"]:
        fraction = row["fraction_of_peak"]
        ratio = row.get("ratio_to_best_peer")
        rows.append(
            [
                row["config"],
                row["implementation"],
                row["backend"],
                row["precision"],
                f"{row['median_ms']:.1f}",
                f"{row['tokens_per_s']:,.0f}",
                f"{row['gflops']:.1f}",
                "-" if fraction is None else f"{100 * fraction:.1f}",
                f"{ratio:.2f}x vs {row['best_peer']}" if ratio else "",
            ]
        )
    return format_table(headers, rows)


def summary(report: dict) -> str:
    """The table, the matmul peaks and the skipped implementations, as text."""
    lines = ["", table(report)]
    lines += ["", *(f"{backend}: {line}" for backend, line in report["meta"]["runtime"].items())]
    matmul = report.get("matmul")
    if matmul:
        found = ", ".join(
            f"{library} {precision} {value:.0f}"
            for library, by_precision in matmul["gflops"].items()
            for precision, value in by_precision.items()
        )
        lines.append(f"\nmatmul {matmul['size']}^3 GFLOP/s: {found}")
    for best in report.get("best_precision", []):
        lines.append(
            f"config {best['config']}, each in its faster precision: {best['ours']} "
            f"{best['ours_ms']:.1f} ms, best peer {best['best_peer']} {best['best_peer_ms']:.1f} "
            f"ms: {best['ratio']:.2f}x"
        )
    for skip in report["skipped"]:
        lines.append(
            f"skipped: {skip['config']} {skip['implementation']} [{skip['backend']}] "
            f"{skip['precision']}: {skip['reason']}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    parser.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both")
    parser.add_argument("--only", choices=["ours", "peers", "all"], default="all")
    parser.add_argument(
        "--backends",
        help="comma-separated Keras backends, one subprocess each (default: this process's)",
    )
    parser.add_argument("--tiny", action="store_true", help="shrunk configs, for smoke tests")
    parser.add_argument("--matmul-size", type=int, help="matmul side for the peak (default 2048)")
    parser.add_argument("--json", default=str(RESULTS_DIR / "train_step.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-shared", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def child_args(args: argparse.Namespace) -> list[str]:
    """The options a per-backend subprocess gets (the parent keeps --backends and --json)."""
    forwarded = ["--config", args.config, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    forwarded += ["--precision", args.precision, "--only", args.only]
    if args.matmul_size:
        forwarded += ["--matmul-size", str(args.matmul_size)]
    return forwarded + (["--tiny"] if args.tiny else [])


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark, prints the table, writes the JSON; returns the report."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    start = time.perf_counter()
    if args.backends:
        reports = run_per_backend(
            "benchmarks.train_step",
            child_args(args),
            args.backends.split(","),
            later_args=["--skip-shared"],
        )
        report = merge(reports, args)
    else:
        report = run_here(args)
    report["meta"]["wall_s"] = round(time.perf_counter() - start, 1)
    path = write_json(report, args.json)
    if not args.child:
        print(summary(report))
        print(f"\nwrote {path}")
    return report


if __name__ == "__main__":
    main()
