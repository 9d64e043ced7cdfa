"""Shared pytest fixtures."""

import os
from pathlib import Path

import keras
import numpy as np
import pytest

DATA_ENV_VAR = "MINTRANSFORMER_DATA"


def find_shared_data_dir() -> Path | None:
    """Returns the folder of the real datasets, or None if it is not there.

    ``$MINTRANSFORMER_DATA`` if set, else ``shared/data`` beside the repository root.
    """
    configured = os.environ.get(DATA_ENV_VAR)
    if configured:
        path = Path(configured)
    else:
        path = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The folder of the real datasets; skips the test if it is missing."""
    path = find_shared_data_dir()
    if path is None:
        pytest.skip(f"real data folder not found (set ${DATA_ENV_VAR} or create ../shared/data)")
    return path


@pytest.fixture
def rng():
    """A seeded NumPy generator, fresh for each test."""
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _seed_keras():
    keras.utils.set_random_seed(1234)


def to_numpy(x) -> np.ndarray:
    """Any backend tensor -> NumPy array."""
    return np.asarray(keras.ops.convert_to_numpy(x))
