"""Scoring a trained run or export on held-out data: BLEU and chrF for translation,
accuracy for classification; the task is read from the run's own config."""

from __future__ import annotations

from pathlib import Path

from mintransformer.config import ClassificationConfig, RunConfig, config_from_json
from mintransformer.inference.classifier import Accuracy, Classifier
from mintransformer.inference.engines import resolve_engine
from mintransformer.inference.translator import Scores, Translator


def run_config(path: str | Path, engine: str = "keras") -> RunConfig:
    """The config of the run directory (engine "keras") or export folder ("onnx", "ct2")
    at `path`; "auto" as `engines.choose_engine` picks."""
    engine = resolve_engine(path, engine)
    if engine == "onnx":
        from mintransformer.export.folder import ExportFolder

        folder, _ = ExportFolder.open(path)
        return config_from_json(folder.config_path.read_text(), str(folder.config_path))
    if engine == "ct2":
        import json

        from mintransformer.export.ct2_engine import MANIFEST, open_folder

        folder, manifest = open_folder(path)
        return config_from_json(json.dumps(manifest["config"]), str(folder / MANIFEST))
    from mintransformer.runs.directory import RunDirectory

    return RunDirectory.open(path).config()


def evaluate_run(
    path: str | Path,
    engine: str = "keras",
    *,
    data: str | Path | None = None,
    src: str | Path | None = None,
    ref: str | Path | None = None,
    split: str | None = None,
    output: str | Path | None = None,
    beam_size: int = 1,
    alpha: float | str = 0.6,
    progress: bool = True,
) -> Scores | Accuracy:
    """Scores the run at `path` on the data its task takes.

    Args:
        path: a run directory, or an export folder with engine "onnx" or "ct2".
        engine: "keras", "onnx", "ct2" or "auto" (`inference.engines`).
        data: classification: a labelled file or folder.
        src, ref: translation: line-aligned source and reference files.
        split: translation: "val" or "test" of the corpus the run was trained on, or
            "mix_val" or "mix_test" of the corpus mixed into it (`corpora.with_mix`).
        output: translation: write the hypotheses here.
        beam_size, alpha: translation: the search (beam 1 is greedy); alpha "val":
            the exponent of `ALPHAS` that scores best on the run's validation split
            (`Translator.choose_alpha`; "mix_val" for a "mix_" split), reported with the
            scores.
        progress: show progress bars.

    Raises:
        ValueError: when the data given do not fit the run's task.
    """
    engine = resolve_engine(path, engine)
    if isinstance(run_config(path, engine), ClassificationConfig):
        if data is None:
            raise ValueError("a classification run is evaluated on --data FILE (labelled texts)")
        return Classifier.from_run(path, engine=engine).evaluate(data, progress=progress)
    if not split and (src is None or ref is None):
        raise ValueError(
            "a translation run is evaluated on --src FILE and --ref FILE, or on --split "
            "val|test of the corpus it was trained on"
        )
    translator = Translator.from_run(path, engine=engine)
    choice = None
    if alpha == "val":
        if beam_size < 2:
            raise ValueError("--alpha val needs --beam 2 or more: greedy search has no alpha")
        # A mixed-in corpus's test split is scored at the alpha its own val split chooses.
        val = "mix_val" if split and split.startswith("mix_") else "val"
        choice = translator.choose_alpha(translator.split_pairs(val), beam_size, progress=progress)
        alpha = choice.alpha
    options = dict(beam_size=beam_size, alpha=float(alpha), progress=progress)
    if split:
        scores = translator.evaluate_split(split, output, **options)
    else:
        scores = translator.evaluate(src, ref, output, **options)
    scores.alpha_choice = choice
    return scores
