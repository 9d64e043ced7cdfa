"""A run's `tokenizer.json`, whichever kind of tokenizer wrote it.

Our joint BPE (`data.tokenizer.Tokenizer`) writes the `tokenizers` library's JSON; an
imported Marian model's (`data.sentencepiece_tokenizer`) writes a JSON object whose
"kind" is "sentencepiece". Both give the same interface: `encode`, `encode_batch`,
`decode`, `decode_batch`, `id_to_token`, `tokens`, `vocab_size`, `pad_id`, `start_id`,
`end_id`, `unk_id`, `save`.
"""

from __future__ import annotations

import json
from pathlib import Path

from mintransformer.core.errors import CorruptFileError
from mintransformer.data import sentencepiece_tokenizer
from mintransformer.data.tokenizer import Tokenizer


def tokenizer_kind(path: str | Path) -> str:
    """ "sentencepiece" or "bpe" (ours), from the file's "kind"."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "bpe"  # let Tokenizer.load report the damage
    kind = values.get("kind") if isinstance(values, dict) else None
    return kind if kind == sentencepiece_tokenizer.KIND else "bpe"


def load_tokenizer(path: str | Path):
    """The tokenizer saved at `path`: `Tokenizer` or `SentencePieceTokenizer`.

    Raises:
        FileNotFoundError: if `path` does not exist.
        CorruptFileError: if it is damaged.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    if tokenizer_kind(path) == "bpe":
        return Tokenizer.load(path)
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
        return sentencepiece_tokenizer.SentencePieceTokenizer.from_dict(values)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise CorruptFileError(path, f"is corrupt: not a SentencePiece tokenizer ({err})") from None
