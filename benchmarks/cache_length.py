"""Benchmark: what the length of the key/value cache costs greedy decoding.

    python -m benchmarks.cache_length --run R --src ../shared/data/multi30k/test_2016_flickr.en

Every step of `CachedSteps` reads all the slots of its key/value cache (the slots not
written yet are masked), which is why a greedy decode starts on a short cache and grows it
only for rows that need more (`CachedSteps.first_cache_length`). Two comparisons, each on
two workloads: the first `--lone` sentences each decoded alone (a batch of one, as a server
decodes a lone request), and the first `--batch-size` sentences as one batch.

- "fixed": steps whose cache holds a fixed number of slots, each of `--caches`
  (`CachedSteps(model, n, first_cache_length=n)`), with the same bound on generated
  tokens (`--steps`). Every cache yields the same tokens, so the differences in time are
  the cache's alone.
- "to the end": decodes to `</s>` (at most the model's target positions) through the
  default steps, which start on a short cache and grow it, against a cache of all the
  target positions from the start.

Each comparison is timed in turns (`--rounds` rounds after a warm-up call). The report
gives the median milliseconds per call, each against the first of its comparison, and
whether the tokens were the same.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    format_table,
    median,
    run_decoding_parser,
    time_in_turns,
    write_report,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_decoding_parser(__doc__)
    parser.add_argument(
        "--caches", default="32,64,128", help="cache lengths (target positions), comma-separated"
    )
    parser.add_argument(
        "--steps", type=int, default=16, help="most tokens generated per sentence, in every run"
    )
    parser.add_argument("--lone", type=int, default=8, help="sentences decoded one at a time")
    parser.add_argument("--batch-size", type=int, default=32, help="rows of the batch workload")
    parser.add_argument("--rounds", type=int, default=5, help="timed calls per cache and workload")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "cache_length.json")
    args = parser.parse_args(argv)
    args.caches = sorted({int(length) for length in args.caches.split(",")})
    if args.steps > args.caches[0]:
        parser.error(f"--steps {args.steps} exceeds the shortest cache ({args.caches[0]})")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from mintransformer.backend.precision import choose_precision
    from mintransformer.backend.runtime import configure_runtime
    from mintransformer.data.lengths import pad_batch
    from mintransformer.decoding.greedy import greedy_search
    from mintransformer.decoding.steps import CachedSteps
    from mintransformer.inference.translator import Translator

    print(configure_runtime())
    print(choose_precision(None)[1])
    sources = args.src.read_text(encoding="utf-8").splitlines()
    translator = Translator.from_run(args.run)
    model, tokenizer = translator.model, translator.tokenizer
    positions = model.decoder.max_length

    def padded(texts: list[str]):
        return pad_batch(translator.encode_sources(texts), pad_id=tokenizer.pad_id)

    workloads = {
        "alone": [padded([text]) for text in sources[: args.lone]],
        f"batch {args.batch_size}": [padded(sources[: args.batch_size])],
    }
    comparisons = {
        "fixed": (
            {f"{n} slots": CachedSteps(model, n, first_cache_length=n) for n in args.caches},
            args.steps,
        ),
        "to the end": (
            {
                f"{positions} slots": CachedSteps(model, positions, first_cache_length=positions),
                "grown": CachedSteps(model, positions),
            },
            positions,
        ),
    }
    rows, report = [], {}
    for comparison, (steps, max_length) in comparisons.items():
        options = dict(start_id=tokenizer.start_id, end_id=tokenizer.end_id, max_length=max_length)
        for workload, batches in workloads.items():
            tokens: dict[str, list] = {}

            def runner(name: str, batches=batches, steps=steps, options=options, tokens=tokens):
                def decode():
                    tokens[name] = [greedy_search(steps[name], ids, **options) for ids in batches]

                return decode

            builders = {name: functools.partial(runner, name) for name in steps}
            timed = time_in_turns(builders, steps=args.rounds, warmup=1)
            per_call = {name: median(timed[name][0]) / len(batches) for name in steps}
            first = next(iter(steps))
            same = all(tokens[name] == tokens[first] for name in steps)
            report[f"{comparison}, {workload}"] = {"ms_per_call": per_call, "same_tokens": same}
            for name, ms in per_call.items():
                ratio = f"{ms / per_call[first]:.2f}x"
                rows.append([comparison, workload, name, f"{ms:.1f}", ratio, str(same)])
    headers = ["comparison", "workload", "cache", "ms per call (median)", "/ first", "same tokens"]
    print(format_table(headers, rows))
    return write_report(report, args)


if __name__ == "__main__":
    main()
