"""CTranslate2 converts our Hugging Face export and translates as we do; `export --format
ct2` and the ct2 engine (`translate`, `serve --engine ct2`) on every embedding layout."""

import numpy as np
import pytest

from mintransformer.cli import main
from mintransformer.decoding.beam import length_penalty
from mintransformer.inference.engines import choose_engine
from mintransformer.inference.translator import Translator
from mintransformer.interop import ct2_export
from tests.conftest import file_contents
from tests.interop.conftest import small_run_config
from tests.interop.helpers import make_run, our_tokens
from tests.interop.test_hf_export import SENTENCES

ctranslate2 = pytest.importorskip("ctranslate2")
MAX_TOKENS = 20


@pytest.mark.parametrize("beam_size", [1, 5])
def test_ctranslate2_translates_our_export(trained_run, tmp_path, beam_size):
    from transformers import AutoTokenizer

    hf = tmp_path / "hf"
    assert main(["export", "--format", "hf", "--run", str(trained_run), "-o", str(hf)]) == 0
    model = ct2_export.convert(hf, tmp_path / "ct2")
    tokenizer = AutoTokenizer.from_pretrained(hf)
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(SENTENCES)["input_ids"]]
    results = ctranslate2.Translator(str(model), device="cpu").translate_batch(
        sources, beam_size=beam_size, length_penalty=0.0, max_decoding_length=MAX_TOKENS
    )
    theirs = [tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results]
    translator = Translator.from_run(trained_run, max_output_length=MAX_TOKENS)
    assert theirs == our_tokens(translator, translator.encode_sources(SENTENCES), beam_size)


@pytest.mark.parametrize("trained_run", ["post-LN"], indirect=True)
def test_a_conversion_replaces_an_earlier_one_and_nothing_else(trained_run, tmp_path):
    hf = tmp_path / "hf"
    assert main(["export", "--format", "hf", "--run", str(trained_run), "-o", str(hf)]) == 0
    first = ct2_export.convert(hf, tmp_path / "ct2")
    model_bin = (first / "model.bin").read_bytes()
    ct2_export.convert(hf, first, quantization="int8")
    assert len((first / "model.bin").read_bytes()) < len(model_bin) / 2
    for taken in (hf, trained_run):
        files = file_contents(taken)
        with pytest.raises(FileExistsError, match="not a CTranslate2 model"):
            ct2_export.convert(hf, taken)
        assert file_contents(taken) == files


# The benchmark's harness on one layout: test_ctranslate2_translates_our_export covers both.
@pytest.mark.parametrize("trained_run", ["pre-LN"], indirect=True)
def test_end_to_end_benchmark_runs_ctranslate2_beside_keras(trained_run, tmp_path):
    import json
    import shutil

    from benchmarks import translate_end_to_end

    run = shutil.copytree(trained_run, tmp_path / "run")  # the benchmark writes hf/, ct2*/
    (tmp_path / "src.txt").write_text("\n".join(SENTENCES) + "\n")
    report_path = tmp_path / "report.json"
    translate_end_to_end.main(
        [
            *("--run", str(run), "--src", str(tmp_path / "src.txt")),
            *("--batches", "4", "--beams", "1,2", "--alpha", "0"),
            *("--engines", "keras,ct2,ct2-int8", "--json", str(report_path)),
        ]
    )
    assert (run / "hf" / "tokenizer.json").is_file() and (run / "ct2-int8" / "model.bin").is_file()
    results = {r["engine"]: r for r in json.loads(report_path.read_text())["results"]}
    assert list(results) == ["keras", "ct2", "ct2-int8"]
    for result in results.values():
        assert result["startup_s"] > 0 and result["peak_rss_mib"] > 0
        assert [(p["beam"], p["pass"]) for p in result["passes"]] == [
            (1, "first"), (1, "again"), (2, "first"), (2, "again")]  # fmt: skip
        for entry in result["passes"]:
            assert entry["sentences_per_s"] == pytest.approx(len(SENTENCES) / entry["seconds"])
    for keras, ct2 in zip(results["keras"]["passes"], results["ct2"]["passes"], strict=True):
        # The same translations through the exported tokenizer, so the same tokens counted.
        assert ct2["same_as_keras"] == len(SENTENCES)
        tokens = [p["tokens_per_s"] * p["seconds"] for p in (keras, ct2)]
        assert tokens[0] == pytest.approx(tokens[1])


def test_engine_profile_takes_each_engines_search_and_step_apart(trained_run, tmp_path):
    import json
    import shutil

    from benchmarks import engine_profile

    run = shutil.copytree(trained_run, tmp_path / "run")
    assert main(["export", "--run", str(run)]) == 0
    assert main(["export", "--format", "ct2", "--run", str(run)]) == 0
    (tmp_path / "src.txt").write_text("\n".join(SENTENCES) + "\n")
    report_path = tmp_path / "report.json"
    engine_profile.main(
        [
            *("--run", str(run), "--src", str(tmp_path / "src.txt"), "--json", str(report_path)),
            *("--sentences", "4", "--sentences-alone", "2", "--repeats", "1", "--calls", "2"),
        ]
    )
    report = json.loads(report_path.read_text())
    searches = report["searches"]
    assert [(r["setting"], r["engine"]) for r in searches] == [
        (setting, engine)
        for setting in engine_profile.SETTINGS
        for engine in engine_profile.ENGINES
    ]
    for setting, (_, batch_size) in engine_profile.SETTINGS.items():
        rows = [r for r in searches if r["setting"] == setting]
        sentences = 2 if batch_size == 1 else 4
        for r in rows:
            assert r["positions"] >= -(-sentences // batch_size)  # a position a batch at least
            assert r["sentences_per_s"] == pytest.approx(sentences / r["seconds"])
            assert r["ms_per_position"] == pytest.approx(1e3 * r["seconds"] / r["positions"])
        if setting.endswith("greedy"):  # the same greedy tokens, so the same positions
            assert len({r["positions"] for r in rows}) == 1
    for part in report["keras_parts"]:
        assert set(part) >= {"floor_ms", "step_32_ms", "step_128_ms", "head_ms", "in_search_ms"}
        assert all(part[name] > 0 for name in ("floor_ms", "step_32_ms", "step_128_ms", "head_ms"))
    for split in report["onnx_split"]:
        assert 0 < split["encoder_s"] + split["step_s"] <= split["total_s"]
    for by_type in report["onnx_operators_us_per_step"].values():
        assert "MatMul" in by_type or "Gemm" in by_type or "FusedMatMul" in by_type


# Every embedding layout a run can have; pre-LN runs share one vocabulary (Pegasus).
EMBEDDINGS = [
    pytest.param(
        (norm_first, share, tie),
        id=f"{name}-{'shared' if share else 'unshared'}-{'tied' if tie else 'untied'}",
    )  # fmt: skip
    for name, norm_first in (("post-LN", False), ("pre-LN", True))
    for share in (False, True)
    for tie in (False, True)
]


@pytest.fixture(scope="module", params=EMBEDDINGS)
def ct2_run(request, tmp_path_factory):
    """A small run of each layout, trained for a few seconds, and its `mintransformer
    export --format ct2` (RUN/ct2).

    Trained, not random: a random model gives the pad, which both searches never emit,
    a real share of the probability, and ours bans it after the softmax (as transformers
    does) where CTranslate2 bans it before, so their totals would differ by that share.
    """
    from mintransformer.training import translation

    norm_first, share, tie = request.param
    config = small_run_config(
        num_train=2000, epochs=3, d_model=32, dff=64, vocab_size=200,
        norm_first=norm_first, share_embeddings=share, tie_embeddings=tie,
    )  # fmt: skip
    run = tmp_path_factory.mktemp("ct2") / "run"
    translation.train(run, config, verbose=0)
    assert main(["export", "--format", "ct2", "--run", str(run)]) == 0
    return run


def test_the_ct2_engine_searches_as_ours(ct2_run):
    ours = Translator.from_run(ct2_run, max_output_length=MAX_TOKENS)
    theirs = Translator.from_run(ct2_run, max_output_length=MAX_TOKENS, engine="ct2")
    assert theirs.model is None and theirs.max_source_length == ours.max_source_length
    ids = ours.encode_sources(SENTENCES)
    assert theirs.encode_sources(SENTENCES) == ids
    from mintransformer.data.lengths import pad_batch

    batch = pad_batch(ids, pad_id=ours.tokenizer.pad_id)
    greedy = [row[0][0] for row in theirs._ranked(batch, 1, 0.0, 1)]
    assert greedy == our_tokens(ours, ids, 1)
    # At alpha 0 both rank by total log-probability and find the same best hypothesis,
    # scored alike. (Their stopping rules differ, so the runners-up may not: CTranslate2
    # stops once `beam_size` hypotheses have ended, ours once none live can win.)
    mine = ours._ranked(batch, 4, 0.0, 1)
    other = theirs._ranked(batch, 4, 0.0, 1)
    assert [row[0][0] for row in other] == [row[0][0] for row in mine]
    assert np.allclose([row[0][1] for row in other], [row[0][1] for row in mine], atol=1e-4)
    # At alpha 0.6 the same hypotheses (CTranslate2's search ignores the penalty), ranked
    # by our length penalty.
    totals = [dict((tuple(t), s) for t, s in row) for row in theirs._ranked(batch, 4, 0.0, 4)]
    penalised = theirs._ranked(batch, 4, 0.6, 4)
    for row, row_totals in zip(penalised, totals, strict=True):
        assert [s for _, s in row] == sorted((s for _, s in row), reverse=True)
        assert {tuple(t) for t, _ in row} == set(row_totals)
        for tokens, score in row:
            length = len(tokens) + (len(tokens) < MAX_TOKENS)  # </s> counts where it ended
            assert score == pytest.approx(row_totals[tuple(tokens)] / length_penalty(length, 0.6))
    ours_penalised = ours._ranked(batch, 4, 0.6, 1)
    same = sum(a[0][0] == b[0][0] for a, b in zip(ours_penalised, penalised, strict=True))
    assert same >= len(SENTENCES) - 2


@pytest.mark.parametrize("ct2_run", EMBEDDINGS[:1], indirect=True)
def test_a_hypothesis_as_long_as_the_model_is_scored_and_ranked(ct2_run):
    """`score_batch` cannot score a hypothesis that fills every target position (it adds
    `</s>` one position past the model's): its total is CTranslate2's own, which is the
    model's, up to the pad's share, as our Keras step scores it token by token."""
    from mintransformer.data.lengths import pad_batch

    ours = Translator.from_run(ct2_run)
    theirs = Translator.from_run(ct2_run, engine="ct2")
    positions = theirs.steps.source_positions
    batch = pad_batch(ours.encode_sources(SENTENCES[:2]), pad_id=ours.tokenizer.pad_id)
    # The pad as the end: never emitted, so every hypothesis runs to the last position.
    options = dict(start_id=ours.tokenizer.start_id, end_id=ours.tokenizer.pad_id)
    ranked = theirs.steps.search(
        batch, beam_size=2, alpha=0.0, n_best=2, max_length=positions, **options
    )
    for source, row in zip(batch, ranked, strict=True):
        assert [s for _, s in row] == sorted((s for _, s in row), reverse=True)
        for tokens, total in row:
            assert len(tokens) == positions
            state = ours.steps.start(source[None])
            expected, previous = 0.0, ours.tokenizer.start_id
            for index, token in enumerate(tokens):
                log_probs, state = ours.steps.step(np.array([previous]), index, state)
                expected, previous = expected + float(log_probs[0, token]), token
            assert expected <= total + 1e-3
            assert total == pytest.approx(expected, abs=0.02 * positions)


@pytest.mark.parametrize("ct2_run", EMBEDDINGS[:1], indirect=True)
def test_translate_and_evaluate_engine_ct2_print_what_keras_prints(ct2_run, tmp_path, capsys):
    search = ("--beam", "3", "--alpha", "0")
    keras = ("translate", "--run", str(ct2_run), "--engine", "keras", *search)
    keras_out = run_cli(capsys, *keras, *SENTENCES)
    assert len(keras_out.splitlines()) == len(SENTENCES)
    # The run, or its CTranslate2 folder itself.
    for run in (ct2_run, ct2_run / "ct2"):
        ct2 = ("--run", str(run), "--engine", "ct2", *search)
        assert run_cli(capsys, "translate", *ct2, *SENTENCES) == keras_out
        (tmp_path / "src.txt").write_text("\n".join(SENTENCES) + "\n")
        (tmp_path / "ref.txt").write_text(keras_out)  # keras' translations as references
        files = ("--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt"))
        # chrF: these one-word numbers have no 4-grams for BLEU to count.
        assert "chrF 100.00" in run_cli(capsys, "evaluate", *ct2, *files)


def run_cli(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.parametrize("ct2_run", EMBEDDINGS[:1], indirect=True)
def test_engine_auto_takes_the_runs_ct2_export_and_not_another_runs(ct2_run, tmp_path, capsys):
    import shutil

    search = ("--beam", "3", "--alpha", "0", *SENTENCES)
    keras_out = run_cli(capsys, "translate", "--run", str(ct2_run), "--engine", "keras", *search)
    assert main(["translate", "--run", str(ct2_run), *search]) == 0
    captured = capsys.readouterr()
    assert captured.out == keras_out
    assert captured.err == f"engine: ct2 ({ct2_run / 'ct2'}, the run's export, fp32 weights)\n"
    other = make_run(tmp_path / "other", "numbers", seed=1)
    shutil.copytree(ct2_run / "ct2", other / "ct2")  # another run's weights
    choice = choose_engine(other)
    assert choice.engine == "keras" and "another run or other weights" in choice.reason
    other_keras = run_cli(capsys, "translate", "--run", str(other), "--engine", "keras", "three")
    assert main(["translate", "--run", str(other), "three"]) == 0
    captured = capsys.readouterr()
    assert captured.out == other_keras and captured.err.startswith("engine: keras (")


@pytest.mark.parametrize("ct2_run", EMBEDDINGS[-1:], indirect=True)
def test_an_int8_export_is_smaller_and_still_translates(ct2_run, tmp_path):
    import json

    out = tmp_path / "int8"
    assert main(["export", "--format", "ct2", "--int8", "--run", str(ct2_run), "-o", str(out)]) == 0
    assert (out / "model.bin").stat().st_size < (ct2_run / "ct2" / "model.bin").stat().st_size / 2
    assert json.loads((out / "manifest.json").read_text())["int8"] is True
    translations = Translator.from_run(out, engine="ct2").translate(SENTENCES, beam_size=2)
    assert len(translations) == len(SENTENCES) and any(translations)


@pytest.mark.parametrize("ct2_run", EMBEDDINGS[:1], indirect=True)
def test_the_ct2_engine_refuses_what_it_cannot_run_by_name(
    ct2_run, untrained_classifier_run, tmp_path, capsys
):
    import shutil

    def error(*argv: str) -> str:
        capsys.readouterr()
        assert main(list(argv)) == 2
        return capsys.readouterr().err

    other = make_run(tmp_path / "other", "numbers", seed=1)
    assert "export --format ct2 --run" in error("translate", "--run", str(other), "--engine",
                                                "ct2", "three")  # fmt: skip
    shutil.copytree(ct2_run / "ct2", other / "ct2")  # another run's weights
    assert "another run or other weights" in error(
        "translate", "--run", str(other), "--engine", "ct2", "three"
    )
    classifier = str(untrained_classifier_run.path)
    assert "translation runs" in error("export", "--format", "ct2", "--run", classifier)
    assert "translation models" in error("classify", "--run", classifier, "--engine", "ct2", "x")
    files = file_contents(ct2_run)
    assert "not a CTranslate2 export" in error(
        "export", "--format", "ct2", "--run", str(ct2_run), "-o", str(ct2_run)
    )
    assert file_contents(ct2_run) == files


@pytest.mark.parametrize("ct2_run", EMBEDDINGS[:1], indirect=True)
def test_serve_engine_ct2_answers_as_its_translator(ct2_run):
    pytest.importorskip("fastapi", reason="serving needs the `serve` extra")
    from mintransformer.serving.limits import Limits
    from mintransformer.serving.services import load_service
    from tests.serving.conftest import make_client

    translator = Translator.from_run(ct2_run, engine="ct2")
    service = load_service(ct2_run, "ct2", Limits(max_beam=4), max_batch_size=4)
    with make_client(service) as client:
        for beam_size in (1, 3):
            body = {"texts": SENTENCES[:6], "beam_size": beam_size, "n_best": beam_size}
            results = client.post("/api/translate", json=body).json()["results"]
            expected = translator.translate(SENTENCES[:6], beam_size=beam_size)
            assert [r["translation"] for r in results] == expected
        info = client.get("/api/info").json()
        assert info["engine"] == "ct2" and info["config"]["d_model"] == 32
        refused = client.post("/api/translate", json={"texts": ["three"], "attention": True})
        assert refused.status_code == 422 and "--engine keras" in refused.json()["error"]
