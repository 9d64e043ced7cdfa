"""Translating text with a trained run, and scoring it with sacreBLEU and chrF.

Sentences are batched by length for speed and returned in input order. An empty
line translates to an empty line. A sentence longer than the model's source
positions is truncated to fit, with a warning naming how many were
(`encode_sources(truncate=False)` refuses it instead: the server does).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sacrebleu
from tqdm.auto import tqdm

from mintransformer.config import TranslationConfig
from mintransformer.core.files import atomic_write
from mintransformer.data.lengths import pad_batch
from mintransformer.data.text import normalize_text, read_lines
from mintransformer.decoding.beam import BeamOptions, beam_search_n_best, warm_beam
from mintransformer.decoding.greedy import greedy_search, warm_greedy
from mintransformer.inference.engines import keras_translation_steps, translation_engine
from mintransformer.inference.streaming import CHUNK_LINES, map_lines

# The length-penalty exponents `choose_alpha` tries by default.
ALPHAS = (0.6, 1.0, 1.4, 1.8)


@dataclass
class AlphaChoice:
    """The length-penalty exponent that scored best on a set of pairs, and each one's BLEU."""

    alpha: float
    bleu: dict[float, float]
    beam_size: int
    sentences: int

    def __str__(self) -> str:
        tried = ", ".join(f"{bleu:.2f} at {alpha:g}" for alpha, bleu in self.bleu.items())
        return (
            f"alpha {self.alpha:g} chosen on val ({self.sentences} sentences, beam "
            f"{self.beam_size}; BLEU {tried})"
        )


@dataclass
class Scores:
    bleu: float
    chrf: float
    signature: str
    alpha_choice: AlphaChoice | None = None

    def __str__(self) -> str:
        scores = f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  ({self.signature})"
        return scores if self.alpha_choice is None else f"{scores}\n{self.alpha_choice}"


def score(hypotheses: Sequence[str], references: Sequence[str | Sequence[str]]) -> Scores:
    """Corpus sacreBLEU (13a tokenisation) and chrF of detokenised text.

    Each reference is a string, or a list of the acceptable translations of that
    sentence (sacreBLEU's multi-reference scoring; the lists may differ in length).
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: counts must match."
        )
    if not hypotheses:
        raise ValueError("no sentence to score: the hypotheses and references are empty")
    options = [[r] if isinstance(r, str) else list(r) for r in references]
    count = max(len(o) for o in options) if options else 1
    streams = [[o[i] if i < len(o) else None for o in options] for i in range(count)]
    bleu = sacrebleu.metrics.BLEU()
    result = bleu.corpus_score(list(hypotheses), streams)
    chrf = sacrebleu.metrics.CHRF().corpus_score(list(hypotheses), streams)
    return Scores(result.score, chrf.score, str(bleu.get_signature()))


class SourceTooLongError(ValueError):
    """A text with more subword tokens than the model reads (`encode_sources(truncate=False)`).

    Attributes:
        index: the text's position in the list encoded.
        tokens: its subword tokens (`</s>` not counted).
        limit: the most the model reads, `Translator.max_source_length`.
    """

    def __init__(self, index: int, tokens: int, limit: int):
        super().__init__(
            f"text {index} is {tokens} subword tokens; this model reads at most {limit}: "
            "split it into sentences."
        )
        self.index, self.tokens, self.limit = index, tokens, limit


class Translator:
    """Translates with an engine and a tokenizer; `Translator.from_run(dir)` loads a run.

    Args:
        steps: the engine: decoding steps (`decoding.steps` protocol: start, step,
            reorder) with `max_length` target positions and `source_positions`, from
            `inference.engines` (the Keras model's `CachedSteps` or the export's
            `OnnxSteps`), or an engine that runs the whole search itself, with a
            `search` method returning what `beam_search_n_best` returns
            (`export.ct2_engine.Ct2Search`).
        tokenizer: the run's `Tokenizer`.
        config: the run's `TranslationConfig`, where there is one (for `evaluate_split`).
    """

    def __init__(self, steps, tokenizer, config: TranslationConfig | None = None):
        self.steps = steps
        self.tokenizer = tokenizer
        self.config = config
        self.max_source_length = steps.source_positions - 1  # </s> is appended
        self.max_output_length = steps.max_length

    @classmethod
    def from_model(
        cls,
        model,
        tokenizer,
        max_output_length: int | None = None,
        config: TranslationConfig | None = None,
    ) -> Translator:
        """The translator of a built Keras `Transformer` in memory.

        Args:
            max_output_length: most target tokens per sentence, `</s>` included
                (default: the model's target positions).
        """
        return cls(keras_translation_steps(model, max_output_length), tokenizer, config)

    @classmethod
    def from_run(
        cls,
        path: str | Path,
        max_output_length: int | None = None,
        engine: str = "keras",
        mixed_precision: bool | None = None,
    ) -> Translator:
        """The translator of a finished run.

        Args:
            path: the run directory.
            max_output_length: most target tokens per sentence (default: the model's).
            engine: "keras" (the run's weights), "onnx" (its export on onnxruntime,
                without Keras) or "ct2" (its CTranslate2 export); `path` may then be
                the export folder. "auto": its export where it has one made from its
                present weights, else Keras (`inference.engines.choose_engine`).
            mixed_precision: the Keras engine in bf16 (True) or fp32 (False); None: as
                the run's config asks, or as this machine pays for.
        """
        return cls(*translation_engine(path, engine, max_output_length, mixed_precision))

    @property
    def model(self):
        """The Keras `Transformer` behind the engine (attention maps read it); None on the
        onnx and ct2 engines."""
        return getattr(self.steps, "model", None)

    def encode_sources(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """The source ids of each text: its subwords, then `</s>`.

        A text of more than `max_source_length` subwords is cut to fit, with a warning,
        or, with `truncate=False`, refused with a `SourceTooLongError` naming the first.
        """
        encoded = self.tokenizer.encode_batch([normalize_text(t) for t in texts])
        too_long = [i for i, ids in enumerate(encoded) if len(ids) > self.max_source_length]
        if too_long and not truncate:
            first = too_long[0]
            raise SourceTooLongError(first, len(encoded[first]), self.max_source_length)
        if too_long:
            warnings.warn(
                f"{len(too_long)} input sentence(s) longer than the model's "
                f"{self.max_source_length} source tokens were truncated.",
                stacklevel=3,
            )
        return [ids[: self.max_source_length] + [self.tokenizer.end_id] for ids in encoded]

    def translate(
        self,
        texts: Sequence[str],
        beam_size: int = 1,
        alpha: float = 0.6,
        batch_size: int = 64,
        progress: bool = False,
    ) -> list[str]:
        """Translates `texts` (greedy when `beam_size` is 1); order kept, empty -> empty."""
        outputs = [""] * len(texts)
        todo = [i for i, t in enumerate(texts) if normalize_text(t)]
        sources = self.encode_sources([texts[i] for i in todo])
        order = np.argsort([len(s) for s in sources], kind="stable")
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for batch in tqdm(batches, disable=not progress, desc="translating", unit="batch"):
            ids = pad_batch([sources[i] for i in batch], pad_id=self.tokenizer.pad_id)
            ranked = self._ranked(ids, beam_size, alpha, n_best=1)
            for i, hypotheses in zip(batch, ranked, strict=True):
                outputs[todo[i]] = self.tokenizer.decode(hypotheses[0][0])
        return outputs

    def translate_ids(
        self,
        source_ids,
        beam_size: int = 1,
        alpha: float = 0.6,
        n_best: int = 1,
        shrink_to: Sequence[int] = (),
    ) -> list[list[tuple[str, float | None]]]:
        """Decodes one batch of `encode_sources` ids, padded by the caller, as it is.

        Unlike `translate`, nothing is sorted or re-padded, so the caller chooses the
        shapes that are compiled (the server pads to a few fixed widths and row counts).

        Args:
            source_ids: int `(batch, width)`, rows padded with the tokenizer's pad id.
            beam_size, alpha: as `translate`.
            n_best: translations kept per row (1 for greedy; at most `beam_size`).
            shrink_to: row counts greedy decoding drops finished rows down to
                (`greedy.compiled_greedy`): shapes the caller has compiled.

        Returns:
            per row, `n_best` `(translation, score)` pairs, best first; the score is the
            length-normalised log-probability (None for greedy decoding).
        """
        ranked = self._ranked(source_ids, beam_size, alpha, n_best, shrink_to)
        return [[(self.tokenizer.decode(ids), score) for ids, score in row] for row in ranked]

    def _ranked(
        self, source_ids, beam_size: int, alpha: float, n_best: int, shrink_to: Sequence[int] = ()
    ) -> list[list[tuple[list[int], float | None]]]:
        """Per row of `source_ids`, `n_best` `(token ids, score)` pairs, best first: the
        engine's own search where it runs one (CTranslate2), else ours."""
        options = self._search_options()
        if hasattr(self.steps, "search"):
            return self.steps.search(
                source_ids, beam_size=beam_size, alpha=alpha, n_best=n_best, **options
            )
        if beam_size == 1 and n_best == 1:
            tokens = greedy_search(self.steps, source_ids, shrink_to=shrink_to, **options)
            return [[(row, None)] for row in tokens]
        return beam_search_n_best(
            self.steps, source_ids, beam_size=beam_size, alpha=alpha, n_best=n_best, **options
        )

    def warm_up(self, source_ids, beam_size: int = 1, shrink_to: Sequence[int] = ()) -> None:
        """Compiles what `translate_ids` runs for batches shaped like `source_ids`
        (greedy: `greedy.warm_greedy`, with the shapes `shrink_to` leads to; beam search:
        `beam.warm_beam`); an engine with its own search (CTranslate2) decodes two positions
        of a one-word source."""
        options = self._search_options()
        if hasattr(self.steps, "search"):
            # Nothing compiles per shape, but CTranslate2 sets itself up on its first search
            # of a real token, whatever its shape (about 30 ms, 5x a short request): two
            # positions of one word pay it.
            ids = pad_batch(self.encode_sources(["a"]), pad_id=self.tokenizer.pad_id)
            self.steps.search(
                ids, beam_size=beam_size, alpha=0.6, n_best=1, **options | {"max_length": 2}
            )
            return
        if beam_size == 1:
            warm_greedy(self.steps, source_ids, shrink_to=shrink_to, **options)
        elif getattr(self.steps, "compiled_loops", False):
            warm_beam(self.steps, source_ids, BeamOptions(**options, beam_size=beam_size))
        else:
            self.translate_ids(source_ids, beam_size)

    def _search_options(self) -> dict:
        return dict(
            start_id=self.tokenizer.start_id,
            end_id=self.tokenizer.end_id,
            max_length=self.max_output_length,
        )

    def translate_lines(
        self,
        lines: Iterable[str],
        chunk_size: int = CHUNK_LINES,
        total: int | None = None,
        progress: bool = False,
        **options,
    ) -> Iterator[str]:
        """Translates `lines` a chunk at a time, yielding each translation in input order.

        Memory stays flat however many lines there are; `total` (the line count, if
        known) sizes the progress bar; `options` are `translate`'s.
        """
        return map_lines(
            lines,
            lambda chunk: self.translate(chunk, **options),
            chunk_size,
            total,
            progress,
            "translating",
        )

    def evaluate(
        self,
        source_file: str | Path,
        reference_file: str | Path,
        output_file: str | Path | None = None,
        **options,
    ) -> Scores:
        """Translates `source_file`, writes the hypotheses, scores them against references."""
        sources, references = read_lines(source_file), read_lines(reference_file)
        if not sources:
            raise ValueError(f"{source_file} holds no sentence: nothing to evaluate")
        if len(sources) != len(references):
            raise ValueError(
                f"{source_file} has {len(sources)} lines but {reference_file} has "
                f"{len(references)}: they must be line-aligned."
            )
        hypotheses = self.translate(sources, **options)
        _write_lines(output_file, hypotheses)
        return score(hypotheses, [normalize_text(r) for r in references])

    def evaluate_pairs(
        self,
        pairs: Sequence[tuple[str, str]],
        output_file: str | Path | None = None,
        **options,
    ) -> Scores:
        """Translates the sources of `(source, reference)` pairs and scores them.

        A source that occurs in several pairs (Tatoeba lists many translations of one
        sentence) is translated once and scored against all its references; the output
        file then has one line per distinct source, in order of first occurrence.
        """
        references: dict[str, list[str]] = {}
        for source, reference in pairs:
            references.setdefault(source, []).append(normalize_text(reference))
        hypotheses = self.translate(list(references), **options)
        _write_lines(output_file, hypotheses)
        return score(hypotheses, list(references.values()))

    def split_pairs(self, split: str) -> list[tuple[str, str]]:
        """The `(source, reference)` pairs of a split ("val" or "test") of the corpus the
        run was trained on."""
        from mintransformer.data.corpora import load_corpus

        if self.config is None:
            raise ValueError("this Translator has no run config: load it with from_run")
        splits = load_corpus(self.config.data)
        if split not in splits:
            raise ValueError(f"this run's corpus has no {split!r} split: {sorted(splits)}")
        return splits[split]

    def evaluate_split(
        self, split: str, output_file: str | Path | None = None, **options
    ) -> Scores:
        """Scores a split ("val" or "test") of the corpus the run was trained on."""
        return self.evaluate_pairs(self.split_pairs(split), output_file, **options)

    def choose_alpha(
        self,
        pairs: Sequence[tuple[str, str]],
        beam_size: int,
        alphas: Sequence[float] = ALPHAS,
        progress: bool = False,
    ) -> AlphaChoice:
        """The length-penalty exponent of `alphas` whose beam search scores the highest
        BLEU on `pairs` (the first of equal scores), with each one's BLEU.

        Raises:
            ValueError: for greedy search (`beam_size` 1), which has no length penalty.
        """
        if beam_size < 2:
            raise ValueError("choosing alpha needs beam search (a beam of 2 or more)")
        bleu = {
            float(alpha): self.evaluate_pairs(
                pairs, beam_size=beam_size, alpha=alpha, progress=progress
            ).bleu
            for alpha in alphas
        }
        best = max(bleu, key=lambda alpha: bleu[alpha])
        return AlphaChoice(best, bleu, beam_size, len({source for source, _ in pairs}))

    def report(
        self,
        pairs: Sequence[tuple[str, str]],
        beam_size: int = 1,
        shown: int = 5,
        progress: bool = True,
        alpha: float = 0.6,
    ) -> str:
        """Scores, exact-match rate and a few examples of translating held-out `pairs`."""
        sources = [source for source, _ in pairs]
        references = [target for _, target in pairs]
        hypotheses = self.translate(sources, beam_size=beam_size, alpha=alpha, progress=progress)
        exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(pairs)
        lines = [
            f"held-out ({len(pairs)} sentences): {score(hypotheses, references)}  "
            f"exact match {100 * exact:.1f}%"
        ]
        lines += [
            f"  {s}  ->  {h}" for s, h in zip(sources[:shown], hypotheses[:shown], strict=True)
        ]
        return "\n".join(lines)


def _write_lines(path: str | Path | None, lines: Sequence[str]) -> None:
    if path is not None:
        atomic_write(path, lambda f: f.write("".join(line + "\n" for line in lines).encode()))
