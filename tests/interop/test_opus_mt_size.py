"""An OPUS-MT-sized Marian model: Helsinki-NLP/opus-mt-en-fr's exact configuration,
random weights, through `mintransformer import hf` (slow: about 300 MB of weights)."""

import numpy as np
import pytest

from mintransformer.cli import main
from mintransformer.data.lengths import pad_batch
from mintransformer.inference.translator import Translator
from tests.interop.helpers import hf_logits, hf_tokens, our_logits, our_tokens
from tests.interop.marian import make_marian, marian_model
from tests.interop.test_hf_import import SENTENCES

# Helsinki-NLP/opus-mt-en-fr's config.json, apart from the token ids, which follow the
# vocabulary built here (pad last, as there: 59513).
OPUS_MT_EN_FR = dict(
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
)
VOCAB_SIZE = 59514
MAX_TOKENS = 12


@pytest.mark.slow
def test_opus_mt_en_fr_sized_model(tmp_path):
    folder = make_marian(
        tmp_path / "opus-mt-en-fr",
        activation="swish",
        sizes=OPUS_MT_EN_FR,
        vocab_size=VOCAB_SIZE,
        safetensors=False,  # pytorch_model.bin, as the published checkpoint
    )
    assert (folder / "pytorch_model.bin").is_file()
    assert main(["import", "hf", str(folder), "--run", str(tmp_path / "run")]) == 0
    translator = Translator.from_run(tmp_path / "run", max_output_length=MAX_TOKENS)
    model = marian_model(folder)
    tokenizer = translator.tokenizer
    assert (tokenizer.vocab_size, tokenizer.pad_id, tokenizer.start_id) == (59514, 59513, 59513)
    sources = translator.encode_sources(SENTENCES)
    for beam_size in (1, 5):
        ours = our_tokens(translator, sources, beam_size)
        assert ours == hf_tokens(model, sources, tokenizer, beam_size, MAX_TOKENS)
    targets = [[tokenizer.start_id, *t] for t in our_tokens(translator, sources, 1)]
    source = pad_batch(sources, pad_id=tokenizer.pad_id)
    target = pad_batch(targets, pad_id=tokenizer.end_id)
    ours = our_logits(translator.model, source, target, tokenizer.pad_id)
    assert np.abs(ours - hf_logits(model, source, target, tokenizer.pad_id)).max() < 1e-4
