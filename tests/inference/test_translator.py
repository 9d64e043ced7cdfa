"""The translation API on a small trained run: order, empty lines, long inputs, scoring."""

import warnings

import pytest

from mintransformer.data.corpora import load_corpus, numbers_spec
from mintransformer.inference.translator import Translator, score


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_run(trained_run.path)


def test_order_is_kept_and_empty_lines_stay_empty(translator):
    texts = ["five", "", "two hundred thousand three", "   ", "five", "eleven"]
    out = translator.translate(texts, batch_size=2)
    assert len(out) == len(texts)
    assert out[1] == "" and out[3] == ""
    assert out[0] == out[4] and out[0] != ""
    assert translator.translate(["eleven"]) == [out[5]]


def test_beam_search_through_the_api(translator):
    greedy = translator.translate(["four hundred", "nine"], beam_size=1)
    beam = translator.translate(["four hundred", "nine"], beam_size=3)
    assert all(beam) and len(beam) == 2
    assert translator.translate(["four hundred", "nine"], beam_size=1) == greedy


def _truncation_warnings(translate, texts):
    # Only our own warning is checked: backends emit unrelated ones (torch: numpy's copy keyword).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = translate(texts)
    return out, [w for w in caught if w.category is UserWarning and "truncated" in str(w.message)]


def test_too_long_input_is_truncated_with_a_warning(translator):
    long_text = " ".join(["seven"] * 60)
    out, truncated = _truncation_warnings(translator.translate, [long_text, "three"])
    assert len(out) == 2 and all(out)
    assert len(truncated) == 1
    _, truncated = _truncation_warnings(translator.translate, ["three"])
    assert truncated == []


def test_evaluate_writes_hypotheses_and_scores(tmp_path, translator):
    # The test split is sorted by number: every other pair spreads the 40 over the magnitudes
    # (its first 40 are now all below 1000, short sentences on which this small model's chrF
    # was 18.8).
    pairs = load_corpus(numbers_spec(num_train=4000, num_val=100, num_test=100))["test"][::2][:40]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "ref.txt").write_text("".join(t + "\n" for _, t in pairs))
    scores = translator.evaluate(tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "hyp.txt")
    hypotheses = (tmp_path / "hyp.txt").read_text().splitlines()
    assert len(hypotheses) == 40
    assert 0 <= scores.chrf <= 100 and scores.chrf > 20
    assert "nrefs:1" in scores.signature


def test_misaligned_files_are_refused(tmp_path, translator):
    (tmp_path / "src.txt").write_text("one\ntwo\n")
    (tmp_path / "ref.txt").write_text("un\n")
    with pytest.raises(ValueError, match="line-aligned"):
        translator.evaluate(tmp_path / "src.txt", tmp_path / "ref.txt")
    with pytest.raises(ValueError, match="counts must match"):
        score(["a"], ["a", "b"])


def test_empty_files_are_refused_before_scoring(tmp_path, translator):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty.txt holds no sentence: nothing to evaluate"):
        translator.evaluate(tmp_path / "empty.txt", tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="no sentence to score"):
        score([], [])


def test_score_agrees_with_sacrebleu_on_known_text():
    perfect = score(["le chat est sur le tapis ."], ["le chat est sur le tapis ."])
    assert perfect.bleu == pytest.approx(100.0)
    assert score(["x y z w"], ["le chat est sur le tapis ."]).bleu == pytest.approx(0.0)


def test_score_takes_several_references_per_sentence():
    hypotheses = ["le chat est sur le tapis", "il pleut beaucoup ce soir"]
    one = score(hypotheses, ["un chien dort ici maintenant", "il pleut beaucoup ce soir"])
    several = score(
        hypotheses,
        [
            ["un chien dort ici maintenant", "le chat est sur le tapis"],
            ["il pleut beaucoup ce soir"],
        ],
    )
    assert several.bleu == pytest.approx(100.0) and one.bleu < 60.0


def test_choose_alpha_takes_the_best_bleu_and_the_first_of_equal_ones(translator, monkeypatch):
    from mintransformer.inference.translator import Scores

    bleu_at = {0.6: 30.0, 1.0: 31.5, 1.4: 31.5, 1.8: 29.0}
    calls = []

    def evaluate_pairs(pairs, output_file=None, beam_size=1, alpha=0.6, progress=False):
        calls.append((beam_size, alpha))
        return Scores(bleu_at[alpha], 0.0, "")

    monkeypatch.setattr(translator, "evaluate_pairs", evaluate_pairs)
    pairs = [("one", "un"), ("one", "une"), ("two", "deux")]
    choice = translator.choose_alpha(pairs, beam_size=3)
    assert choice.alpha == 1.0 and choice.bleu == bleu_at and choice.sentences == 2
    assert calls == [(3, alpha) for alpha in bleu_at]
    assert str(choice).startswith("alpha 1 chosen on val (2 sentences, beam 3; BLEU 30.00 at 0.6")
    with pytest.raises(ValueError, match="beam"):
        translator.choose_alpha(pairs, beam_size=1)


def test_evaluate_alpha_val_scores_with_the_alpha_chosen_on_val(trained_run, capsys):
    import re

    from mintransformer.cli import main

    run = str(trained_run.path)
    assert main(["evaluate", "--run", run, "--split", "test", "--beam", "2", "--alpha", "val"]) == 0
    printed = capsys.readouterr().out
    chosen = re.search(r"alpha ([0-9.]+) chosen on val \(100 sentences, beam 2", printed)
    assert chosen, printed
    assert main(["evaluate", "--run", run, "--split", "test", "--beam", "2", "--alpha",
                 chosen.group(1)]) == 0  # fmt: skip
    again = capsys.readouterr().out
    assert printed.splitlines()[0] == again.split("  [")[0]  # the same scores
    assert main(["evaluate", "--run", run, "--split", "test", "--alpha", "val"]) == 2
    assert "--alpha val needs --beam 2 or more" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", "--run", run, "--split", "test", "--alpha", "best"])
