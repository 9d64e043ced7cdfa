"""Benchmark: where config A's train step goes, by taking one thing out at a time.

    python -m benchmarks.step_ablation                  # config A, this process's backend
    python -m benchmarks.step_ablation --tiny --rounds 1 --warmup 0

Every variant is our `Transformer` in the trainer of `train_step` (config A, fp32) with one
change. All of them are built in one process and stepped in turns (round after round), so a
slower or busier machine moves them together; the ratio is the first variant's median over
each variant's (> 1: the variant is faster, i.e. what it leaves out costs that much):

- as benchmarked: `train_step`'s "ours";
- no attention-weight dropout (the tutorial peer has none);
- no dropout at all;
- LayerNorm replaced by its scale and shift (what normalising costs);
- SGD instead of Adam (what the optimizer update costs);
- Keras' own Adam instead of `backend.optimizer.adam`;
- the train step compiled with XLA (`jit_compile`; TensorFlow only, JAX always is).

Variants change the model, so their losses differ: this measures time, never quality.
Medians over rounds are only comparable within one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
from collections.abc import Callable
from datetime import UTC, datetime

from benchmarks.common import (
    RESULTS_DIR,
    format_table,
    keras_backend,
    machine,
    median,
    time_in_turns,
    versions,
    write_json,
)
from benchmarks.train_step import CONFIGS, TINY_CONFIGS, keras_adam, ours_translation_trainer

BASELINE = "as benchmarked"


def scale_and_shift(layer, inputs, training=None):
    return inputs * layer.gamma + layer.beta


def variants(shape) -> dict[str, Callable[[], Callable[[], object]]]:
    """Builders of one train-step runner per variant, the baseline first."""
    import keras

    def runner(trainer, inputs, labels):
        return lambda: trainer.train_on_batch(inputs, labels)

    def build(shape=shape, attention_dropout_rate=None, change=None):
        def make():
            trainer, inputs, labels = ours_translation_trainer(
                shape, "fp32", attention_dropout_rate
            )
            if change is not None:
                change(trainer)
            return runner(trainer, inputs, labels)

        return make

    def without_normalising(trainer):
        for layer in trainer.transformer._flatten_layers():
            if isinstance(layer, keras.layers.LayerNormalization):
                layer.call = types.MethodType(scale_and_shift, layer)

    def optimizer(make):
        def change(trainer):
            trainer.compile(make())
            trainer.optimizer.build(trainer.trainable_variables)

        return change

    def with_xla(trainer):
        trainer.jit_compile = True

    found = {
        BASELINE: build(),
        "no attention-weight dropout": build(attention_dropout_rate=0.0),
        "no dropout": build(shape=dataclasses.replace(shape, dropout=0.0)),
        "LayerNorm as scale and shift": build(change=without_normalising),
        "SGD instead of Adam": build(change=optimizer(lambda: keras.optimizers.SGD(1e-3))),
        "Keras' Adam": build(change=optimizer(keras_adam)),
    }
    if keras.backend.backend() == "tensorflow":
        found["XLA (jit_compile)"] = build(change=with_xla)
    return found


def run(shape, rounds: int, warmup: int) -> list[dict]:
    """Median ms per variant over `rounds` rounds, each variant stepped once a round."""
    measured = time_in_turns(variants(shape), rounds, warmup)
    failed = {name: reason for name, (_, reason) in measured.items() if reason is not None}
    if failed:
        raise RuntimeError(f"variants failed: {failed}")
    times = {name: values for name, (values, _) in measured.items()}
    baseline = median(times[BASELINE])
    return [
        {
            "variant": name,
            "median_ms": median(values),
            "baseline_over_variant": baseline / median(values),
            "times_ms": values,
        }
        for name, values in times.items()
    ]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--tiny", action="store_true", help="a shrunk config A (smoke test)")
    parser.add_argument("--json", default=str(RESULTS_DIR / "step_ablation.json"))
    args = parser.parse_args(argv)
    shape = (TINY_CONFIGS if args.tiny else CONFIGS)["A"]
    from mintransformer.backend.runtime import configure_runtime

    runtime = configure_runtime()
    results = run(shape, args.rounds, args.warmup)
    report = {
        "benchmark": "step_ablation",
        "meta": {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "argv": sys.argv[1:] if argv is None else argv,
            "backend": keras_backend(),
            "rounds": args.rounds,
            "warmup": args.warmup,
            "tiny": args.tiny,
            "runtime": runtime,
            "machine": machine(),
            "versions": versions(),
        },
        "shape": dataclasses.asdict(shape),
        "results": results,
    }
    print(
        format_table(
            ["variant", "median ms", "as benchmarked / variant"],
            [
                [row["variant"], f"{row['median_ms']:.1f}", f"{row['baseline_over_variant']:.2f}x"]
                for row in results
            ],
        )
    )
    print(f"wrote {write_json(report, args.json)}")
    return report


if __name__ == "__main__":
    main()
