"""`mintransformer export --format hf`: transformers loads the folder and computes what we do."""

import numpy as np
import pytest

from mintransformer.cli import main
from mintransformer.data.numbers import english_words
from mintransformer.inference.translator import Translator
from tests.conftest import file_contents
from tests.interop.helpers import hf_logits, hf_tokens, make_run, our_logits, our_tokens

MAX_TOKENS = 20
SENTENCES = [english_words(n) for n in range(7, 1_000_000, 49_999)][:20]


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    """`(translator, transformers model, transformers tokenizer)` of `trained_run`'s export."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    out = tmp_path_factory.mktemp("hf")
    assert main(["export", "--format", "hf", "--run", str(trained_run), "-o", str(out)]) == 0
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    translator = Translator.from_run(trained_run, max_output_length=MAX_TOKENS)
    return translator, model, AutoTokenizer.from_pretrained(out)


def test_the_class_matches_the_layout(exported, trained_run):
    translator, model, _ = exported
    pre_ln = translator.model.config["norm_first"]
    expected = "PegasusForConditionalGeneration" if pre_ln else "MarianMTModel"
    assert type(model).__name__ == expected


def test_the_tokenizer_gives_our_ids(exported):
    translator, _, tokenizer = exported
    assert tokenizer(SENTENCES)["input_ids"] == translator.encode_sources(SENTENCES)
    ids = translator.encode_sources(SENTENCES[:3])
    assert tokenizer.batch_decode(ids, skip_special_tokens=True) == SENTENCES[:3]


def test_logits_match(exported):
    translator, model, _ = exported
    pad = translator.tokenizer.pad_id
    sources = translator.encode_sources(SENTENCES)
    targets = [[translator.tokenizer.start_id, *t] for t in our_tokens(translator, sources, 1)]
    from mintransformer.data.lengths import pad_batch

    source, target = pad_batch(sources, pad_id=pad), pad_batch(targets, pad_id=pad)
    ours = our_logits(translator.model, source, target, pad)
    theirs = hf_logits(model, source, target, pad)
    real = target != pad
    assert np.abs(ours - theirs)[real].max() < 1e-4


@pytest.mark.parametrize("beam_size", [1, 5])
def test_generate_returns_our_tokens(exported, beam_size):
    translator, model, _ = exported
    sources = translator.encode_sources(SENTENCES)
    ours = our_tokens(translator, sources, beam_size)
    theirs = hf_tokens(model, sources, translator.tokenizer, beam_size, MAX_TOKENS)
    assert sum(len(t) < MAX_TOKENS for t in ours) >= len(ours) // 4  # many translations end
    assert theirs == ours


def test_a_setting_no_class_expresses_is_refused(tmp_path, capsys):
    run = make_run(tmp_path / "odd", "numbers", d_model=33, num_heads=3)
    code = main(["export", "--format", "hf", "--run", str(run), "-o", str(tmp_path / "out")])
    assert code == 2
    assert "d_model=33" in capsys.readouterr().err


def test_a_folder_that_is_not_an_export_is_refused_untouched(trained_run, tmp_path, capsys):
    files = file_contents(trained_run)
    code = main(["export", "--format", "hf", "--run", str(trained_run), "-o", str(trained_run)])
    assert code == 2
    assert "holds files that are not a Hugging Face export" in capsys.readouterr().err
    assert file_contents(trained_run) == files


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("share", [False, True], ids=["unshared", "shared"])
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_every_layout_loads_with_nothing_missing_or_unexpected(tmp_path, norm_first, share, tie):
    import warnings

    from transformers import AutoModelForSeq2SeqLM

    from mintransformer.interop.hf_export import export_run

    settings = dict(norm_first=norm_first, share_embeddings=share, tie_embeddings=tie)
    run = make_run(tmp_path / "run", "numbers", **settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_run(run, tmp_path / "hf")
    assert [str(w.message) for w in caught if "epsilon" in str(w.message)] == []
    model, report = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert {name: entries for name, entries in report.items() if entries} == {}
    generation = model.generation_config  # our searches' rules, for a plain generate()
    assert generation.min_new_tokens == 1 and generation.bad_words_ids == [[0]]
    translator = Translator.from_run(run, max_output_length=MAX_TOKENS)
    sources = translator.encode_sources(SENTENCES[:8])
    ours = our_tokens(translator, sources, 1)
    assert hf_tokens(model.eval(), sources, translator.tokenizer, 1, MAX_TOKENS) == ours


def test_a_run_of_an_older_epsilon_still_exports_with_a_warning(tmp_path):
    from mintransformer.interop.hf_export import export_run

    run = make_run(tmp_path / "run", "numbers", layer_norm_epsilon=1e-6)
    with pytest.warns(UserWarning, match="layer_norm_epsilon=1e-06"):
        export_run(run, tmp_path / "hf")
