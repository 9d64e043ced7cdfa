"""CTranslate2 converts our Hugging Face export and translates as we do."""

import pytest

from mintransformer.cli import main
from mintransformer.inference.translator import Translator
from mintransformer.interop import ct2_export
from tests.conftest import file_contents
from tests.interop.helpers import our_tokens
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
