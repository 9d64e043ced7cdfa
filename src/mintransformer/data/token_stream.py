"""Lines of text as one token stream: the convention a language model is trained and
prompted with, in NumPy alone.

</s> ends every line and also opens the stream, so </s> reads "a line starts here".
A prompt is `[</s>] + ids(text)`: an empty prompt asks for a line from scratch, and
generated </s> tokens decode as line breaks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mintransformer.data.text import normalize_text
from mintransformer.data.tokenizer import Tokenizer


def token_stream(tokenizer: Tokenizer, lines: Sequence[str]) -> np.ndarray:
    """int32 `(num_tokens,)`: `</s> line1 </s> line2 </s> ...`."""
    stream = [tokenizer.end_id]
    for ids in tokenizer.encode_batch(list(lines)):
        stream += ids
        stream.append(tokenizer.end_id)
    return np.asarray(stream, "int32")


def prompt_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """The ids a prompt is fed as: `[</s>] + ids(text)`."""
    return [tokenizer.end_id, *tokenizer.encode(normalize_text(text))]


def decode_text(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """Text of stream ids, with </s> as line breaks (a leading </s> is dropped)."""
    ids = [int(i) for i in ids]
    if ids and ids[0] == tokenizer.end_id:
        ids = ids[1:]
    lines, line = [], []
    for token in ids:
        if token == tokenizer.end_id:
            lines.append(tokenizer.decode(line))
            line = []
        else:
            line.append(token)
    return "\n".join([*lines, tokenizer.decode(line)])
