"""A Marian (OPUS-MT) tokenizer: SentencePiece models plus the checkpoint's vocabulary.

Marian checkpoints cut text with a SentencePiece model per language (`source.spm`,
`target.spm`) and map the pieces to model ids through their own `vocab.json` (ids are
not SentencePiece's), as `transformers.MarianTokenizer` does. This class gives that
the interface of our `Tokenizer` (`encode`, `decode`, `pad_id`, `start_id`, ...), so
that a run directory, `Translator` and the ONNX engine use it unchanged.

Saved as one JSON file (the run's `tokenizer.json`), the SentencePiece models inside
it in base64, with `"kind": "sentencepiece"` (`data.tokenizer_file` reads the kind).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path

from mintransformer.core.files import atomic_write
from mintransformer.data.tokenizer import encodable

KIND = "sentencepiece"


def _processor(model: bytes):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=model)


class SentencePieceTokenizer:
    """Source and target SentencePiece models with Marian's piece -> id vocabularies.

    Args:
        source_model, target_model: serialized SentencePiece models (file bytes).
        vocab: piece -> id of the source side (and of the target side unless
            `target_vocab` is given).
        target_vocab: piece -> id of a separate target vocabulary, or None.
        pad, eos, unk: the special pieces.
        start_id: the decoder's first input id (Marian: the pad id).
    """

    def __init__(
        self,
        source_model: bytes,
        target_model: bytes,
        vocab: dict[str, int],
        target_vocab: dict[str, int] | None = None,
        pad: str = "<pad>",
        eos: str = "</s>",
        unk: str = "<unk>",
        start_id: int | None = None,
    ) -> None:
        self.source_model, self.target_model = source_model, target_model
        self.vocab, self.target_vocab = dict(vocab), target_vocab and dict(target_vocab)
        self.pad, self.eos, self.unk = pad, eos, unk
        for piece in (pad, eos, unk):
            if piece not in self.vocab or piece not in self._target_vocab:
                raise ValueError(f"special token {piece!r} is missing from the vocabulary")
        self.pad_id, self.end_id = self._target_vocab[pad], self._target_vocab[eos]
        self.unk_id = self.vocab[unk]
        if self.vocab[pad] != self.pad_id:
            raise ValueError("the pad token must have one id in source and target vocabularies")
        self.start_id = self.pad_id if start_id is None else int(start_id)
        self._source = _processor(source_model)
        self._target = _processor(target_model)
        # Marian decodes with the source model unless the vocabularies are separate.
        self._decoder_model = self._target if target_vocab else self._source
        self._pieces = {i: p for p, i in self._target_vocab.items()}
        self._source_pieces = {i: p for p, i in self.vocab.items()}

    @property
    def _target_vocab(self) -> dict[str, int]:
        return self.target_vocab or self.vocab

    @property
    def vocab_size(self) -> int:
        """Source ids (the whole vocabulary unless the target has its own)."""
        return max(self.vocab.values()) + 1

    @property
    def target_vocab_size(self) -> int:
        return max(self._target_vocab.values()) + 1

    @classmethod
    def from_files(
        cls,
        source_spm: str | Path,
        target_spm: str | Path,
        vocab: str | Path,
        target_vocab: str | Path | None = None,
        **special,
    ) -> SentencePieceTokenizer:
        """From a Marian checkpoint's files; `special` as the constructor's."""

        def read_json(path):
            return json.loads(Path(path).read_text(encoding="utf-8"))

        return cls(
            Path(source_spm).read_bytes(),
            Path(target_spm).read_bytes(),
            read_json(vocab),
            None if target_vocab is None else read_json(target_vocab),
            **special,
        )

    def to_dict(self) -> dict:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode("ascii")

        return {
            "kind": KIND,
            "source_model": b64(self.source_model),
            "target_model": b64(self.target_model),
            "vocab": self.vocab,
            "target_vocab": self.target_vocab,
            "pad": self.pad,
            "eos": self.eos,
            "unk": self.unk,
            "start_id": self.start_id,
        }

    @classmethod
    def from_dict(cls, values: dict) -> SentencePieceTokenizer:
        values = dict(values)
        if values.pop("kind", None) != KIND:
            raise ValueError(f"not a {KIND} tokenizer")
        for side in ("source_model", "target_model"):
            values[side] = base64.b64decode(values[side])
        return cls(**values)

    def save(self, path: str | Path) -> None:
        """Writes the tokenizer, both models included, to one JSON file, atomically."""
        atomic_write(path, lambda f: f.write(json.dumps(self.to_dict()).encode("utf-8")))

    def encode(self, text: str) -> list[int]:
        """Source ids of `text`, without `</s>`; a leading `>>xx<<` language code is one token."""
        text = encodable(text)
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        pieces = code + self._source.encode(text, out_type=str)
        return [self.vocab.get(piece, self.unk_id) for piece in pieces]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def tokens(self, text: str) -> list[str]:
        """Source pieces of `text`."""
        return [self._source_pieces[i] for i in self.encode(text)]

    def id_to_token(self, token_id: int) -> str:
        """The target piece of `token_id` (the source piece where only the source has it)."""
        token_id = int(token_id)
        piece = self._pieces.get(token_id, self._source_pieces.get(token_id))
        if piece is None:
            raise IndexError(f"token id {token_id} outside vocabulary of size {self.vocab_size}")
        return piece

    def decode(self, ids: Sequence[int]) -> str:
        """Target text of `ids`, read up to the first `</s>`; pad, start and unk are skipped
        (as `MarianTokenizer.decode(skip_special_tokens=True)` does)."""
        pieces = []
        for token_id in map(int, ids):
            if token_id == self.end_id:
                break
            piece = self._pieces.get(token_id, self.unk)
            if token_id not in (self.pad_id, self.start_id) and piece != self.unk:
                pieces.append(piece)
        return self._decoder_model.decode_pieces(pieces).replace("▁", " ").strip()

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]
