"""Generator: prompts in, text out, with the model's limits checked."""

import warnings

import pytest

from mintransformer.config import make_config
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.inference.generator import Generator
from mintransformer.runs.loading import build_model


@pytest.fixture(scope="module")
def generator():
    tokenizer = Tokenizer.train(["the cat sat on the mat", "a dog ran"] * 20, vocab_size=60)
    config = make_config("language_model", num_layers=1, d_model=16, dff=32, max_length=10)
    return Generator.from_model(build_model(config, tokenizer.vocab_size), tokenizer)


def test_each_prompt_comes_back_with_its_continuation(generator):
    texts = generator.generate(["the cat", ""], max_new_tokens=4, temperature=0)
    assert len(texts) == 2 and texts[0].startswith("the cat")
    assert generator.generate(["the cat", ""], max_new_tokens=4, temperature=0) == texts


def test_long_prompts_keep_their_end_with_a_warning(generator):
    with pytest.warns(UserWarning, match="keep only their last 7"):
        generator.generate(["the cat sat on the mat the cat sat"], max_new_tokens=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        generator.generate(["the cat"], max_new_tokens=4)


def test_more_new_tokens_than_the_context_is_refused(generator):
    with pytest.raises(ValueError, match="max_length=10"):
        generator.generate(["a"], max_new_tokens=11)
