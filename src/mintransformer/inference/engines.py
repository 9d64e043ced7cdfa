"""The engine factory: what runs a trained model, the Keras model or its ONNX export.

Each function returns what one inference class takes:

    translation_engine      -> Translator(steps, tokenizer, config)
    classification_engine   -> Classifier(probabilities, tokenizer, config)
    generation_engine       -> Generator(generate_ids, tokenizer, max_length)

"keras" loads the run's weights into our layers (`runs.loading.load_trained`);
"onnx" opens its export on onnxruntime without Keras (`export.onnx_engine`), and the
path may then be the export folder itself; "ct2" (translation only) opens its
CTranslate2 export (`export.ct2_engine`), which runs the search itself. "auto"
(`choose_engine`) takes the run's CTranslate2 export, else its ONNX export, else the
Keras engine: an export answers in a fraction of a second from a cold process, where
the Keras engine first imports its backend and compiles the search. Keras is imported
only by the Keras engine.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from mintransformer.config import ClassificationConfig, LanguageModelConfig, TranslationConfig
from mintransformer.core import checks
from mintransformer.core.errors import CorruptFileError

ENGINES = ("keras", "onnx", "ct2")
TRANSLATION_ONLY = ("ct2",)
AUTO = "auto"
ENGINE_CHOICES = (AUTO, *ENGINES)
ONNX_HAS_NO_ATTENTION = (
    "the onnx engine runs the exported graphs, which return no attention weights: use "
    "the keras engine for attention"
)


@dataclass(frozen=True)
class EngineChoice:
    """The engine `--engine auto` runs, and why (empty: the Keras engine, no export there)."""

    engine: str
    reason: str = ""


def _open_export(engine: str, path: Path) -> dict:
    """The manifest of the `engine` export in (or at) `path`, checked as the engine checks it."""
    if engine == "ct2":
        from mintransformer.export.ct2_engine import open_folder

        return open_folder(path)[1]
    from mintransformer.export.folder import ExportFolder

    return ExportFolder.open(path)[1]


def choose_engine(path: str | Path) -> EngineChoice:
    """What "auto" runs for the run directory or export folder `path`.

    An export folder runs on its own engine. A run runs on its CTranslate2 export
    (`RUN/ct2`), else its ONNX export (`RUN/onnx`), each only when it was made from the
    run's present config and weights and its runtime is installed; else on the Keras
    engine. An export with int8 weights is taken too, and the reason says so.
    """
    from mintransformer.export import ct2_engine, folder

    path = Path(path)
    if (path / "model.bin").is_file():
        return EngineChoice("ct2", f"{path} is a CTranslate2 folder")
    if (path / folder.MANIFEST).is_file():
        return EngineChoice("onnx", f"{path} is an ONNX export")
    passed_over = []
    for engine, runtime, name in (
        ("ct2", "ctranslate2", ct2_engine.DEFAULT_FOLDER),
        ("onnx", "onnxruntime", folder.DEFAULT_FOLDER),
    ):
        export = path / name
        if not export.is_dir():
            continue
        if importlib.util.find_spec(runtime) is None:
            passed_over.append(f"{export} needs {runtime}, which is not installed")
            continue
        try:
            manifest = _open_export(engine, path)
        except (FileNotFoundError, ValueError, CorruptFileError) as err:
            passed_over.append(f"{export} not used: {err}")
            continue
        weights = "int8" if manifest.get("int8") else "fp32"
        return EngineChoice(engine, f"{export}, the run's export, {weights} weights")
    return EngineChoice("keras", "; ".join(passed_over))


def resolve_engine(path: str | Path, engine: str) -> str:
    """`engine`, checked, with "auto" replaced by `choose_engine`'s choice for `path`."""
    engine = checks.one_of(engine, ENGINE_CHOICES, "engine")
    return choose_engine(path).engine if engine == AUTO else engine


def translation_engine(
    path: str | Path,
    engine: str = "keras",
    max_output_length: int | None = None,
    mixed_precision: bool | None = None,
):
    """`(steps, tokenizer, config)` of a translation run (`decoding.steps` protocol);
    `mixed_precision` is the Keras engine's (`runs.loading.load_trained`)."""
    engine = resolve_engine(path, engine)
    if engine == "onnx":
        from mintransformer.export import onnx_engine

        steps, tokenizer, config = onnx_engine.translation_engine(path, max_output_length)
    elif engine == "ct2":
        from mintransformer.export import ct2_engine

        steps, tokenizer, config = ct2_engine.translation_engine(path, max_output_length)
    else:
        from mintransformer.runs.loading import load_trained

        model, tokenizer, config = load_trained(path, TranslationConfig, mixed_precision)
        steps = keras_translation_steps(model, max_output_length)
    return steps, tokenizer, config


def _not_translation_only(path: str | Path, engine: str, task: str) -> str:
    if (engine := resolve_engine(path, engine)) in TRANSLATION_ONLY:
        raise ValueError(f"the {engine} engine runs translation models, not {task} ones")
    return engine


def classification_engine(path: str | Path, engine: str = "keras"):
    """`(probabilities, tokenizer, config)` of a classification run."""
    if _not_translation_only(path, engine, "classification") == "onnx":
        from mintransformer.export import onnx_engine

        return onnx_engine.classification_engine(path)
    from mintransformer.runs.loading import load_trained

    model, tokenizer, config = load_trained(path, ClassificationConfig)
    return KerasProbabilities(model), tokenizer, config


def generation_engine(path: str | Path, engine: str = "keras"):
    """`(generate_ids, tokenizer, max_length)` of a language-model run."""
    if _not_translation_only(path, engine, "language") == "onnx":
        from mintransformer.export import onnx_engine

        return onnx_engine.generation_engine(path)
    from mintransformer.runs.loading import load_trained

    model, tokenizer, _ = load_trained(path, LanguageModelConfig)
    return keras_generation(model), tokenizer, model.max_length


def keras_translation_steps(model, max_output_length: int | None = None):
    """Cached, compiled decoding steps of a built `Transformer` (`decoding.steps.CachedSteps`);
    `max_output_length` defaults to all of its target positions."""
    from mintransformer.decoding.steps import CachedSteps

    return CachedSteps(model, max_output_length or model.decoder.max_length)


class KerasProbabilities:
    """The Keras engine of a `Classifier`: int token ids `(batch, length)` -> class
    probabilities (NumPy), compiled; `model` is the `TextClassifier` (attention reads it)."""

    def __init__(self, model):
        from keras import ops

        from mintransformer.backend.compilation import compile_inference

        self.model = model

        def probabilities(token_ids):
            return ops.softmax(model(token_ids, training=False), axis=-1)

        variables = model.trainable_variables + model.non_trainable_variables
        self._compiled = compile_inference(probabilities, variables)

    def __call__(self, token_ids) -> np.ndarray:
        from keras import ops

        return np.asarray(ops.convert_to_numpy(self._compiled(token_ids)))


def keras_generation(model) -> Callable:
    """`generate_ids(prompt_ids, max_new_tokens=..., **options)` of a built `LanguageModel`."""
    from mintransformer.decoding.sampling import generate

    return partial(generate, model)
