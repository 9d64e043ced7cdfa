"""CTranslate2 converts our Hugging Face export and translates as we do."""

import pytest

from mintransformer.cli import main
from mintransformer.inference.translator import Translator
from mintransformer.interop import ct2_export
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
