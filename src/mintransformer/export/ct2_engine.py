"""The CTranslate2 engine: a run's CTranslate2 folder searched by CTranslate2 itself.

    CT2 FOLDER              (by default RUN/ct2; `mintransformer export --format ct2`)
      model.bin, config.json, *vocabulary.json    CTranslate2's model, as its converter
                                                  writes it (`interop.ct2_export`)
      tokenizer.json        a copy of the run's tokenizer
      manifest.json         the task, the run it came from (the digests of its config.json
                            and model.npz), the run's config, int8 or float32

CTranslate2 runs the whole search in C++, so it does not take our `decoding.steps`
calls: `Ct2Search.search` is given the settings our searches take (start and end
tokens, length limit, the pad never emitted, no `</s>` first, beam size) and returns
hypotheses of the same form as `decoding.beam.beam_search_n_best`, scored and ranked as
ours are. Nothing here imports Keras.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from mintransformer.config import TranslationConfig
from mintransformer.core.cpu import usable_cores
from mintransformer.core.errors import CorruptFileError
from mintransformer.core.files import read_json_object
from mintransformer.data.tokenizer_file import load_tokenizer
from mintransformer.decoding.beam import length_penalty
from mintransformer.export.folder import MANIFEST, file_digest, run_identity
from mintransformer.runs.directory import CONFIG, TOKENIZER, RunDirectory

DEFAULT_FOLDER = "ct2"
# The files CTranslate2's converter writes into a folder.
CT2_MODEL_FILES = frozenset(
    {CONFIG, "model.bin", "vmap.txt"}
    | {
        f"{side}vocabulary.{ext}"
        for side in ("", "shared_", "source_", "target_")
        for ext in ("json", "txt")
    }
)
# Every file of a CTranslate2 folder of ours: a folder of only these may be replaced.
CT2_FOLDER_FILES = CT2_MODEL_FILES | {MANIFEST, TOKENIZER}
CT2_FORMAT = "ctranslate2"


def open_folder(path: str | Path) -> tuple[Path, dict]:
    """The CTranslate2 folder at `path`, or in the run directory `path`, and its manifest.

    Raises:
        FileNotFoundError: no such folder, or one with files missing.
        ValueError: a folder converted from another run or other weights than `path`'s.
        CorruptFileError: a damaged manifest.
    """
    path = Path(path)
    run = None
    if not (path / "model.bin").is_file() and (path / CONFIG).is_file():
        run, path = RunDirectory.open(path), path / DEFAULT_FOLDER
        if not (path / "model.bin").is_file():
            raise FileNotFoundError(
                f"{run.path} has no CTranslate2 export: run `mintransformer export --format ct2 "
                f"--run {run.path}`"
            )
    missing = [name for name in ("model.bin", MANIFEST, TOKENIZER) if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{path} is not a CTranslate2 export of ours (missing {', '.join(missing)}): "
            "write one with `mintransformer export --format ct2 --run RUN`"
        )
    remedy = "export the run again with `mintransformer export --format ct2`"
    manifest = read_json_object(path / MANIFEST, remedy)
    if manifest.get("format") != CT2_FORMAT or not isinstance(manifest.get("config"), dict):
        raise CorruptFileError(path / MANIFEST, "is not a CTranslate2 export's manifest", remedy)
    if file_digest(path / TOKENIZER) != manifest.get("tokenizer_sha256"):
        raise ValueError(f"{path}: its tokenizer.json is not the one it was exported with")
    if run is not None and run_identity(run) != manifest.get("run"):
        raise ValueError(
            f"{path} was converted from another run or other weights than {run.path}: "
            f"export it again with `mintransformer export --format ct2 --run {run.path}`"
        )
    return path, manifest


def vocabularies(path: Path) -> tuple[list[str], list[str]]:
    """The source and target token lists of a CTranslate2 model folder, in id order."""

    def read(name: str) -> list[str] | None:
        file = path / f"{name}vocabulary.json"
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None

    shared = read("shared_")
    source, target = shared or read("source_"), shared or read("target_")
    if source is None or target is None:
        raise FileNotFoundError(f"{path} holds no CTranslate2 vocabulary")
    return source, target


class Ct2Search:
    """A CTranslate2 model behind `Translator`: the search, run by CTranslate2.

    Args:
        translator: a `ctranslate2.Translator`.
        source_tokens, target_tokens: the vocabularies, in our ids' order.
        max_length: most target tokens per sentence, `</s>` included.
        source_positions: the model's source positions (its target positions too).
        pad_id: the token never emitted, as in our searches.
    """

    def __init__(
        self,
        translator,
        source_tokens: list[str],
        target_tokens: list[str],
        max_length: int,
        source_positions: int,
        pad_id: int,
    ):
        self.translator = translator
        self.source_tokens, self.target_tokens = source_tokens, target_tokens
        self.target_ids = {token: i for i, token in enumerate(target_tokens)}
        self.max_length, self.source_positions = max_length, source_positions
        self.pad_id = pad_id

    def search(
        self,
        source_ids,
        *,
        beam_size: int,
        alpha: float,
        n_best: int,
        start_id: int,
        end_id: int,
        max_length: int,
    ) -> list[list[tuple[list[int], float | None]]]:
        """Decodes a padded batch of source ids; per row up to `n_best` `(token ids,
        score)`, best first, as `beam_search_n_best` (greedy: one, with score None).

        CTranslate2 searches by total log-probability (its length penalty is not ours)
        and suppresses the pad before the softmax, where ours bans it after; so the
        hypotheses it keeps are scored again, by the model's own log-probabilities
        (`score_batch`), and ranked by our length penalty, `((5 + length) / 6) ** alpha`.
        At `alpha` 0 the two searches agree, scores included.
        """
        rows = [
            [self.source_tokens[i] for i in row if i != self.pad_id]
            for row in np.asarray(source_ids)
        ]
        greedy = beam_size == 1 and n_best == 1
        results = self.translator.translate_batch(
            rows,
            max_batch_size=len(rows),
            beam_size=beam_size,
            num_hypotheses=1 if greedy else beam_size,
            length_penalty=0.0,
            max_decoding_length=max_length,
            min_decoding_length=1,  # no </s> first, as `decoding.rules`
            end_token=self.target_tokens[end_id],
            suppress_sequences=[[self.target_tokens[self.pad_id]]],
            return_scores=not greedy,
        )
        found = [[[self.target_ids[t] for t in tokens] for tokens in r.hypotheses] for r in results]
        if greedy:
            return [[(hypotheses[0], None)] for hypotheses in found]
        totals = self._totals(rows, found, max_length, [r.scores for r in results])
        ranked = []
        for hypotheses, row_totals in zip(found, totals, strict=True):
            scored = []
            for ids, total in zip(hypotheses, row_totals, strict=True):
                # A hypothesis cut at `max_length` never emitted </s> (as `beam._ranked`).
                ended = len(ids) < max_length
                scored.append((total / length_penalty(len(ids) + ended, alpha), ids))
            scored.sort(key=lambda pair: -pair[0])
            ranked.append([(ids, score) for score, ids in scored[:n_best]])
        return ranked

    def _totals(
        self,
        rows: list[list[str]],
        found: list[list[list[int]]],
        max_length: int,
        search_totals: list[list[float]],
    ) -> list[list[float]]:
        """The total log-probability of each hypothesis of each row, `</s>` included where
        it ended, by the model's own next-token distributions.

        `score_batch` scores a hypothesis and then `</s>`, one decoder position more than
        the hypothesis has tokens; one as long as the model's positions leaves none for
        it, so it keeps `search_totals`, CTranslate2's own total from its search (the pad
        banned before the softmax, so a little higher than ours).
        """
        sources, targets = [], []
        for row, hypotheses in zip(rows, found, strict=True):
            for ids in hypotheses:
                if len(ids) < self.source_positions:
                    sources.append(row)
                    targets.append([self.target_tokens[i] for i in ids])
        scored = iter(self.translator.score_batch(sources, targets) if sources else [])
        totals = []
        for hypotheses, searched in zip(found, search_totals, strict=True):
            row_totals = []
            for ids, search_total in zip(hypotheses, searched, strict=True):
                if len(ids) >= self.source_positions:
                    row_totals.append(float(search_total))
                    continue
                log_probs = next(scored).log_probs  # each token's, then </s>'s
                ended = len(ids) < max_length
                row_totals.append(float(np.sum(log_probs[: len(ids) + ended], dtype="float64")))
            totals.append(row_totals)
        return totals


def translation_engine(path: str | Path, max_output_length: int | None = None):
    """`(Ct2Search, tokenizer, config)` of a run's CTranslate2 folder (`path`: the folder,
    or a run directory holding it); `max_output_length` defaults to the model's target
    positions."""
    # CTranslate2 runs its products on Intel MKL on Intel CPUs (not on AMD), read once at
    # import: on a 2-core Xeon its own kernels (oneDNN) decoded 3.6-8x faster (docs/speed.md).
    # CT2_USE_MKL=1 in the environment keeps MKL.
    os.environ.setdefault("CT2_USE_MKL", "0")
    try:
        import ctranslate2
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "the ct2 engine needs CTranslate2: pip install mintransformer[ct2]"
        ) from err
    folder, manifest = open_folder(path)
    config = TranslationConfig.from_json(json.dumps(manifest["config"]), str(folder / MANIFEST))
    tokenizer = load_tokenizer(folder / TOKENIZER)
    model = ctranslate2.Translator(
        str(folder), device="cpu", inter_threads=1, intra_threads=usable_cores()
    )
    source_tokens, target_tokens = vocabularies(folder)
    search = Ct2Search(
        model,
        source_tokens,
        target_tokens,
        max_output_length or config.max_length,
        config.max_length,
        tokenizer.pad_id,
    )
    return search, tokenizer, config
