"""What one request may ask for, and the checks that turn too much into a 4xx.

Each limit is a command-line flag of `mintransformer serve` (`options.add_serve_flags`).
A request over a limit is answered 413 (too large) or 422 (out of range) with a
message that names the field, the value and the flag that raises the limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


class RequestError(Exception):
    """A request the server refuses; `status` is its HTTP status (4xx)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass(frozen=True)
class Limits:
    """The most one request may ask for.

    Attributes:
        max_texts: texts in one translate or classify request (`--max-texts`).
        max_chars: characters in one text or prompt (`--max-chars`).
        max_beam: largest beam size (`--max-beam`); n-best is at most the beam size.
        max_new_tokens: most tokens one generate request may ask for (`--max-new-tokens`);
            the model's context caps it further.
        max_body_bytes: largest request body (`--max-body-bytes`).
    """

    max_texts: int = 64
    max_chars: int = 2000
    max_beam: int = 16
    max_new_tokens: int = 512
    max_body_bytes: int = 1_000_000

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"limit {field.name} must be a positive integer, got {value!r}")

    def check_texts(self, texts: Sequence[str], field: str = "texts") -> None:
        """413 for too many or too long texts, 422 for none."""
        if not texts:
            raise RequestError(422, f"`{field}` is empty: send at least one text.")
        if len(texts) > self.max_texts:
            raise RequestError(
                413,
                f"`{field}` has {len(texts)} texts; at most {self.max_texts} per request "
                "(the server's --max-texts).",
            )
        for index, text in enumerate(texts):
            self.check_chars(text, f"{field}[{index}]")

    def check_chars(self, text: str, field: str) -> None:
        if len(text) > self.max_chars:
            raise RequestError(
                413,
                f"`{field}` has {len(text)} characters; at most {self.max_chars} "
                "(the server's --max-chars).",
            )

    def check_beam(self, beam_size: int, n_best: int) -> None:
        if beam_size > self.max_beam:
            raise RequestError(
                422,
                f"`beam_size` is {beam_size}; at most {self.max_beam} (the server's --max-beam).",
            )
        if n_best > beam_size:
            raise RequestError(
                422, f"`n_best` is {n_best} but `beam_size` is {beam_size}: n_best <= beam_size."
            )

    def check_new_tokens(self, max_new_tokens: int, prompt_tokens: int, context: int) -> None:
        """422 for more new tokens than `--max-new-tokens` or the model's `context`, or
        more than the context leaves after the prompt's `prompt_tokens`."""
        limit = min(self.max_new_tokens, context)
        if max_new_tokens > limit:
            raise RequestError(
                422,
                f"`max_new_tokens` is {max_new_tokens}; at most {limit} (the server's "
                f"--max-new-tokens is {self.max_new_tokens}, the model's context {context}).",
            )
        if prompt_tokens + max_new_tokens > context:
            raise RequestError(
                422,
                f"`prompt` is {prompt_tokens} tokens and `max_new_tokens` is {max_new_tokens}: "
                f"{prompt_tokens + max_new_tokens} in all, but the model's context is {context} "
                "tokens. Shorten the prompt or ask for fewer new tokens.",
            )
