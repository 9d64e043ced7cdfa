"""Smoke tests of the benchmark harness: shrunk configs, ours only, one step each.

They check that the scripts run and write the JSON they promise, never how fast anything is.
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import (
    cache_length,
    decoding,
    decoding_precision,
    gemm_floor,
    kill_resume,
    step_ablation,
    train_step,
    translation_throughput,
)
from benchmarks.common import UnavailableError, keras_backend, time_in_turns
from mintransformer.runs.directory import RunDirectory

ROOT = Path(__file__).resolve().parents[1]

ONE_STEP = ["--tiny", "--steps", "1", "--warmup", "0", "--only", "ours"]


def test_train_step_writes_timings_for_ours(tmp_path):
    path = tmp_path / "train_step.json"
    train_step.main([*ONE_STEP, "--precision", "fp32", "--json", str(path)])

    report = json.loads(path.read_text())
    assert {"meta", "configs", "matmul", "results", "skipped"} <= set(report)
    assert report["matmul"]["peak_gflops"]["fp32"] > 0
    (line,) = report["meta"]["runtime"].values()  # one backend, its runtime line
    assert set(report["meta"]["runtime"]) == {keras_backend()} and line.startswith("runtime:")
    assert {"flops_per_step", "params_nonembedding", "tokens_per_step"} <= set(
        report["configs"]["A"]
    )
    timed = {row["config"] for row in report["results"]}
    skipped = {skip["config"] for skip in report["skipped"]}
    assert "A" in timed and timed | skipped == {"A", "B", "Bn", "B16", "B16n"}
    for row in report["results"]:
        assert row["implementation"] == "ours" and row["precision"] == "fp32"
        assert row["median_ms"] > 0 and row["tokens_per_s"] > 0 and row["gflops"] > 0
        assert row["fraction_of_peak"] > 0
        assert row["ratio_to_best_peer"] is None  # no peers were run


def test_each_implementation_is_compared_in_its_faster_precision():
    def row(implementation, backend, precision, ms, config="A"):
        return dict(
            config=config,
            implementation=implementation,
            backend=backend,
            precision=precision,
            median_ms=ms,
        )

    rows = [
        row("ours", "tensorflow", "fp32", 400.0),
        row("ours", "tensorflow", "bf16", 300.0),
        row("ours", "jax", "fp32", 600.0),
        row("keras-hub", "tensorflow", "fp32", 500.0),
        row("keras-hub", "tensorflow", "bf16", 450.0),
        row("torch", "torch-eager", "bf16", 420.0),
        row("ours", "tensorflow", "fp32", 100.0, config="B"),  # no peer: no comparison
    ]
    (best,) = train_step.best_precision(rows)
    assert best["ours"] == "ours [tensorflow] bf16" and best["ours_ms"] == 300.0
    assert best["best_peer"] == "torch [torch-eager] bf16"
    assert best["ratio"] == pytest.approx(1.4)


def test_runners_are_timed_in_turns_and_failures_do_not_stop_the_others():
    calls = []

    def steps_of(name):
        return lambda: lambda: calls.append(name)

    def unavailable():
        raise UnavailableError("not installed")

    def breaks_on_third_call():
        count = []

        def step():
            count.append(1)
            if len(count) == 3:  # the warm-up call, then two timed ones
                raise RuntimeError("out of memory")

        return step

    builders = {
        "a": steps_of("a"),
        "missing": unavailable,
        "breaks": breaks_on_third_call,
        "b": steps_of("b"),
    }
    measured = time_in_turns(builders, steps=3, warmup=1)

    assert calls == ["a", "b", "a", "b", "a", "b", "a", "b"]  # warm-ups, then rounds
    assert list(measured) == list(builders)
    for name in "ab":
        times, reason = measured[name]
        assert len(times) == 3 and reason is None
    assert measured["missing"] == ([], "not installed")
    broken_times, broken = measured["breaks"]
    assert broken_times == [] and broken.startswith("failed: RuntimeError: out of memory")


def test_decoding_writes_timings_for_ours(tmp_path):
    path = tmp_path / "decoding.json"
    decoding.main([*ONE_STEP, "--batches", "1,2", "--json", str(path)])

    report = json.loads(path.read_text())
    assert {"meta", "results", "ratios", "skipped"} <= set(report)
    timed = {(row["implementation"], row["batch"], row["search"]) for row in report["results"]}
    assert timed == {
        (name, batch, search)
        for name in (decoding.CACHED, decoding.RECOMPUTE)
        for batch in (1, 2)
        for search in ("greedy", "beam")
    }
    assert all(row["median_ms"] > 0 for row in report["results"])
    assert all(ratio["recompute_over_cached"] > 0 for ratio in report["ratios"])


def test_decoding_times_the_onnx_export_on_tensorflow(tmp_path):
    pytest.importorskip("onnxruntime", reason="the ONNX rows need onnxruntime (the export extra)")
    pytest.importorskip("tf2onnx", reason="the ONNX rows need tf2onnx (the export extra)")
    if keras_backend() != "tensorflow":
        pytest.skip("exporting to ONNX runs on TensorFlow only")
    path = tmp_path / "decoding.json"
    decoding.main([*ONE_STEP[:-1], "onnx", "--batches", "1", "--json", str(path)])

    report = json.loads(path.read_text())
    timed = {(row["implementation"], row["search"]) for row in report["results"]}
    names = (decoding.ONNX_FP32, decoding.ONNX_INT8)
    assert timed == {(name, search) for name in names for search in ("greedy", "beam")}


@pytest.mark.slow
def test_translation_throughput_measures_ours_on_real_batches(tmp_path, shared_data_dir):
    path = tmp_path / "throughput.json"
    args = ["--data", str(shared_data_dir / "multi30k"), "--pairs", "300", "--epochs", "2"]
    translation_throughput.main([*args, "--precisions", "fp32,bf16", "--json", str(path)])

    report = json.loads(path.read_text())
    (fp32,) = report["runs"]["ours fp32"]
    (bf16,) = report["runs"]["ours bf16"]
    assert len(fp32["epoch_seconds"]) == 2 and fp32["steps_per_epoch"] >= 1
    # 300 sentence pairs, each with an end token on both sides.
    assert fp32["real_tokens_per_epoch"] > 300 * 2 * 2
    assert bf16["real_tokens_per_epoch"] == fp32["real_tokens_per_epoch"]
    assert report["median_tokens_per_s"]["ours fp32"] == fp32["tokens_per_s"] > 0
    assert report["best_precision_tokens_per_s"]["ours"] == max(
        fp32["tokens_per_s"], bf16["tokens_per_s"]
    )


@pytest.mark.slow
def test_kill_resume_ends_on_the_uninterrupted_weights_bit_for_bit(tmp_path):
    path = tmp_path / "kill_resume.json"
    kill_resume.main(["--kills", "2", "--epochs", "4", "--seed", "3", "--json", str(path)])

    report = json.loads(path.read_text())
    assert len(report["kills"]) == 2 and report["reference_seconds"] > 0
    # Seed 3 targets epochs 0 and 2 of 4: at least the second kill lands mid-run, after
    # checkpoints that the resume must continue from (kill_in_epoch read each back whole).
    assert any(kill["killed"] and kill["epochs_on_disk"] for kill in report["kills"])
    assert report["comparison"]["tensors"] > 0
    assert report["comparison"]["bit_for_bit"], report["comparison"]


# Run as `python -c` with the run directory and the checkpoint name as arguments: trains
# like `kill_resume`, and SIGKILLs itself inside the write of that checkpoint, after its
# bytes are in the temporary file and before the rename.
_DIE_WHILE_WRITING = """
import os, signal, sys
from benchmarks.kill_resume import train_command

run, name = sys.argv[1], sys.argv[2]
fsync = os.fsync

def fsync_or_die(fd):
    if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp") and name in os.readlink(
        f"/proc/self/fd/{fd}"
    ):
        os.kill(os.getpid(), signal.SIGKILL)
    fsync(fd)

os.fsync = fsync_or_die
from mintransformer.cli import main
sys.exit(main(train_command(__import__("pathlib").Path(run), 3)[3:]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name open files")
def test_a_kill_inside_a_checkpoint_write_resumes_to_the_same_weights(tmp_path):
    uninterrupted, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    kill_resume.train_to_the_end(uninterrupted, 3)
    env = {**kill_resume.environment(), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    died = subprocess.run(
        [sys.executable, "-c", _DIE_WHILE_WRITING, str(killed), "epoch-0002.npz"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=600,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    run = RunDirectory(killed)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1]  # epoch 2 never landed
    assert list(run.checkpoint_dir.glob(".epoch-0002.npz.*.tmp"))  # its half-done write
    kill_resume.train_to_the_end(killed, 3)
    comparison = kill_resume.compare_weights(run.weights_path, uninterrupted / "model.npz")
    assert comparison["bit_for_bit"], comparison


def test_step_ablation_times_every_variant_against_the_baseline(tmp_path):
    path = tmp_path / "step_ablation.json"
    step_ablation.main(["--tiny", "--rounds", "1", "--warmup", "0", "--json", str(path)])

    report = json.loads(path.read_text())
    names = [row["variant"] for row in report["results"]]
    assert names[0] == step_ablation.BASELINE
    assert {"no dropout", "SGD instead of Adam", "LayerNorm as scale and shift"} <= set(names)
    assert report["results"][0]["baseline_over_variant"] == 1.0
    assert all(row["median_ms"] > 0 for row in report["results"])


def test_gemm_floor_counts_the_flops_train_step_counts():
    for shape in (train_step.CONFIGS["A"], train_step.TINY_CONFIGS["A"]):
        counted = gemm_floor.flops(gemm_floor.translation_products(shape))
        assert counted == train_step.translation_flops(shape)["flops_per_step"]
    for shape in (train_step.CONFIGS["B"], train_step.TINY_CONFIGS["B"]):
        counted = gemm_floor.flops(gemm_floor.classifier_products(shape, shape.key_dim))
        assert counted == train_step.classifier_flops(shape)["flops_per_step"]
        narrow = shape.d_model // shape.num_heads
        counted = gemm_floor.flops(gemm_floor.classifier_products(shape, narrow))
        assert counted == train_step.classifier_flops(shape, key_dim=narrow)["flops_per_step"]


def test_gemm_floor_runs_every_product_with_its_gradients():
    products = [(0, 5, 3, 4), (2, 6, 3, 6)]
    steps = gemm_floor.with_backward(products)
    assert len(steps) == 3 * len(products)
    for (product, transpose_a, transpose_b), expected in zip(
        steps[:3], [((5, 3), (3, 4)), ((5, 4), (3, 4)), ((5, 3), (5, 4))], strict=True
    ):
        assert gemm_floor.operand_shapes(product, transpose_a, transpose_b) == expected
    timed = gemm_floor.floors(products, steps=1, warmup=0)
    assert "tensorflow" in timed and all(ms > 0 for ms in timed.values())


def test_gemm_floor_counts_every_attention_map_of_a_step():
    a, b = train_step.CONFIGS["A"], train_step.CONFIGS["B"]
    maps = gemm_floor.attention_maps(a)
    assert len(maps) == 3 * a.num_layers
    source, target = a.source_length, a.target_length
    assert set(maps) == {
        (a.batch, a.num_heads, queries, keys)
        for queries, keys in [(source, source), (target, target), (target, source)]
    }
    assert gemm_floor.attention_maps(b) == [(b.batch, b.num_heads, b.length, b.length)]


def test_gemm_floor_map_work_is_the_masked_softmax_gradient():
    import tensorflow as tf

    rng = np.random.default_rng(3)
    scores = rng.standard_normal((2, 3, 4, 5))
    upstream = rng.standard_normal((2, 3, 4, 5))
    keep = rng.random((2, 1, 1, 5)) > 0.3
    keep[..., 0] = True
    gradient = gemm_floor.weights_backward(
        tf.constant(scores, tf.float32),
        tf.constant(keep),
        tf.constant(upstream, tf.float32),
        rate=0.0,
        seed_generator=None,
    )

    shifted = np.where(keep, scores, -np.inf)
    weights = np.exp(shifted - shifted.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    expected = weights * (upstream - (weights * upstream).sum(-1, keepdims=True))
    np.testing.assert_allclose(gradient.numpy(), expected, atol=1e-5)


def test_gemm_floor_bounds_add_the_maps_then_the_output_softmax_to_the_products():
    report = {
        "floors": {"A": {"floor_ms": 300.0, "gflop": 41.8}},
        "maps": {"A": {"maps": 12, "ms": 40.0}},
        "output_softmax": {"A": {"rows": 2304, "vocab": 8000, "ms": 20.0}},
        "steps": {
            "A": [
                {"implementation": train_step.OURS, "backend": "tensorflow", "median_ms": 400.0},
                {"implementation": "keras-hub", "backend": "tensorflow", "median_ms": 600.0},
                {"implementation": "tf-tutorial", "backend": "tf-xla", "median_ms": 450.0},
            ]
        },
    }
    products, with_maps, with_softmax = gemm_floor.bounds(report)
    assert "best peer tf-tutorial [tf-xla] 450.0 ms" in products
    assert products.endswith("at most 1.50x faster than that peer")  # 450 / 300
    assert "340.0 ms: at most 1.32x" in with_maps  # 450 / (300 + 40)
    assert "(2304, 8000) logits (20.0 ms) 360.0 ms: at most 1.25x" in with_softmax


def test_gemm_floor_writes_floors_and_our_steps(tmp_path):
    path = tmp_path / "gemm_floor.json"
    gemm_floor.main(
        ["--tiny", "--steps", "1", "--warmup", "0", "--only", "ours", "--json", str(path)]
    )

    report = json.loads(path.read_text())
    assert set(report["floors"]) == {"A", "B", "B, key_dim 8"}
    assert all(floor["floor_ms"] > 0 for floor in report["floors"].values())
    for config in ("A", "B"):
        shape = train_step.TINY_CONFIGS[config]
        maps = report["maps"][config]
        assert maps["maps"] == len(gemm_floor.attention_maps(shape)) and maps["ms"] > 0
        assert maps["dropout"] == shape.dropout
    a = train_step.TINY_CONFIGS["A"]
    assert set(report["output_softmax"]) == {"A"}
    softmax = report["output_softmax"]["A"]
    assert (softmax["rows"], softmax["vocab"]) == (a.batch * a.target_length, a.target_vocab)
    assert softmax["ms"] > 0
    for config in "AB":
        (ours,) = report["steps"][config]
        assert ours["implementation"] == "ours" and ours["median_ms"] > 0


@pytest.mark.slow
def test_serving_benchmark_reports_each_server_setting_against_offline_and_the_cli(
    tmp_path, trained_run
):
    output = tmp_path / "serving.json"
    command = [sys.executable, "-m", "benchmarks.serving", "--run", str(trained_run.path)]
    command += ["--requests", "6", "--clients", "1,2", "--cli", "1", "--repeats", "2"]
    command += ["--short", "3", "--max-batch-size", "2", "--output", str(output)]
    command += ["--compile-cache", str(tmp_path / "compiled")]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=900)

    report = json.loads(output.read_text())
    assert report["backend"] in ("tensorflow", "jax", "torch")
    ceilings = report["offline_batch32"]["keras"]
    assert ceilings["length_sorted"] > 0 and ceilings["arrival_order"] > 0
    assert 0 < ceilings["arrival_of_sorted"] < 3
    rows = report["runs"]
    assert {(row["batching"], row["clients"]) for row in rows} == {
        (batching, clients) for batching in (True, False) for clients in (1, 2)
    }
    for row in rows:
        assert row["sentences_per_s"] > 0 and row["p50_ms"] <= row["p99_ms"]
        passes = row["passes"]
        assert len(passes) == 2 and all(p["offline"] > 0 for p in passes)
        ratios = [p["sentences_per_s"] / p["offline"] for p in passes]
        assert row["of_offline"] == pytest.approx(np.median(ratios), abs=0.01)
        assert row["differ_from_offline"] == 0  # a small fp32 model: the same answers
        assert 0 < row["clients_cpu_share"] <= 1.05  # CPU time within the cores' time
    assert report["cli_per_sentence"]["sentences"] == 1
    assert report["cli_per_sentence"]["sentences_per_s"] > 0
    firsts = report["first_requests"]
    assert [row["batching"] for row in firsts] == [True, False]
    for row in firsts:
        assert row["requests"] == [1, 1, 1, 6]  # three sentences alone, then up to 8 at once
        assert all(ms > 0 for ms in row["first_ms"] + row["again_ms"])
        ratios = [f / a for f, a in zip(row["first_ms"], row["again_ms"], strict=True)]
        assert row["worst_first_over_again"] == pytest.approx(max(ratios), rel=0.05)
        assert row["warm_up_s"] > 0
    alone = report["short_alone"]
    assert [row["batching"] for row in alone] == [True, False]
    for row in alone:
        assert row["sentences"] == 3 and row["words"][0] <= row["words"][1]
        assert 0 < row["p50_ms"] <= row["p95_ms"]
        assert row["in_process_p50_ms"] > 0
        assert -row["in_process_p50_ms"] < row["added_by_serving_p50_ms"] < row["p95_ms"]


@pytest.mark.slow
def test_decoding_precision_benchmark_decodes_a_run_in_both_precisions(tmp_path, trained_run):
    from mintransformer.data.corpora import load_corpus

    test = load_corpus(trained_run.config().data)["test"][:12]
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(source for source, _ in test) + "\n")
    ref.write_text("\n".join(target for _, target in test) + "\n")
    output = tmp_path / "decoding_precision.json"
    decoding_precision.main(
        ["--run", str(trained_run.path), "--src", str(src), "--ref", str(ref)]
        + ["--batch-size", "4", "--beam", "2", "--rounds", "1", "--json", str(output)]
    )
    report = json.loads(output.read_text())["results"]
    assert set(report) == {"greedy", "beam 2"}
    for search in report.values():
        assert set(search["sentences_per_s"]) == set(search["bleu"]) == {"fp32", "bf16"}
        assert all(speed > 0 for speed in search["sentences_per_s"].values())
        assert all(0.0 <= bleu <= 100.0 for bleu in search["bleu"].values())


def test_cache_length_benchmark_decodes_the_same_tokens_with_every_cache(tmp_path, trained_run):
    from mintransformer.data.corpora import load_corpus

    src = tmp_path / "src.txt"
    src.write_text(
        "\n".join(source for source, _ in load_corpus(trained_run.config().data)["test"][:6])
    )
    output = tmp_path / "cache_length.json"
    cache_length.main(
        ["--run", str(trained_run.path), "--src", str(src), "--caches", "24,12"]
        + ["--steps", "10", "--lone", "2", "--batch-size", "4", "--rounds", "1"]
        + ["--json", str(output)]
    )
    report = json.loads(output.read_text())["results"]
    expected = {f"{c}, {w}" for c in ("fixed", "to the end") for w in ("alone", "batch 4")}
    assert set(report) == expected
    for name, comparison in report.items():
        assert comparison["same_tokens"] is True, name
        assert all(ms > 0 for ms in comparison["ms_per_call"].values())
    assert set(report["fixed, alone"]["ms_per_call"]) == {"12 slots", "24 slots"}
    assert set(report["to the end, batch 4"]["ms_per_call"]) == {"24 slots", "grown"}


def test_cache_length_benchmark_refuses_more_steps_than_the_shortest_cache(capsys):
    with pytest.raises(SystemExit):
        cache_length.parse_args(["--run", "r", "--src", "s", "--caches", "32,16", "--steps", "20"])
    assert "--steps 20 exceeds the shortest cache (16)" in capsys.readouterr().err


@pytest.mark.parametrize(("config", "with_dropout"), [("Bn", "B"), ("B16n", "B16")])
def test_the_n_configs_compare_only_implementations_without_attention_weight_dropout(
    config, with_dropout
):
    shape = train_step.CONFIGS[config]
    assert shape.attention_dropout == 0.0 and shape.dropout > 0
    assert dataclasses.replace(shape, attention_dropout=None) == train_step.CONFIGS[with_dropout]

    def names(precision):
        found = train_step.candidates(config, shape, precision, "all")
        return [candidate.implementation for candidate in found]

    assert names("fp32") == ["ours", "tf-tutorial"]
    assert names("bf16") == ["ours"]
    assert "keras-hub" in [
        c.implementation
        for c in train_step.candidates("B16", train_step.CONFIGS["B16"], "fp32", "all")
    ]


def test_decoding_profile_reports_where_each_backend_spends_a_decode(tmp_path, trained_run):
    from benchmarks import decoding_profile

    output = tmp_path / "profile.json"
    decoding_profile.main(
        ["--run", str(trained_run.path), "--backends", "tensorflow,torch", "--sentences", "3"]
        + ["--top", "5", "--json", str(output)]
    )
    reports = {r["backend"]: r for r in json.loads(output.read_text())["results"]}
    assert set(reports) == {"tensorflow", "torch"}
    for report in reports.values():
        assert report["sentences"] == 3 and report["sentences_per_s"] > 0
        assert 0 <= report["layer_call_share"] <= 1 and len(report["top"]) == 5
    # Once compiled, no backend runs a Keras layer call: TensorFlow decodes in compiled
    # calls, PyTorch runs the traced graphs of its loop bodies.
    assert reports["tensorflow"]["layer_calls"] == reports["torch"]["layer_calls"] == 0


def test_backend_decoding_times_each_backend_on_the_same_sentences(tmp_path, trained_run):
    from benchmarks import backend_decoding

    output = tmp_path / "backends.json"
    backend_decoding.main(
        ["--run", str(trained_run.path), "--backends", "tensorflow,torch", "--sentences", "6"]
        + ["--sentences-alone", "2", "--repeats", "1", "--json", str(output)]
    )
    rows = json.loads(output.read_text())["rows"]
    assert {(r["backend"], r["setting"]) for r in rows} == {
        (backend, setting)
        for backend in ("tensorflow", "torch")
        for setting in backend_decoding.SETTINGS
    }
    for row in rows:
        assert row["sentences_per_s"] > 0
        # PyTorch's traced searches choose TensorFlow's tokens.
        assert row["differ_from_tensorflow"] == 0, row
        if row["backend"] == "tensorflow":
            assert row["tensorflow_over_this"] == 1.0


def test_cold_start_times_each_engine_in_fresh_processes(tmp_path, trained_run):
    pytest.importorskip("onnxruntime", reason="the onnx engine needs onnxruntime")
    pytest.importorskip("tf2onnx", reason="exporting needs tf2onnx")
    from benchmarks import cold_start
    from mintransformer.export.onnx_graphs import export_run

    run = tmp_path / "run"
    run.mkdir()
    for path in (trained_run.config_path, trained_run.tokenizer_path, trained_run.weights_path):
        (run / path.name).write_bytes(path.read_bytes())
    export_run(run)  # RUN/onnx; no RUN/ct2, so "ct2" fails and is left out
    output = tmp_path / "cold.json"
    cold_start.main(
        ["--run", str(run), "--text", "forty-one", "--repeats", "2", "--json", str(output)]
        + ["--engines", "keras-torch,onnx,ct2,auto"]
    )
    report = json.loads(output.read_text())
    assert list(report["results"]) == ["keras-torch", "onnx", "auto"]
    assert "no CTranslate2 export" in report["failed"]["ct2"]
    outputs = {result["output"] for result in report["results"].values()}
    assert len(outputs) == 1 and outputs != {""}  # the fp32 export translates as Keras does
    for result in report["results"].values():
        assert len(result["seconds"]) == 2 and result["median_s"] > 0
    stages = report["keras_stages"]["torch"]
    assert list(stages) == [
        "import keras and its backend", "import the translator", "load the run",
        "first translation", "second translation"]  # fmt: skip
    assert all(seconds > 0 for seconds in stages.values())


def test_end_to_end_writes_the_tokenizer_ctranslate2_reads_where_only_its_model_exists(
    tmp_path, trained_run
):
    pytest.importorskip("ctranslate2", reason="the ct2 engine needs ctranslate2")
    from benchmarks import translate_end_to_end
    from mintransformer.interop import ct2_export

    run = tmp_path / "run"
    run.mkdir()
    for path in (trained_run.config_path, trained_run.tokenizer_path, trained_run.weights_path):
        (run / path.name).write_bytes(path.read_bytes())
    ct2_export.export_run(run)  # RUN/ct2, as `mintransformer export --format ct2` writes it
    assert (run / "ct2" / "model.bin").is_file() and not (run / "hf").exists()
    translate_end_to_end.prepare_export(run, "ct2")
    translate = translate_end_to_end.open_ctranslate2(run, "ct2")
    assert translate(["forty-one"], 1, 1, 0.0)[0]


@pytest.mark.slow
def test_end_to_end_runs_the_keras_engine_on_jax_with_the_same_translations(tmp_path, trained_run):
    pytest.importorskip("jax", reason="the keras-jax engine needs JAX")
    output = tmp_path / "end_to_end.json"
    sources = tmp_path / "sources.txt"
    sources.write_text("forty-one\nseven hundred and two\nnine\n", encoding="utf-8")
    command = [sys.executable, "-m", "benchmarks.translate_end_to_end"]
    command += ["--run", str(trained_run.path), "--src", str(sources), "--batches", "2"]
    command += ["--beams", "1,2", "--engines", "keras,keras-jax", "--json", str(output)]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=600)

    results = {r["engine"]: r for r in json.loads(output.read_text())["results"]}
    assert set(results) == {"keras", "keras-jax"} and results["keras-jax"]["backend"] == "jax"
    for entry in results["keras-jax"]["passes"]:
        assert entry["sentences_per_s"] > 0
        assert entry["same_as_keras"] == 3  # fp32: the same tokens on both backends
