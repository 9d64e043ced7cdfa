"""Shared pytest fixtures."""

import contextlib
import functools
import json
import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

# Before Keras: the tests run TensorFlow as importing mintransformer sets it up (its
# oneDNN kernels on), as the command line and the benchmarks do.
import mintransformer  # noqa: F401  # isort: skip

import keras
import numpy as np
import pytest

DATA_ENV_VAR = "MINTRANSFORMER_DATA"


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with a `slow` test run first; each module's tests stay together and in order.

    With `-n 2 --dist loadscope --no-loadscope-reorder` (the Makefile), pytest-xdist hands
    whole modules to its workers in this order. The slow ones (minutes each) are spread over
    the workers first and the many short ones fill in behind them, so neither worker ends
    long after the other with one slow module left to run.
    """
    slow_modules = {module_of(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: module_of(item) not in slow_modules)


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


@pytest.fixture(scope="session", autouse=True)
def _fp32_unless_asked(tmp_path_factory):
    """Pins this machine's precision measurement to "bf16 does not pay", for the session.

    The suite compares with float32 references, so a run whose config leaves the
    precision to the machine must not switch to bf16 on a CPU where bf16 happens to
    pay and stay in fp32 on another. The pinned entries sit in a cache folder of the
    session's own (`$MINTRANSFORMER_CACHE`, which CLI subprocesses inherit), for every
    backend; tests of the choice itself pass their own cache file and measurement.
    """
    from mintransformer.backend.precision import machine_key

    folder = tmp_path_factory.mktemp("cache")
    even = {"fp32_gflops": 1.0, "bf16_gflops": 1.0, "measured_at": datetime.now(UTC).isoformat()}
    entries = {machine_key(backend=name): even for name in ("tensorflow", "jax", "torch")}
    (folder / "precision.json").write_text(json.dumps(entries))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINTRANSFORMER_CACHE", str(folder))
        yield


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


def value_and_gradients(fn, *arrays):
    """`fn(*tensors)` (a scalar) and its gradients with respect to each of `arrays`, as
    NumPy, differentiated by this backend's autodiff."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(array) for array in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = fn(*tensors)
        gradients = tape.gradient(value, tensors)
    elif backend == "jax":
        import jax

        value, gradients = jax.value_and_grad(lambda args: fn(*args))(list(arrays))
    else:
        import torch

        # On the device Keras puts its own tensors on (a GPU where there is one).
        device = keras.ops.convert_to_tensor(0.0).device
        tensors = [torch.tensor(array, requires_grad=True, device=device) for array in arrays]
        value = fn(*tensors)
        value.backward()
        gradients = [tensor.grad for tensor in tensors]
    return to_numpy(value), [to_numpy(gradient) for gradient in gradients]


def file_contents(folder: Path) -> dict[str, bytes]:
    """`{name: bytes}` of the files directly in `folder`: to show a command left it untouched."""
    return {path.name: path.read_bytes() for path in Path(folder).iterdir() if path.is_file()}


def train_run(path, spec: dict, **settings):
    """Trains a translation run on the corpus `spec` describes; returns (Translator, run)."""
    from mintransformer.data.corpora import load_corpus
    from mintransformer.inference.translator import Translator
    from mintransformer.runs.directory import RunDirectory, TranslationConfig
    from mintransformer.training import translation

    run = RunDirectory.create(path, TranslationConfig(data=spec, **settings))
    model, tokenizer = train_in(translation, run, load_corpus(spec))
    return Translator.from_model(model, tokenizer), run


def once_per_session(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `name` that `build(folder)` fills, built once however many workers run.

    Under pytest-xdist each worker process has its own session fixtures; this folder sits
    beside the workers' temporary folders, the first worker to get here builds it under a
    file lock and the others wait for it, then share it. Tests must only read it.
    """
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, built = root / name, root / f"{name}.built"
    with FileLock(root / f"{name}.lock"):
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed part-way
            build(folder)
            built.touch()
    return folder


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A small translation run on the numbers corpus, trained once per test session."""
    from mintransformer.data.corpora import numbers_spec
    from mintransformer.runs.directory import RunDirectory

    build = functools.partial(
        train_run,
        spec=numbers_spec(num_train=4000, num_val=100, num_test=100),
        num_layers=1,
        d_model=64,
        num_heads=2,
        dff=128,
        dropout_rate=0.0,
        vocab_size=300,
        epochs=3,
        max_tokens=2000,
        warmup_steps=50,
        peak_learning_rate=3e-3,
        max_length=24,
        average_last=1,
    )
    return RunDirectory(once_per_session(tmp_path_factory, "numbers-run", build))


@pytest.fixture(scope="session")
def untrained_classifier_run(tmp_path_factory):
    """A two-class classifier with its initial weights, saved as a run."""
    from mintransformer.config import ClassificationConfig
    from mintransformer.data.tokenizer import Tokenizer
    from mintransformer.runs import checkpoints
    from mintransformer.runs.directory import RunDirectory
    from mintransformer.runs.loading import build_model

    config = ClassificationConfig(
        labels=["neg", "pos"], num_layers=1, d_model=16, num_heads=2, dff=32, max_length=16
    )
    run = RunDirectory.create(tmp_path_factory.mktemp("runs") / "classifier", config)
    tokenizer = Tokenizer.train(["a good film", "a bad film", "not good at all"] * 5, 60)
    tokenizer.save(run.tokenizer_path)
    checkpoints.save_variables(run.weights_path, build_model(config, tokenizer.vocab_size).weights)
    return run


def randomize_weights(model, seed: int = 0, block_scale: float = 1.0, embedding_scale: float = 0.3):
    """Draws every weight matrix of `model` from N(0, scale) and returns the model.

    Larger weights than the initializer's make a random model's next-token choice
    decisive; blocks stronger than the embeddings keep greedy decoding from copying
    its last token.
    """
    rng = np.random.default_rng(seed)
    for variable in model.trainable_variables:
        if len(variable.shape) == 2:
            scale = embedding_scale if "embedding" in variable.path else block_scale
            variable.assign(rng.normal(0, scale, size=variable.shape).astype("float32"))
    return model


def padded_sources() -> np.ndarray:
    """Five random source rows of ids 3..39, two of them padded (int32 `(5, 9)`)."""
    sources = np.random.default_rng(1).integers(3, 40, size=(5, 9)).astype("int32")
    sources[1, 5:] = 0
    sources[3, 2:] = 0
    return sources


def varied_model(seed: int = 0):
    """A random pre-LN `Transformer` (vocab 40, 32 positions) whose greedy sentences vary
    rather than repeat one token."""
    from mintransformer import Transformer

    model = Transformer(2, 32, 4, 64, 40, 40, 32, 32, dropout_rate=0.0, norm_first=True)
    model((np.ones((1, 4), "int32"), np.ones((1, 4), "int32")))
    return randomize_weights(model, seed)


def random_transformer(seed: int = 0):
    """A random post-LN `Transformer` (vocab 40, 32 positions), blocks drawn at scale 0.3."""
    from mintransformer import Transformer

    model = Transformer(2, 32, 4, 64, 40, 40, 32, 32, dropout_rate=0.0)
    model((np.ones((1, 4), "int32"), np.ones((1, 4), "int32")))
    return randomize_weights(model, seed, block_scale=0.3)


def random_language_model(seed: int = 1):
    """A random `LanguageModel` (vocab 40, 32 positions, pad id 0)."""
    from mintransformer import LanguageModel

    model = LanguageModel(2, 32, 4, 64, 40, 32, dropout_rate=0.0)
    model(np.ones((1, 4), "int32"))
    return randomize_weights(model, seed)


def record_calls(monkeypatch, module, *names: str) -> list[str]:
    """Wraps the functions `names` of `module` so each call appends its name to the
    returned list (for checking which search loop ran)."""
    calls: list[str] = []

    def recording(name, function):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)

        return wrapper

    for name in names:
        monkeypatch.setattr(module, name, recording(name, getattr(module, name)))
    return calls


class StepByStep:
    """Only the start/step/reorder calls of `steps` (no `compiled_loops`), so a search
    drives them with its Python loop."""

    def __init__(self, steps):
        self.start, self.step, self.reorder = steps.start, steps.step, steps.reorder


class InterruptedRunError(Exception):
    """Raised by `interrupt_after_epoch` to stop a training run as a crash would."""


@contextlib.contextmanager
def interrupt_after_epoch(last_epoch: int):
    """Within the block, training raises `InterruptedRunError` right after it has
    checkpointed epoch `last_epoch` (0-based), as if the process died there."""
    from mintransformer.training import callbacks

    original = callbacks.EpochCheckpoint.on_epoch_end

    def checkpoint_then_stop(self, epoch, logs=None):
        original(self, epoch, logs)
        if epoch == last_epoch:
            raise InterruptedRunError

    callbacks.EpochCheckpoint.on_epoch_end = checkpoint_then_stop
    try:
        with pytest.raises(InterruptedRunError):
            yield
    finally:
        callbacks.EpochCheckpoint.on_epoch_end = original


def train_in(module, run, data, resume: bool = False):
    """Trains the run directory `run` (made by `RunDirectory.create`) on `data` with the
    task of the training module `module`; resumes it with `resume`.

    Returns:
        the model with its final weights, and the tokenizer.
    """
    from mintransformer.training import loop

    config = None if resume else run.config()
    trained = loop.train(
        module.TASK, run.path, config, data=data, resume=resume, overwrite=not resume, verbose=0
    )
    return trained.model, trained.tokenizer
