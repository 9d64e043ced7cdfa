"""Profile: where a translation decode spends its time, on each Keras backend.

    python -m benchmarks.decoding_profile --run R --backends tensorflow,jax,torch

For each backend (a fresh process each) the run is loaded in fp32 and its sources are
translated greedily at batch 1: once to compile what each shape needs, once timed, once
under cProfile. Reported per backend: the warm pass's sentences/s, and from the profiled
pass the share of its time inside Keras' `Layer.__call__` (cumulative: the layer code,
the ops it runs and Keras' own bookkeeping) and the functions with the most time of
their own. On TensorFlow and JAX the decode is one compiled call, so little Python
shows; on PyTorch the token loop runs in Python and calls traced graphs of its body
(`backend.compilation.compile_eager_step`), so once the first pass has traced them no
layer call runs either (before they were traced, every layer ran eagerly per token).

The sources are `--src` (one a line) or, by default, number words (`data.numbers`).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    format_table,
    keras_backend,
    machine,
    run_per_backend,
    write_json,
)

LAYER_CALL = ("layer.py", "__call__")


def sources(args: argparse.Namespace) -> list[str]:
    if args.src:
        return Path(args.src).read_text(encoding="utf-8").splitlines()[: args.sentences]
    from mintransformer.data.numbers import english_words

    return [english_words(n) for n in range(1000, 10**6, 99_991)][: args.sentences]


def profile(args: argparse.Namespace) -> dict:
    """This process's backend: warm sentences/s, and the profile of one more pass."""
    from mintransformer.inference.translator import Translator

    translator = Translator.from_run(args.run, mixed_precision=False)
    texts = sources(args)

    def translate() -> list[str]:
        return translator.translate(texts, beam_size=1, batch_size=1)

    translate()  # compiles every shape the timed passes run
    start = time.perf_counter()
    translate()
    seconds = time.perf_counter() - start
    profiler = cProfile.Profile()
    profiler.runcall(translate)
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = stats.total_tt
    entries = stats.stats  # {(file, line, name): (primitive, calls, own, cumulative, callers)}
    layer_calls = [
        (own, cumulative, calls)
        for (file, _, name), (_, calls, own, cumulative, _) in entries.items()
        if file.endswith(LAYER_CALL[0]) and "keras" in file and name == LAYER_CALL[1]
    ]
    top = sorted(entries.items(), key=lambda item: -item[1][2])[: args.top]
    return {
        "backend": keras_backend(),
        "sentences": len(texts),
        "sentences_per_s": len(texts) / seconds,
        "profiled_s": total,
        "layer_call_share": max((c for _, c, _ in layer_calls), default=0.0) / total,
        "layer_calls": sum(n for *_, n in layer_calls),
        "top": [
            {"function": f"{Path(file).name}:{line}({name})", "calls": calls, "own_s": own}
            for (file, line, name), (_, calls, own, _, _) in top
        ],
    }


def table(reports: list[dict]) -> str:
    rows = [
        [
            r["backend"],
            f"{r['sentences_per_s']:.1f}",
            f"{r['profiled_s']:.2f}",
            f"{100 * r['layer_call_share']:.0f}%",
            str(r["layer_calls"]),
            ", ".join(f"{t['function']} {t['own_s']:.3f}" for t in r["top"][:3]),
        ]
        for r in reports
    ]
    headers = ["backend", "sent/s", "profiled s", "in Layer.__call__", "layer calls", "top"]
    return format_table(headers, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a translation run")
    parser.add_argument("--src", help="source sentences, one a line (default: number words)")
    parser.add_argument("--sentences", type=int, default=10, help="sentences translated")
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--top", type=int, default=12, help="functions listed, by own time")
    parser.add_argument("--json", default=str(RESULTS_DIR / "decoding_profile.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        write_json(profile(args), args.json)
        return
    child = ["--run", args.run, "--sentences", str(args.sentences), "--top", str(args.top)]
    if args.src:
        child += ["--src", args.src]
    reports = run_per_backend("benchmarks.decoding_profile", child, args.backends.split(","))
    print(table(reports))
    report = {"benchmark": "decoding_profile", "machine": machine(), "results": reports}
    print(f"report: {write_json(report, args.json)}")


if __name__ == "__main__":
    main()
