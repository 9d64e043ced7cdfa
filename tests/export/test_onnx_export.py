"""ONNX export and the onnxruntime engine: the same scores and tokens as Keras, without Keras."""

import json
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX engine needs onnxruntime (the export extra)")
pytest.importorskip("tf2onnx", reason="exporting needs tf2onnx (the export extra)")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="exporting to ONNX runs on TensorFlow only"
)

from mintransformer import cli  # noqa: E402
from mintransformer.config import ClassificationConfig, make_config  # noqa: E402
from mintransformer.data.corpora import load_corpus  # noqa: E402
from mintransformer.data.lengths import pad_batch  # noqa: E402
from mintransformer.decoding.beam import beam_search  # noqa: E402
from mintransformer.decoding.greedy import greedy_search  # noqa: E402
from mintransformer.decoding.steps import CachedLanguageModelSteps, CachedSteps  # noqa: E402
from mintransformer.export import onnx_graphs as export  # noqa: E402
from mintransformer.export.onnx_engine import (  # noqa: E402
    KeyValueCache,
    OnnxLanguageModelSteps,
    inference_session,
    open_export,
)
from mintransformer.export.onnx_graphs import export_run  # noqa: E402
from mintransformer.inference.classifier import Classifier  # noqa: E402
from mintransformer.inference.engines import EngineChoice, choose_engine  # noqa: E402
from mintransformer.inference.generator import Generator  # noqa: E402
from mintransformer.inference.translator import Translator  # noqa: E402
from mintransformer.runs.directory import RunDirectory  # noqa: E402
from mintransformer.runs.loading import load_trained  # noqa: E402
from mintransformer.training import classification, language_model  # noqa: E402
from tests.conftest import file_contents, train_in  # noqa: E402
from tests.training.test_classification import TINY, synthetic_reviews  # noqa: E402

FRAMEWORKS = ("keras", "tensorflow", "jax", "torch", "tf2onnx")


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def copy_run(run: RunDirectory, path) -> RunDirectory:
    """The run's config, tokenizer and final weights in a new folder (no checkpoints)."""
    path.mkdir()
    for source in (run.config_path, run.tokenizer_path, run.weights_path):
        shutil.copy(source, path / source.name)
    return RunDirectory(path)


@pytest.fixture(scope="module")
def translation_export(trained_run, tmp_path_factory):
    """`(Translator, OnnxTranslator, export folder)` of the session's trained translation run."""
    folder = export_run(trained_run.path, tmp_path_factory.mktemp("export") / "onnx")
    onnx_translator = Translator.from_run(folder, engine="onnx")
    return Translator.from_run(trained_run.path), onnx_translator, folder


@pytest.fixture(scope="module")
def classification_run(tmp_path_factory):
    """A tiny sentiment classifier (two epochs) and its export in `RUN/onnx`."""
    config = ClassificationConfig(labels=["neg", "pos"], **{**TINY, "epochs": 2})
    run = RunDirectory.create(tmp_path_factory.mktemp("runs") / "sentiment", config)
    splits = {"train": synthetic_reviews(300, seed=0), "val": synthetic_reviews(30, seed=1)}
    train_in(classification, run, splits)
    export_run(run.path)
    return run


@pytest.fixture(scope="module")
def language_model_run(tmp_path_factory):
    """A tiny language model (one epoch on repeated sentences, gelu) and its export."""
    folder = tmp_path_factory.mktemp("lm")
    (folder / "text.txt").write_text("the cat sat on the mat\na dog ran over the hill\n" * 60)
    config = make_config(
        "language_model",
        text=str(folder / "text.txt"),
        num_layers=1,
        d_model=16,
        num_heads=2,
        dff=32,
        max_length=16,
        vocab_size=60,
        epochs=1,
    )
    language_model.train(folder / "run", config, verbose=0)
    export_run(folder / "run")
    return RunDirectory(folder / "run")


def sources(translator, count: int, seed: int = 0) -> list[list[int]]:
    """`count` encoded held-out sources of the numbers corpus, of varied lengths."""
    pairs = load_corpus(translator.config.data)["test"]
    picked = np.random.default_rng(seed).choice(len(pairs), count, replace=False)
    return translator.encode_sources([pairs[i][0] for i in picked])


def assert_same_scores(keras_steps, onnx_steps, keras_state, onnx_state, tokens):
    """Six positions of greedy decoding from `tokens` `(n,)`: the ONNX steps' scores within
    1e-4 of Keras'."""
    for index in range(6):
        expected, keras_state = keras_steps.step(tokens, index, keras_state)
        got, onnx_state = onnx_steps.step(tokens, index, onnx_state)
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
        tokens = expected.argmax(-1).astype("int32")


@pytest.mark.parametrize("batch", [1, 5])
def test_exported_decoder_step_log_probs_match_keras(translation_export, batch):
    keras_translator, onnx_translator, _ = translation_export
    ids = pad_batch(sources(keras_translator, batch, seed=batch), pad_id=0, multiple=1)
    keras_steps = CachedSteps(keras_translator.model, 10)
    onnx_steps = onnx_translator.steps
    tokens = np.full(batch, keras_translator.tokenizer.start_id, "int32")
    assert_same_scores(
        keras_steps, onnx_steps, keras_steps.start(ids), onnx_steps.start(ids), tokens
    )


def test_kept_rows_decode_as_they_did_in_the_whole_batch(translation_export):
    keras_translator, onnx_translator, _ = translation_export
    ids = pad_batch(sources(keras_translator, 5, seed=7), pad_id=0, multiple=1)
    steps = onnx_translator.steps
    tokens = np.full(5, keras_translator.tokenizer.start_id, "int32")
    scores, state = steps.step(tokens, 0, steps.start(ids))
    tokens = scores.argmax(-1).astype("int32")
    rows = np.array([3, 0])
    kept = steps.keep_rows(state, rows)  # before `step` writes the whole batch's state
    whole_batch, _ = steps.step(tokens, 1, state)
    kept_scores, _ = steps.step(tokens[rows], 1, kept)
    np.testing.assert_allclose(kept_scores, whole_batch[rows], atol=1e-5, rtol=0)


def test_greedy_and_beam_tokens_match_keras(translation_export):
    keras_translator, onnx_translator, _ = translation_export
    ids = pad_batch(sources(keras_translator, 24), pad_id=0, multiple=1)
    options = dict(start_id=1, end_id=2, max_length=keras_translator.max_output_length)
    keras_steps, onnx_steps = keras_translator.steps, onnx_translator.steps
    assert greedy_search(onnx_steps, ids, **options) == greedy_search(keras_steps, ids, **options)
    onnx_beam, onnx_scores = beam_search(onnx_steps, ids, beam_size=4, **options)
    keras_beam, keras_scores = beam_search(keras_steps, ids, beam_size=4, **options)
    assert onnx_beam == keras_beam
    np.testing.assert_allclose(onnx_scores, keras_scores, atol=1e-4)
    texts = ["three hundred twelve", "", "forty-two thousand six"]
    assert onnx_translator.translate(texts, beam_size=3) == keras_translator.translate(
        texts, beam_size=3
    )


def test_step_graph_normalises_with_one_op_and_returns_only_the_new_slot(translation_export):
    import onnx

    keras_translator, _, folder = translation_export
    graph = onnx.load(folder / "decoder_step.onnx").graph
    op_types = [node.op_type for node in graph.node]
    decoder = keras_translator.model.decoder
    layers = len(decoder.blocks)
    norms = [x for x in decoder._flatten_layers() if isinstance(x, keras.layers.LayerNormalization)]
    assert op_types.count("LayerNormalization") == len(norms) >= 3 * layers
    assert "GlobalAveragePool" not in op_types
    assert [i.name for i in graph.input][-layers:] == [f"cache_{i + 1}" for i in range(layers)]
    new_slot = graph.output[1].type.tensor_type.shape
    assert len(new_slot.dim) == 5  # (layers, 2, n, heads, depth), no cache length


def test_fused_layer_norm_matches_keras(tmp_path):
    norms = [keras.layers.LayerNormalization(epsilon=1e-3) for _ in range(2)]
    rng = np.random.default_rng(0)
    for norm in norms:
        norm.build((None, None, 12))
        norm.set_weights([rng.normal(size=12), rng.normal(size=12)])

    def two_norms(x):
        return norms[1](norms[0](x) * 2.0)

    export.write_graphs({"norms.onnx": (two_norms, [("x", (None, None, 12), "float32")])}, tmp_path)
    import onnx
    import onnxruntime

    graph = onnx.load(tmp_path / "norms.onnx").graph
    assert [node.op_type for node in graph.node].count("LayerNormalization") == 2
    x = rng.normal(size=(3, 5, 12)).astype("float32") * 4 + 1
    got = onnxruntime.InferenceSession(tmp_path / "norms.onnx").run(None, {"x": x})[0]
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(two_norms(x)), atol=1e-5)


def test_key_value_cache_writes_slots_in_place_and_reorders_rows():
    cache = KeyValueCache.zeros(layers=2, heads=3, depth=4, rows=2, max_length=5)
    before = [id(array) for array in cache.arrays]
    new = np.arange(2 * 2 * 2 * 3 * 4, dtype="float32").reshape(2, 2, 2, 3, 4)
    assert cache.write(new, 3) is cache
    assert [id(array) for array in cache.arrays] == before
    for layer, array in enumerate(cache.arrays):
        np.testing.assert_array_equal(array[:, :, :, 3], new[layer])
        assert not array[:, :, :, [0, 1, 2, 4]].any()
    reordered = cache.reorder(np.array([1, 1, 0]))
    assert reordered.arrays[0].shape == (2, 3, 3, 5, 4)
    np.testing.assert_array_equal(reordered.arrays[1][:, 0], cache.arrays[1][:, 1])
    reordered.write(np.zeros((2, 2, 3, 3, 4), "float32"), 3)
    assert cache.arrays[0][:, :, :, 3].any()  # the parent cache is untouched
    with pytest.raises(IndexError, match="past the cache's 5 slots"):
        cache.write(new, 5)


def test_key_value_cache_grows_with_the_output_and_keeps_what_it_held():
    growth = KeyValueCache.GROWTH
    cache = KeyValueCache.zeros(layers=1, heads=2, depth=3, rows=2, max_length=2 * growth + 5)
    assert cache.slots == growth
    written = {}
    rng = np.random.default_rng(0)
    for index in range(2 * growth + 5):
        written[index] = rng.normal(size=(1, 2, 2, 2, 3)).astype("float32")
        cache.write(written[index], index)
        assert cache.slots >= index + 1
    assert cache.slots == 2 * growth + 5  # grown by `GROWTH`, then to the limit
    for index, values in written.items():
        np.testing.assert_array_equal(cache.arrays[0][:, :, :, index], values[0])


def test_exported_classifier_probabilities_match_keras(classification_run):
    keras_classifier = Classifier.from_run(classification_run.path)
    onnx_classifier = Classifier.from_run(classification_run.path, engine="onnx")
    assert onnx_classifier.engine.__module__ == "mintransformer.export.onnx_engine"
    for count, seed in [(1, 4), (7, 5)]:
        texts = [text for text, _ in synthetic_reviews(count, seed)]
        expected = keras_classifier.probabilities(texts)
        np.testing.assert_allclose(onnx_classifier.probabilities(texts), expected, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 3])
def test_exported_language_model_step_logits_match_keras(language_model_run, batch):
    model, _, config = load_trained(language_model_run.path)
    keras_steps = CachedLanguageModelSteps(model, 8)
    folder, manifest, _, _ = open_export(language_model_run.path, type(config))
    session = inference_session(folder.graph_path("lm_step.onnx"))
    onnx_steps = OnnxLanguageModelSteps(session, **manifest["cache"], max_length=8)
    tokens = np.full(batch, 2, "int32")  # </s>: a line starts
    states = keras_steps.start(batch), onnx_steps.start(batch)
    assert_same_scores(keras_steps, onnx_steps, *states, tokens)


def test_generated_text_matches_keras(language_model_run):
    keras_generator = Generator.from_run(language_model_run.path)
    onnx_generator = Generator.from_run(language_model_run.path, engine="onnx")
    prompts = ["the cat", "", "a dog ran"]
    for options in (dict(temperature=0), dict(temperature=1.0, top_k=10, seed=3)):
        expected = keras_generator.generate(prompts, max_new_tokens=8, **options)
        assert onnx_generator.generate(prompts, max_new_tokens=8, **options) == expected


def test_onnx_engine_imports_no_framework(
    translation_export, classification_run, language_model_run, tmp_path
):
    folder = str(translation_export[2])
    script = f"""
import sys
from mintransformer import cli
from mintransformer.inference.classifier import Classifier
from mintransformer.inference.translator import Translator
print(Translator.from_run({folder!r}, engine="onnx").translate(["five"]))
print(Classifier.from_run({str(classification_run.path)!r}, engine="onnx").classify(["superb"]))
cli.main(["generate", "--engine", "onnx", "--run", {str(language_model_run.path)!r}, "the"])
cli.main(["translate", "--engine", "onnx", "--run", {folder!r}, "nine"])
# --engine auto (the default) on runs with an export in RUN/onnx and on an export folder
cli.main(["classify", "--run", {str(classification_run.path)!r}, "superb"])
cli.main(["generate", "--run", {str(language_model_run.path)!r}, "the"])
cli.main(["translate", "--run", {folder!r}, "nine"])
print(sorted(m for m in sys.modules if m.split(".")[0] in {FRAMEWORKS!r}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


def test_cli_exports_and_translates_as_keras_does(capsys, trained_run, tmp_path):
    run = copy_run(trained_run, tmp_path / "run")
    for _ in range(2):  # the second export replaces the first
        code, out, err = run_cli(capsys, "export", "--run", run.path)
        assert code == 0 and (run.path / "onnx" / "manifest.json").is_file(), err
    assert not [path.name for path in run.path.iterdir() if path.name.startswith(".")]
    texts = ["five", "three hundred twelve"]
    translate = ("translate", "--run", run.path, "--beam", "3")
    _, keras_out, _ = run_cli(capsys, *translate, "--engine", "keras", *texts)
    code, onnx_out, err = run_cli(capsys, *translate, "--engine", "onnx", *texts)
    assert code == 0 and onnx_out == keras_out, err
    code, auto_out, err = run_cli(capsys, *translate, *texts)  # --engine auto: the export
    assert code == 0 and auto_out == keras_out
    assert err == f"engine: onnx ({run.path / 'onnx'}, the run's export, fp32 weights)\n"


def test_engine_auto_passes_over_an_export_of_other_weights_and_says_why(
    capsys, trained_run, tmp_path
):
    run = copy_run(trained_run, tmp_path / "run")
    assert choose_engine(run.path) == EngineChoice("keras", "")  # no export: nothing to say
    export_run(run.path)
    assert choose_engine(run.path).engine == "onnx"
    assert choose_engine(run.path / "onnx") == EngineChoice("onnx", f"{run.path / 'onnx'} "
                                                            "is an ONNX export")  # fmt: skip
    _edit_manifest(run.path / "onnx", lambda m: {**m, "run": {**m["run"], "weights_sha256": "0"}})
    choice = choose_engine(run.path)
    assert (
        choice.engine == "keras" and "exported from another run or other weights" in choice.reason
    )
    texts = ["five", "forty-one"]
    _, keras_out, _ = run_cli(capsys, "translate", "--run", run.path, "--engine", "keras", *texts)
    code, out, err = run_cli(capsys, "translate", "--run", run.path, *texts)
    assert code == 0 and out == keras_out and err.startswith("engine: keras (")
    export_run(run.path)  # the export fresh again, but --backend names the Keras engine's
    code, out, err = run_cli(
        capsys, "translate", "--run", run.path, "--backend", "tensorflow", "--verbose", "0", *texts
    )
    assert code == 0 and out == keras_out and "engine" not in err
    assert Translator.from_run(run.path, engine="auto").model is None  # the ONNX engine's


def test_end_to_end_benchmark_reports_startup_passes_and_equal_bleu(trained_run, tmp_path):
    from benchmarks import translate_end_to_end

    run = copy_run(trained_run, tmp_path / "run")
    export_run(run.path)
    pairs = load_corpus(Translator.from_run(run.path).config.data)["test"][:40]
    (tmp_path / "src.txt").write_text("\n".join(source for source, _ in pairs) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(target for _, target in pairs) + "\n")
    report_path = tmp_path / "report.json"
    translate_end_to_end.main(
        [
            *("--run", str(run.path), "--src", str(tmp_path / "src.txt")),
            *("--ref", str(tmp_path / "ref.txt"), "--batches", "1,4"),
            *("--engines", "keras,onnx", "--json", str(report_path)),
        ]
    )
    results = json.loads(report_path.read_text())["results"]
    assert [r["engine"] for r in results] == ["keras", "onnx"]
    for result in results:
        assert result["startup_s"] > 0
        passes = [(p["batch"], p["pass"]) for p in result["passes"]]
        assert passes == [(1, "first"), (1, "again"), (4, "first"), (4, "again")]
    keras_scores, onnx_scores = ([(p["bleu"], p["chrf"]) for p in r["passes"]] for r in results)
    assert onnx_scores == keras_scores and keras_scores[0][1] > 0


def test_cli_evaluates_an_export_as_keras_does(capsys, trained_run, tmp_path):
    run = copy_run(trained_run, tmp_path / "run")
    export_run(run.path, tmp_path / "exported")
    evaluate = ["evaluate", "--split", "val", "--verbose", "0"]
    code, keras_out, err = run_cli(capsys, *evaluate, "--run", run.path)
    assert code == 0, err
    code, onnx_out, err = run_cli(
        capsys, *evaluate, "--run", tmp_path / "exported", "--engine", "onnx"
    )
    assert code == 0, err
    assert "BLEU" in onnx_out
    assert onnx_out.split("[")[0] == keras_out.split("[")[0]  # all but the time taken


def test_int8_export_is_smaller_and_still_translates(trained_run, tmp_path, caplog):
    fp32 = export_run(trained_run.path, tmp_path / "fp32")
    int8 = export_run(trained_run.path, tmp_path / "int8", int8=True)
    # onnxruntime's advice to pre-process first does not apply to weight-only quantization.
    assert "pre-processing" not in caplog.text
    for name in ("encoder.onnx", "decoder_step.onnx"):
        assert (int8 / name).stat().st_size < (fp32 / name).stat().st_size / 2
    assert json.loads((int8 / "manifest.json").read_text())["int8"] is True
    assert not list(int8.glob("*.fp32.onnx"))
    translated = Translator.from_run(int8, engine="onnx").translate(
        ["five", "three hundred twelve"]
    )
    assert len(translated) == 2 and all(translated)


def test_bad_exports_are_one_line_errors(capsys, trained_run, classification_run, tmp_path):
    run = copy_run(trained_run, tmp_path / "run")
    assert run_cli(capsys, "export", "--run", run.path)[0] == 0

    def error(*argv) -> str:
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and err.count("\n") == 1, err
        return err

    # Exporting into the run itself would write over its config: refused, the run untouched.
    files = file_contents(run.path)
    assert "holds files that are not an ONNX export" in error(
        "export", "--run", run.path, "-o", run.path
    )
    assert file_contents(run.path) == files
    translate = ("translate", "--engine", "onnx", "five", "--run")
    # The run was retrained (here: its config changed) after the export.
    run.config_path.write_text(run.config_path.read_text() + "\n")
    assert "exported from another run or other weights" in error(*translate, run.path)
    manifest = json.loads((run.path / "onnx" / "manifest.json").read_text())
    (run.path / "onnx" / "manifest.json").write_text(json.dumps({**manifest, "format": 0}))
    assert "export format 0" in error(*translate, run.path / "onnx")
    assert "no ONNX export" in error(*translate, trained_run.path)
    assert "not a translation run" in error(*translate, classification_run.path)
    run.weights_path.unlink()
    assert "missing model.npz" in error("export", "--run", run.path)


def test_missing_extra_or_backend_is_a_one_line_error(
    capsys, monkeypatch, trained_run, translation_export
):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    folder = translation_export[2]
    code, _, err = run_cli(capsys, "translate", "--engine", "onnx", "--run", folder, "five")
    assert code == 2 and "pip install mintransformer[export]" in err
    monkeypatch.setitem(sys.modules, "tf2onnx", None)
    code, _, err = run_cli(capsys, "export", "--run", trained_run.path)
    assert code == 2 and "pip install mintransformer[export]" in err
    monkeypatch.setattr(export.keras.backend, "backend", lambda: "jax")
    code, _, err = run_cli(capsys, "export", "--run", trained_run.path)
    assert code == 2 and "KERAS_BACKEND=tensorflow" in err


def test_export_builds_float32_whatever_precision_this_machine_would_choose(
    trained_run, tmp_path, monkeypatch
):
    # A config that says nothing about precision leaves the choice to the machine; on a
    # GPU or AMX machine that choice is bf16, which the graphs must not inherit.
    from mintransformer.runs import loading

    assert trained_run.config().mixed_precision is None
    monkeypatch.setattr(loading, "choose_precision", lambda requested: (True, "bf16 (forced)"))
    assert Translator.from_run(trained_run.path).model.compute_dtype == "bfloat16"
    folder = export_run(trained_run.path, tmp_path / "onnx")
    monkeypatch.undo()
    sources = ["five", "three hundred twelve", "forty-two thousand"]
    expected = Translator.from_run(trained_run.path).translate(sources)
    assert Translator.from_run(folder, engine="onnx").translate(sources) == expected


def _edit_manifest(folder, change):
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps(change(manifest)))


TAMPERINGS = {
    "manifest without a task": (
        lambda f: _edit_manifest(f, lambda m: {k: v for k, v in m.items() if k != "task"}),
        "manifest.json names no task",
    ),
    "manifest without its run": (
        lambda f: _edit_manifest(f, lambda m: {k: v for k, v in m.items() if k != "run"}),
        "manifest.json does not say which run",
    ),
    "manifest a list": (lambda f: _edit_manifest(f, lambda m: [1, 2]), "must hold a JSON object"),
    "manifest empty": (
        lambda f: (f / "manifest.json").write_text(""),
        "manifest.json is not valid",
    ),
    "decoder step truncated": (
        lambda f: (f / "decoder_step.onnx").write_bytes(
            (f / "decoder_step.onnx").read_bytes()[:999]
        ),
        "decoder_step.onnx is corrupt",
    ),
    "encoder empty": (lambda f: (f / "encoder.onnx").write_bytes(b""), "encoder.onnx is corrupt"),
    "another tokenizer": (
        lambda f: (f / "tokenizer.json").write_text((f / "tokenizer.json").read_text() + "\n"),
        "tokenizer.json is not the one it was exported with",
    ),
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_a_tampered_export_is_a_one_line_error(capsys, translation_export, tmp_path, tampering):
    folder = shutil.copytree(translation_export[2], tmp_path / "onnx")
    spoil, message = TAMPERINGS[tampering]
    spoil(folder)
    code, _, err = run_cli(capsys, "translate", "--engine", "onnx", "--run", folder, "five")
    assert code == 2 and err.count("\n") == 1 and message in err, err
