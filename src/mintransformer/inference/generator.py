"""Generating text with a trained language-model run.

A prompt is fed as `</s>` + its tokens (`data.token_stream.prompt_ids`), so an empty
prompt starts a new line; generated `</s>` tokens come back as line breaks.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from mintransformer.data.token_stream import decode_text, prompt_ids
from mintransformer.inference.engines import generation_engine, keras_generation


class Generator:
    """Continues text with a language model; `Generator.from_run(dir)` loads a run.

    Args:
        generate_ids: the engine: `generate_ids(prompt_ids, max_new_tokens=...,
            **options)` -> the new token ids of each prompt, as
            `decoding.sampling.generate` (`inference.engines`).
        tokenizer: the run's `Tokenizer`.
        max_length: the model's context, in tokens.
    """

    def __init__(self, generate_ids, tokenizer, max_length: int):
        self.generate_ids = generate_ids
        self.tokenizer = tokenizer
        self.max_length = max_length

    @classmethod
    def from_model(cls, model, tokenizer) -> Generator:
        """The generator of a built Keras `LanguageModel` in memory."""
        return cls(keras_generation(model), tokenizer, model.max_length)

    @classmethod
    def from_run(cls, path: str | Path, engine: str = "keras") -> Generator:
        """The generator of the run directory `path`; `engine` as `Translator.from_run`."""
        return cls(*generation_engine(path, engine))

    def prompt_tokens(self, prompt: str) -> int:
        """The subword tokens of `prompt`. `generate` keeps all of them when they and
        `max_new_tokens` together are at most `max_length` (the `</s>` fed before the
        prompt takes a position, the last new token none), else only the last ones."""
        return len(prompt_ids(self.tokenizer, prompt)) - 1

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 50, **options) -> list[str]:
        """Each prompt followed by its generated continuation, as text (</s> = line break).

        A prompt too long to leave room for `max_new_tokens` keeps its last tokens,
        with a warning. `options` are those of `decoding.sampling.generate`
        (`temperature`, `top_k`, `top_p`, `seed`, `end_id`).
        """
        max_length = self.max_length
        if max_new_tokens > max_length:
            raise ValueError(
                f"max_new_tokens ({max_new_tokens}) exceeds the model's context of "
                f"max_length={max_length} tokens."
            )
        room = max_length - max_new_tokens + 1
        encoded = [prompt_ids(self.tokenizer, text) for text in prompts]
        if any(len(ids) > room for ids in encoded):
            warnings.warn(
                f"prompts longer than {room} tokens keep only their last {room} to leave room "
                f"for {max_new_tokens} new tokens in the model's {max_length} positions.",
                stacklevel=2,
            )
            encoded = [ids[-room:] for ids in encoded]
        generated = self.generate_ids(encoded, max_new_tokens=max_new_tokens, **options)
        return [decode_text(self.tokenizer, p + g) for p, g in zip(encoded, generated, strict=True)]
