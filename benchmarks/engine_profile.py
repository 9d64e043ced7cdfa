"""Profile: where a translation decode's time goes, per position and per call, in our
engines against CTranslate2 on the same weights.

    python -m benchmarks.engine_profile --run R --src $D/multi30k/test_2016_flickr.en

R is a translation run with its exports (`mintransformer export --run R`, and
`--format ct2`). One process, TensorFlow backend, every engine fp32 on all cores; the first
`--sentences` sources, batched as `Translator.translate` batches them (sorted by length).
Three tables:

1. Each engine's whole search per setting (batch 1 and 32, greedy and beam 4): sentences/s
   and milliseconds per decoded position. A batch decodes as many positions as its longest
   output has tokens, plus the end: the same count for every engine whose translations
   agree, so the per-position times compare the engines' cost of one step of a batch.
2. The Keras engine's step taken apart, at the rows a step carries (batch x beam): one XLA
   call that only reads every model variable (the floor of a compiled call), one decoder
   step called alone with a 32-slot and a 128-slot cache, the output head alone
   (projection, log-softmax, top-4), and the step inside the compiled search (whole search
   over positions; compiled once per shape first, so no compile is timed).
3. The ONNX engine: the share of its search spent inside onnxruntime (encoder and step
   graphs) against the Python around it (the search and its NumPy cache), and
   onnxruntime's own per-operator profile of the step graph at 1 and 32 rows, by op type.

Medians of `--repeats` passes; compare within one run only.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from benchmarks.common import RESULTS_DIR, format_table, machine, versions, write_json  # noqa: E402

SETTINGS = {  # name: (beam size, batch size)
    "b1 greedy": (1, 1),
    "b32 greedy": (1, 32),
    "b1 beam 4": (4, 1),
    "b32 beam 4": (4, 32),
}
ENGINES = ("keras", "onnx", "ct2")


def id_batches(translator, texts: list[str], batch_size: int) -> list:
    """The padded id batches `Translator.translate` decodes for `texts`."""
    import numpy as np

    from mintransformer.data.lengths import pad_batch

    sources = translator.encode_sources(texts)
    order = np.argsort([len(s) for s in sources], kind="stable")
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [pad_batch([sources[i] for i in c], pad_id=translator.tokenizer.pad_id) for c in chunks]


def timed(fn, repeats: int) -> float:
    """Median seconds of `repeats` calls of `fn` after one untimed call."""
    fn()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def whole_search(translator, batches: list, beam_size: int, repeats: int) -> dict:
    """Seconds of a pass over `batches`, and the positions its batches decode."""
    positions = []

    def search():
        positions.clear()
        for ids in batches:
            ranked = translator._ranked(ids, beam_size, 0.6, n_best=1)
            positions.append(max(len(row[0][0]) for row in ranked) + 1)

    seconds = timed(search, repeats)
    sentences = sum(len(ids) for ids in batches)
    return dict(
        seconds=seconds,
        sentences_per_s=sentences / seconds,
        positions=sum(positions),
        ms_per_position=1e3 * seconds / sum(positions),
    )


def keras_parts(translator, batches: list, rows: int, calls: int) -> dict:
    """Milliseconds of the Keras engine's step pieces at `rows` rows (see the module doc)."""
    import numpy as np
    from keras import ops

    from mintransformer.backend.compilation import compile_inference

    steps, model = translator.steps, translator.model
    variables = model.variables
    source = np.repeat(batches[-1][:1], rows, axis=0)  # the longest source, `rows` times
    tokens = ops.convert_to_tensor(np.full((rows,), 5, "int32"))
    index = ops.convert_to_tensor(5, "int32")

    def per_call(fn, *args):
        return 1e3 * timed(lambda: ops.convert_to_numpy(fn(*args)[0]), calls)

    def read_every_variable(x):
        firsts = [ops.cast(ops.reshape(v, (-1,))[0], "float32") for v in variables]
        return (x + ops.sum(ops.stack(firsts)),)

    floor = compile_inference(read_every_variable, variables, jit_compile=True)
    step = compile_inference(steps.step_tensors, variables, jit_compile=True)
    head = compile_inference(
        lambda h: ops.top_k(model.next_token_log_probs(h), 4), variables, jit_compile=True
    )
    parts = dict(floor_ms=per_call(floor, ops.convert_to_tensor(0.0)))
    for slots in (32, 128):
        state = steps.start_tensors(ops.convert_to_tensor(source), slots)
        parts[f"step_{slots}_ms"] = per_call(step, tokens, index, state)
    hidden = ops.zeros((rows, 1, model.config["d_model"]))
    parts["head_ms"] = per_call(head, hidden)
    return parts


def onnx_split(translator, batches: list, beam_size: int) -> dict:
    """Seconds of one pass inside onnxruntime (encoder, step) and in all."""
    inside = collections.Counter()
    sessions = dict(encoder=translator.steps.encoder, step=translator.steps.decoder_step)
    for name, session in sessions.items():
        run = session.run

        def counted(*args, name=name, run=run, **kwargs):
            started = time.perf_counter()
            outputs = run(*args, **kwargs)
            inside[name] += time.perf_counter() - started
            return outputs

        session.run = counted
    started = time.perf_counter()
    for ids in batches:
        translator._ranked(ids, beam_size, 0.6, n_best=1)
    total = time.perf_counter() - started
    for session in sessions.values():
        del session.run
    return dict(total_s=total, encoder_s=inside["encoder"], step_s=inside["step"])


def onnx_operators(translator, folder: Path, batches: list, rows: int, positions: int) -> dict:
    """onnxruntime's profile of `positions` steps at `rows` rows: microseconds per step by
    op type, largest first."""
    import numpy as np
    import onnxruntime

    from mintransformer.export.onnx_engine import OnnxSteps

    steps = translator.steps
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(tempfile.gettempdir()) / "ort_profile")
    session = onnxruntime.InferenceSession(
        str(folder / "decoder_step.onnx"), options, providers=["CPUExecutionProvider"]
    )
    profiled = OnnxSteps(
        steps.encoder,
        session,
        **steps.cache_layout,
        max_length=steps.max_length,
        source_positions=steps.source_positions,
    )
    state = profiled.start(np.repeat(batches[-1][:1], rows, axis=0))
    tokens = np.full((rows,), 5, "int32")
    for index in range(positions):
        _, state = profiled.step(tokens, index, state)
    path = session.end_profiling()
    events = json.loads(Path(path).read_text())
    Path(path).unlink()
    by_type = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_type[event["args"]["op_name"]] += event["dur"]
    return {op: round(us / positions, 1) for op, us in by_type.most_common()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a translation run with R/onnx and R/ct2")
    parser.add_argument("--src", required=True, help="source sentences, one a line")
    parser.add_argument("--sentences", type=int, default=128, help="sources at batch 32")
    parser.add_argument("--sentences-alone", type=int, default=32, help="sources at batch 1")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes (median)")
    parser.add_argument("--calls", type=int, default=50, help="timed calls per step piece")
    parser.add_argument("--json", default=str(RESULTS_DIR / "engine_profile.json"))
    args = parser.parse_args(argv)

    from mintransformer.inference.translator import Translator

    run = Path(args.run)
    texts = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.sentences]
    translators = {
        "keras": Translator.from_run(run, engine="keras", mixed_precision=False),
        "onnx": Translator.from_run(run / "onnx", engine="onnx"),
        "ct2": Translator.from_run(run / "ct2", engine="ct2"),
    }
    searches, parts, onnx = [], [], []
    for setting, (beam_size, batch_size) in SETTINGS.items():
        chosen = texts[: args.sentences_alone] if batch_size == 1 else texts
        batches = id_batches(translators["keras"], chosen, batch_size)
        for engine in ENGINES:
            result = whole_search(translators[engine], batches, beam_size, args.repeats)
            searches.append(dict(setting=setting, engine=engine, **result))
            print(json.dumps(searches[-1]), flush=True)
        rows = beam_size * batch_size
        keras_search = searches[-3]
        part = dict(setting=setting, rows=rows, in_search_ms=keras_search["ms_per_position"])
        part.update(keras_parts(translators["keras"], batches, rows, args.calls))
        parts.append(part)
        print(json.dumps(part), flush=True)
        split = onnx_split(translators["onnx"], batches, beam_size)
        onnx.append(dict(setting=setting, **split))
        print(json.dumps(onnx[-1]), flush=True)
    operators = {
        rows: onnx_operators(translators["onnx"], run / "onnx", batches, rows, 24)
        for rows in (1, 32)
    }

    ct2_ms = {r["setting"]: r["ms_per_position"] for r in searches if r["engine"] == "ct2"}
    print()
    print(
        format_table(
            ["setting", "engine", "sent/s", "positions", "ms / position", "this / CT2's"],
            [
                [
                    r["setting"],
                    r["engine"],
                    f"{r['sentences_per_s']:.1f}",
                    r["positions"],
                    f"{r['ms_per_position']:.3f}",
                    f"{r['ms_per_position'] / ct2_ms[r['setting']]:.2f}",
                ]
                for r in searches
            ],
        )
    )
    print()
    print(
        format_table(
            [
                "setting",
                "rows",
                "XLA call floor",
                "step, 32 slots",
                "step, 128 slots",
                "head",
                "step in search",
            ],
            [
                [
                    p["setting"],
                    p["rows"],
                    f"{p['floor_ms']:.3f}",
                    f"{p['step_32_ms']:.3f}",
                    f"{p['step_128_ms']:.3f}",
                    f"{p['head_ms']:.3f}",
                    f"{p['in_search_ms']:.3f}",
                ]
                for p in parts
            ],
        )
    )
    print()
    print(
        format_table(
            ["setting", "onnxruntime: encoder", "onnxruntime: step", "Python around it"],
            [
                [
                    o["setting"],
                    f"{o['encoder_s'] / o['total_s']:.0%}",
                    f"{o['step_s'] / o['total_s']:.0%}",
                    f"{1 - (o['encoder_s'] + o['step_s']) / o['total_s']:.0%}",
                ]
                for o in onnx
            ],
        )
    )
    for rows, by_type in operators.items():
        print(f"\nonnxruntime step graph at {rows} rows, 24 positions, us per step by op type:")
        print(", ".join(f"{op} {us}" for op, us in list(by_type.items())[:12]))
    report = dict(
        benchmark="engine_profile",
        machine=machine(),
        versions=versions(),
        settings=vars(args),
        searches=searches,
        keras_parts=parts,
        onnx_split=onnx,
        onnx_operators_us_per_step=operators,
    )
    write_json(report, args.json)
    print(f"report: {args.json}")


if __name__ == "__main__":
    main()
