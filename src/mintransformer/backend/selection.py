"""Choosing the Keras backend, which must happen before Keras is imported.

This module imports Keras only inside `select_backend`, after the choice is made.
"""

from __future__ import annotations

import os
import sys

BACKENDS = ("tensorflow", "jax", "torch")


def select_backend(backend: str | None, verbose: int = 1) -> None:
    """Sets the Keras backend and starts Keras, quietly unless `verbose` >= 2.

    Raises:
        ValueError: if Keras already runs on another backend in this process.
    """
    if backend is not None and "keras" in sys.modules:
        import keras

        if keras.backend.backend() != backend:
            raise ValueError(
                f"Keras already runs on {keras.backend.backend()} in this process, so "
                f"--backend {backend} cannot take effect: choose it before Keras starts."
            )
    if backend is not None:
        os.environ["KERAS_BACKEND"] = backend
    if verbose < 2:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if "keras" not in sys.modules:
            import_keras_quietly()


def import_keras_quietly() -> None:
    """Imports Keras (and its backend) with the process's stderr closed: TensorFlow's C++
    start-up lines are written there before its log level can be set."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        import keras  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
