"""A translation run -> a CTranslate2 folder, through our Hugging Face export (`hf_export`).

`export_run` writes what `mintransformer export --format ct2` writes and the ct2 engine
reads (`export.ct2_engine`): the model CTranslate2's converter makes of the export, with
the run's tokenizer and a manifest. `convert` is the conversion alone.

CTranslate2's own converter reads the folder, with loaders that follow what the model
holds rather than the conventions of published checkpoints, which do not hold here:

- its Marian loader starts decoding from a zero vector and drops the last vocabulary
  row (OPUS-MT's pad); our runs start from `<s>`'s embedding and their last row is a
  real token;
- its Pegasus loader reads `normalize_before`, which transformers 5's config lacks, and
  starts from the pad token.

Both loaders are replaced, for this conversion only, by its BART loader (the code
both derive from) with pre-LN set from the model type, no LayerNorm on the embeddings,
the vocabulary kept whole and decoding started from the config's
`decoder_start_token_id`. Needs `pip install ctranslate2`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mintransformer import __version__
from mintransformer.core.files import atomic_write, replacing_folder
from mintransformer.export.ct2_engine import (
    CT2_FOLDER_FILES,
    CT2_FORMAT,
    CT2_MODEL_FILES,
    DEFAULT_FOLDER,
)
from mintransformer.export.folder import MANIFEST, file_digest, run_identity
from mintransformer.interop import hf_export
from mintransformer.runs.directory import TOKENIZER, RunDirectory


def _loaders() -> dict:
    """`{config class name: loader}` for our Marian and Pegasus exports."""
    from ctranslate2.converters import transformers as ct2

    class AsWritten(ct2.BartLoader):
        architecture = ""

        @property
        def architecture_name(self) -> str:
            return self.architecture

        def get_model_spec(self, model):
            model.config.normalize_before = model.config.model_type == "pegasus"
            model.config.normalize_embedding = False
            return super().get_model_spec(model)

    class Marian(AsWritten):
        architecture = "MarianMTModel"

    class Pegasus(AsWritten):
        architecture = "PegasusForConditionalGeneration"

    return {"MarianConfig": Marian(), "PegasusConfig": Pegasus()}


@contextlib.contextmanager
def _our_loaders() -> Iterator[None]:
    from ctranslate2.converters import transformers as ct2

    saved = dict(ct2._MODEL_LOADERS)
    ct2._MODEL_LOADERS.update(_loaders())
    try:
        yield
    finally:
        ct2._MODEL_LOADERS.clear()
        ct2._MODEL_LOADERS.update(saved)


def _convert_into(hf_folder: Path, staging: Path, quantization: str | None) -> None:
    from ctranslate2.converters import TransformersConverter

    with _our_loaders():
        # `force` lets the converter write into the empty staging folder (it would clear it).
        TransformersConverter(str(hf_folder)).convert(
            str(staging), quantization=quantization, force=True
        )


def convert(hf_folder: str | Path, out: str | Path, quantization: str | None = None) -> Path:
    """Converts the folder `hf_export.export_run` wrote into a CTranslate2 model at `out`.

    Args:
        hf_folder: our Hugging Face export.
        out: the CTranslate2 model folder. An earlier CTranslate2 model there is replaced
            once the new one is complete; a folder holding anything else is refused.
        quantization: CTranslate2's weight type, e.g. "int8"; None keeps float32.

    Returns:
        `out`. Translate with `ctranslate2.Translator(out)`, on the token strings of the
        export's tokenizer (`</s>` appended).

    Raises:
        FileExistsError: `out` holds files that are not a CTranslate2 model's.
    """
    out = Path(out)
    with replacing_folder(out, CT2_MODEL_FILES, "a CTranslate2 model") as staging:
        _convert_into(Path(hf_folder), staging, quantization)
    return out


def export_run(run_dir: str | Path, out: str | Path | None = None, int8: bool = False) -> Path:
    """Writes a translation run's CTranslate2 folder (`export.ct2_engine`); returns it.

    Args:
        run_dir: the run directory.
        out: the folder (default: RUN/ct2). An earlier CTranslate2 export there is
            replaced once the new one is complete; a folder holding anything else is
            refused.
        int8: int8 weights (CTranslate2's "int8" quantization) instead of float32.

    Raises:
        ValueError: naming the setting, for a run `hf_export` cannot express.
        FileExistsError: `out` holds files that are not a CTranslate2 export's.
    """
    try:
        import ctranslate2  # noqa: F401
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "--format ct2 needs CTranslate2: pip install mintransformer[ct2]"
        ) from err
    run = RunDirectory.open(run_dir)
    config = run.config()
    if config.task != "translation":
        raise ValueError(f"{run.path} is a {config.task} run: CTranslate2 exports translation runs")
    out = Path(out) if out is not None else run.path / DEFAULT_FOLDER
    with (
        replacing_folder(out, CT2_FOLDER_FILES, "a CTranslate2 export") as staging,
        tempfile.TemporaryDirectory() as scratch,
    ):
        hf = hf_export.export_run(run.path, Path(scratch) / "hf")
        _convert_into(hf, staging, "int8" if int8 else None)
        shutil.copyfile(run.tokenizer_path, staging / TOKENIZER)
        manifest = {
            "format": CT2_FORMAT,
            "version": __version__,
            "task": config.task,
            "int8": bool(int8),
            "run": run_identity(run),
            "tokenizer_sha256": file_digest(staging / TOKENIZER),
            "config": json.loads(config.to_json()),
        }
        text = json.dumps(manifest, indent=2)
        atomic_write(staging / MANIFEST, lambda f: f.write(text.encode()))
    return out
