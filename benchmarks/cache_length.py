"""Benchmark: what the length of the key/value cache costs greedy decoding.

    python -m benchmarks.cache_length --run R --src ../shared/data/multi30k/test_2016_flickr.en

`CachedSteps` keeps `max_output_length` slots of keys and values per layer, and every
step reads all of them (the slots not written yet are masked). The run's model is loaded
once per cache length of `--caches` (`Translator.from_run(max_output_length=...)`) and
each decodes the same sentences greedily with the same bound on generated tokens
(`--steps`). So every cache length yields the same tokens, and the differences in time are
the cache's alone. Two workloads, timed in turns (`--rounds` rounds after a warm-up call):
the first `--lone` sentences each decoded alone (a batch of one, as a server decodes a
lone request), and the first `--batch-size` sentences as one batch. The report gives the
median milliseconds per call and each cache length against the shortest.
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
    from mintransformer.inference.translator import Translator

    print(configure_runtime())
    print(choose_precision(None)[1])
    sources = args.src.read_text(encoding="utf-8").splitlines()
    translators = {n: Translator.from_run(args.run, max_output_length=n) for n in args.caches}
    any_translator = translators[args.caches[0]]
    pad_id = any_translator.tokenizer.pad_id
    workloads = {
        "alone": [
            pad_batch(any_translator.encode_sources([text]), pad_id=pad_id)
            for text in sources[: args.lone]
        ],
        f"batch {args.batch_size}": [
            pad_batch(any_translator.encode_sources(sources[: args.batch_size]), pad_id=pad_id)
        ],
    }
    options = dict(
        start_id=any_translator.tokenizer.start_id,
        end_id=any_translator.tokenizer.end_id,
        max_length=args.steps,
    )
    tokens: dict[tuple[str, int], list] = {}

    def runner(workload: str, cache: int):
        def decode():
            tokens[workload, cache] = [
                greedy_search(translators[cache].steps, ids, **options)
                for ids in workloads[workload]
            ]

        return decode

    rows, report = [], {}
    for workload, batches in workloads.items():
        builders = {
            f"cache {cache}": functools.partial(runner, workload, cache) for cache in args.caches
        }
        timed = time_in_turns(builders, steps=args.rounds, warmup=1)
        per_call = {
            cache: median(timed[f"cache {cache}"][0]) / len(batches) for cache in args.caches
        }
        same = all(
            tokens[workload, cache] == tokens[workload, args.caches[0]] for cache in per_call
        )
        report[workload] = {
            "ms_per_call": {str(cache): ms for cache, ms in per_call.items()},
            "same_tokens": same,
        }
        shortest = per_call[args.caches[0]]
        for cache, ms in per_call.items():
            rows.append([workload, str(cache), f"{ms:.1f}", f"{ms / shortest:.2f}x", str(same)])
    headers = ["workload", "cache", "ms per call (median)", "/ shortest", "same tokens"]
    print(format_table(headers, rows))
    return write_report(report, args)


if __name__ == "__main__":
    main()
