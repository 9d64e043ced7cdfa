"""The export folder: a run's ONNX graphs with what running them needs, and no Keras.

    EXPORT/                 (by default RUN/onnx)
      manifest.json         the task, the graph files, int8 or fp32, the cache layout, and
                            which run they came from: the SHA-256 of the run's config.json
                            and model.npz (and of its tokenizer.json), the export format
                            and mintransformer's version
      config.json           a copy of the run's config
      tokenizer.json        a copy of the run's tokenizer
      encoder.onnx          translation: source ids -> cross-attention keys/values, mask
      decoder_step.onnx     translation: one target position with the key/value cache
      classifier.onnx       classification: token ids -> class probabilities
      lm_step.onnx          language model: one position with the key/value cache

Written by `export.onnx_graphs` (TensorFlow), read by `export.onnx_engine` (onnxruntime +
NumPy). This module imports neither.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mintransformer import __version__
from mintransformer.core.errors import CorruptFileError
from mintransformer.core.files import atomic_write, read_json_object
from mintransformer.runs.directory import CONFIG, TOKENIZER, RunDirectory

# Bumped whenever the graphs' inputs or outputs change.
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
DEFAULT_FOLDER = "onnx"
GRAPHS = {
    "translation": ("encoder.onnx", "decoder_step.onnx"),
    "classification": ("classifier.onnx",),
    "language_model": ("lm_step.onnx",),
}
# Every file an export writes, whatever the task: a folder of only these may be replaced.
EXPORT_FILES = frozenset({MANIFEST, CONFIG, TOKENIZER}.union(*GRAPHS.values()))


def file_digest(path: str | Path) -> str:
    """The SHA-256 of a file, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_identity(run: RunDirectory) -> dict:
    """What names a trained run's model: the digests of its config and final weights."""
    return {
        "config_sha256": file_digest(run.config_path),
        "weights_sha256": file_digest(run.weights_path),
    }


class ExportFolder:
    """Paths and manifest of one export folder; the only code that knows its layout."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.manifest_path = self.path / MANIFEST
        self.config_path = self.path / CONFIG
        self.tokenizer_path = self.path / TOKENIZER

    def graph_path(self, name: str) -> Path:
        return self.path / name

    def write_manifest(self, manifest: dict) -> None:
        text = json.dumps({"format": FORMAT_VERSION, "version": __version__, **manifest}, indent=2)
        atomic_write(self.manifest_path, lambda f: f.write(text.encode()))

    def read_manifest(self) -> dict:
        """The manifest, checked for the fields every export format has.

        Raises:
            CorruptFileError: the manifest is not JSON, or lacks the task or the run.
        """
        remedy = "export the run again"
        manifest = read_json_object(self.manifest_path, remedy)
        if manifest.get("task") not in GRAPHS:
            raise CorruptFileError(
                self.manifest_path, f"names no task we export ({manifest.get('task')!r})", remedy
            )
        if not isinstance(manifest.get("run"), dict) or "config_sha256" not in manifest["run"]:
            raise CorruptFileError(
                self.manifest_path, "does not say which run it came from", remedy
            )
        return manifest

    @classmethod
    def open(cls, path: str | Path) -> tuple[ExportFolder, dict]:
        """The export folder at `path`, or in the run directory `path`, and its manifest.

        Given a run directory, the export inside it must come from that run's config and
        weights. Either way the folder must be complete, of this export format, and hold
        the config it was exported with.

        Raises:
            FileNotFoundError: no export there, or one with files missing.
            ValueError: an export of another run, of other weights, or of another format.
            CorruptFileError: a damaged manifest.
        """
        path = Path(path)
        run = None
        if not (path / MANIFEST).is_file() and (path / CONFIG).is_file():
            run, path = RunDirectory.open(path), path / DEFAULT_FOLDER
            if not (path / MANIFEST).is_file():
                raise FileNotFoundError(
                    f"{run.path} has no ONNX export: run `mintransformer export --run {run.path}`"
                )
        folder = cls(path)
        if not folder.manifest_path.is_file():
            raise FileNotFoundError(f"not an export folder (no {MANIFEST}): {path}")
        manifest = folder.read_manifest()
        if manifest.get("format") != FORMAT_VERSION:
            raise ValueError(
                f"{path} holds export format {manifest.get('format')} (mintransformer "
                f"{manifest.get('version')}); this mintransformer {__version__} reads format "
                f"{FORMAT_VERSION}: export the run again"
            )
        needed = [folder.config_path, folder.tokenizer_path]
        needed += [folder.graph_path(name) for name in GRAPHS[manifest["task"]]]
        missing = [p.name for p in needed if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{path} is an incomplete export: missing {', '.join(missing)}")
        if file_digest(folder.config_path) != manifest["run"]["config_sha256"]:
            raise ValueError(f"{path}: its config.json is not the one it was exported with")
        exported_tokenizer = manifest.get("tokenizer_sha256")  # older exports lack it
        if exported_tokenizer and file_digest(folder.tokenizer_path) != exported_tokenizer:
            raise ValueError(f"{path}: its tokenizer.json is not the one it was exported with")
        if run is not None and run_identity(run) != manifest["run"]:
            raise ValueError(
                f"{path} was exported from another run or other weights than {run.path}: "
                f"export it again with `mintransformer export --run {run.path}`"
            )
        return folder, manifest
