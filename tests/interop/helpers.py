"""Runs with random weights, and the sentences the interop tests translate."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np

from mintransformer.config import make_config
from mintransformer.data.numbers import english_words, french_words
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import build_model

SENTENCES = [english_words(n) for n in (3, 17, 40, 99, 312, 1001, 4567, 20_000, 321_456)]
SENTENCES += ["A man is riding a bike.", "Two dogs play in the snow.", "Hello, world!"]


def make_run(path: Path, preset: str, seed: int = 0, **settings) -> Path:
    """A complete translation run of `preset` with random weights, its BPE trained on
    numbers and a few sentences; weights drawn wide enough that decoding has no ties."""
    sizes = dict(num_layers=2, d_model=32, num_heads=4, dff=64, max_length=40, vocab_size=200)
    config = make_config("translation", preset, **{**sizes, **settings})
    numbers = range(0, 3000, 7)
    texts = [english_words(n) for n in numbers] + [french_words(n) for n in numbers] + SENTENCES
    tokenizer = Tokenizer.train(texts, vocab_size=config.vocab_size)
    config.vocab_size = tokenizer.vocab_size
    keras.utils.set_random_seed(seed)
    model = build_model(config, tokenizer.vocab_size)
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if len(variable.shape) == 1:  # LayerNorm scales near 1, offsets and biases near 0
            centre = 1.0 if "gamma" in variable.path else 0.0
            value = centre + rng.normal(0.0, 0.1, variable.shape)
        else:
            value = rng.normal(0.0, 1.5 / np.sqrt(variable.shape[-1]), variable.shape)
        variable.assign(value.astype("float32"))
    run = RunDirectory.create(path, config)
    tokenizer.save(run.tokenizer_path)
    checkpoints.save_variables(run.weights_path, model.weights)
    return Path(path)


def our_tokens(translator, sources: list[list[int]], beam_size: int) -> list[list[int]]:
    """Our greedy (beam_size 1) or beam tokens, without <s> and </s>; beam with alpha=0,
    which ranks by total log-probability as `generate(length_penalty=0.0)` does."""
    from mintransformer.data.lengths import pad_batch
    from mintransformer.decoding.beam import beam_search
    from mintransformer.decoding.greedy import greedy_search

    tokenizer = translator.tokenizer
    ids = pad_batch(sources, pad_id=tokenizer.pad_id)
    options = dict(
        start_id=tokenizer.start_id,
        end_id=tokenizer.end_id,
        max_length=translator.max_output_length,
    )
    if beam_size == 1:
        return greedy_search(translator.steps, ids, **options)
    return beam_search(translator.steps, ids, beam_size=beam_size, alpha=0.0, **options)[0]


def hf_tokens(hf_model, sources, tokenizer, beam_size: int, max_new_tokens: int):
    """`generate()`'s tokens, without the start token and from </s> on, for `sources`
    (our id lists, </s> included), with settings that match our search."""
    import torch

    from mintransformer.data.lengths import pad_batch

    ids = torch.tensor(pad_batch(sources, pad_id=tokenizer.pad_id), dtype=torch.long)
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=ids,
            attention_mask=ids != tokenizer.pad_id,
            num_beams=beam_size,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            length_penalty=0.0,
            early_stopping=False,
            forced_eos_token_id=None,
            bad_words_ids=[[tokenizer.pad_id]],  # our searches never emit the pad
            min_new_tokens=1,  # nor </s> as the first token
        )
    rows = []
    for row in out[:, 1:].tolist():
        rows.append(row[: row.index(tokenizer.end_id)] if tokenizer.end_id in row else row)
    return rows


def our_logits(model, source, target, pad_id: int) -> np.ndarray:
    """Our logits `(batch, target_length, vocab)`, every target position real."""
    logits = model(
        (np.asarray(source, "int32"), np.asarray(target, "int32")),
        target_mask=np.ones(np.shape(target), bool),
    )
    return np.asarray(keras.ops.convert_to_numpy(logits))


def hf_logits(hf_model, source, target, pad_id: int) -> np.ndarray:
    import torch

    source = torch.tensor(np.asarray(source), dtype=torch.long)
    with torch.no_grad():
        return hf_model(
            input_ids=source,
            attention_mask=source != pad_id,
            decoder_input_ids=torch.tensor(np.asarray(target), dtype=torch.long),
        ).logits.numpy()
