"""Joint subword (BPE) tokenizer built on the Hugging Face ``tokenizers`` library.

Words are marked sentencepiece-style with a leading "▁", so subword strings stay readable
(useful as attention-plot labels) and decoding restores the original spacing exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from mintransformer.core.errors import CorruptFileError
from mintransformer.core.files import atomic_write

# Surrogate code points: a Python string may hold them (from "surrogateescape"
# decoding, or JSON's "\\ud800"), UTF-8 and so the tokenizers library cannot.
_SURROGATES = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """`text` with its surrogate code points made real characters: a high and low
    surrogate in a row become the character they encode, a lone one U+FFFD."""
    if _SURROGATES.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class Tokenizer:
    """Joint subword (BPE) tokenizer; ids: <pad>=0, <s>=1, </s>=2, <unk>=3."""

    PAD, START, END, UNK = "<pad>", "<s>", "</s>", "<unk>"
    SPECIAL_TOKENS = (PAD, START, END, UNK)
    pad_id, start_id, end_id, unk_id = 0, 1, 2, 3

    def __init__(self, hf_tokenizer: HFTokenizer) -> None:
        """Wraps a trained ``tokenizers.Tokenizer``; use `train` or `load` to get one.

        Args:
            hf_tokenizer: A trained tokenizer whose special tokens have the fixed ids above.

        Raises:
            ValueError: If a special token is missing or has the wrong id.
        """
        for token_id, token in enumerate(self.SPECIAL_TOKENS):
            if hf_tokenizer.token_to_id(token) != token_id:
                raise ValueError(f"special token {token!r} must have id {token_id}")
        # A literal "<s>" in the input text is ordinary text, not a control token.
        hf_tokenizer.encode_special_tokens = True
        self._hf = hf_tokenizer

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int = 8000,
        min_frequency: int = 2,
        lowercase: bool = False,
    ) -> Tokenizer:
        """Trains a BPE tokenizer on raw sentences (typically source and target together).

        Args:
            texts: Training sentences; may be a one-shot iterator.
            vocab_size: Largest vocabulary size, special tokens included. BPE stops early when
                the data supports no more merges.
            min_frequency: Minimum count of a pair for it to be merged.
            lowercase: Lowercase all text (at training and at every later encode).

        Returns:
            The trained tokenizer.

        Raises:
            ValueError: If `texts` is empty, or `vocab_size` cannot hold the special tokens
                plus every character of the training texts.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of sentences, not a single string")
        if vocab_size < len(cls.SPECIAL_TOKENS) + 1:
            raise ValueError(f"vocab_size must be at least {len(cls.SPECIAL_TOKENS) + 1}")
        if min_frequency < 1:
            raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")

        hf = HFTokenizer(models.BPE(unk_token=cls.UNK))
        steps = [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
        if lowercase:
            steps.append(normalizers.Lowercase())
        hf.normalizer = normalizers.Sequence(steps)
        # Splitting after hyphens keeps compounds ("quatre-vingt-dix", "est-ce") in word-sized
        # pieces; spaces are kept as "▁", so decoding still restores the exact text.
        hf.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
                pre_tokenizers.Split("-", behavior="merged_with_previous"),
            ]
        )
        hf.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(cls.SPECIAL_TOKENS),
            show_progress=False,
        )

        num_texts = 0

        def counted() -> Iterator[str]:
            nonlocal num_texts
            for text in texts:
                if text.strip():
                    num_texts += 1
                yield encodable(text)

        hf.train_from_iterator(counted(), trainer)
        if num_texts == 0:
            raise ValueError("texts is empty (no non-blank sentence to train on)")
        # The trainer always keeps the full alphabet, overshooting a too-small vocab_size.
        if hf.get_vocab_size() > vocab_size:
            raise ValueError(
                f"vocab_size={vocab_size} is smaller than the {hf.get_vocab_size()} special "
                "tokens and distinct characters of the training texts"
            )
        return cls(hf)

    def save(self, path: str | Path) -> None:
        """Writes the tokenizer to one JSON file, atomically.

        Args:
            path: Destination file; its directory must exist.
        """
        atomic_write(path, lambda f: f.write(self._hf.to_str().encode("utf-8")))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Reads a tokenizer written by `save`.

        Args:
            path: JSON file written by `save`.

        Returns:
            The loaded tokenizer.

        Raises:
            FileNotFoundError: If `path` does not exist.
            CorruptFileError: If `path` is empty, truncated or not a tokenizer file.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {path}")
        try:
            return cls(HFTokenizer.from_str(path.read_text(encoding="utf-8")))
        except Exception as err:  # tokenizers raises a bare Exception on parse errors
            raise CorruptFileError(
                path, f"is corrupt: empty, truncated or not a tokenizer file ({err})"
            ) from None

    @property
    def vocab_size(self) -> int:
        """Number of tokens, special tokens included."""
        return self._hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens."""
        return self._hf.encode(encodable(text), add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens."""
        encodings = self._hf.encode_batch(list(map(encodable, texts)), add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, read up to the first </s>; <pad> and <s> are skipped.

        Args:
            ids: Token ids, e.g. a row of model output (numpy integers are fine).

        Returns:
            The detokenized text; unknown characters come back as "<unk>".
        """
        kept: list[int] = []
        for token_id in map(int, ids):
            if token_id == self.end_id:
                break
            if token_id not in (self.pad_id, self.start_id):
                kept.append(token_id)
        return self._hf.decode(kept, skip_special_tokens=False)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """`decode` applied to each sequence of `batch`."""
        return [self.decode(ids) for ids in batch]

    def id_to_token(self, token_id: int) -> str:
        """Subword string of `token_id`.

        Raises:
            IndexError: If `token_id` is outside the vocabulary.
        """
        token = self._hf.id_to_token(int(token_id))
        if token is None:
            raise IndexError(f"token id {token_id} outside vocabulary of size {self.vocab_size}")
        return token

    def tokens(self, text: str) -> list[str]:
        """Readable subword strings of `text` ("▁" marks the start of a word)."""
        return self._hf.encode(encodable(text), add_special_tokens=False).tokens
