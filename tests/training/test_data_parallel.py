"""Data-parallel training (keras.distribution on JAX) equals one-device training.

Each training runs in a subprocess (`data_parallel_worker`): the number of CPU
devices JAX sees is fixed by XLA_FLAGS when JAX starts, so the test process, whose
backend may be any, keeps its own.
"""

import functools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mintransformer.backend.distribution import DataParallel, Shards
from mintransformer.config import ClassificationConfig, TranslationConfig
from mintransformer.training.data_parallel import ShardedBatches
from tests.training.test_classification import synthetic_reviews, write_csv

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.training.data_parallel_worker"
# The workers train with their configs' default learning rates.
PEAK_LEARNING_RATE = max(c().peak_learning_rate for c in (ClassificationConfig, TranslationConfig))


def worker(run_dir, task, epochs, *parallel, devices=1, resume=False, pad_as=None):
    """Starts a worker process; `finish` waits for its JSON."""
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    argv = [sys.executable, "-m", WORKER, str(run_dir), task, str(epochs), *map(str, parallel)]
    argv += ["--resume"] if resume else []
    argv += ["--pad-as", str(pad_as)] if pad_as else []
    # Files, not pipes: a process blocked on a full pipe would stall its partner's
    # collectives while the test waits on the partner.
    Path(run_dir).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{run_dir}.out", "w") as out, open(f"{run_dir}.err", "w") as err:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err)
    process.run_dir = run_dir
    return process


def finish(process, timeout=300) -> dict:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    err = Path(f"{process.run_dir}.err").read_text()
    assert process.returncode == 0, err[-3000:]
    out = Path(f"{process.run_dir}.out").read_text()
    return json.loads(out.strip().splitlines()[-1])


def assert_same_steps(a: dict, b: dict):
    """The loss after every step equal within 1e-5, and the weights close.

    The weights are compared loosely: Adam divides each gradient by its running
    size, so for a weight whose gradient is almost zero it turns the last bits of
    a summation order (two devices add the halves of a batch) into steps of up to
    the learning rate. Most weights agree to 5e-3; such a weight can be up to two
    learning rates a step apart (each run stepping its own way).
    """
    steps = len(a["losses"])
    assert steps == len(b["losses"]) > 0
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=1e-5, atol=1e-5)
    bound = 2 * PEAK_LEARNING_RATE * steps
    for x, y in zip(a["weights"], b["weights"], strict=True):
        np.testing.assert_allclose(x, y, atol=bound)
        assert np.mean(np.abs(np.subtract(x, y)) <= 5e-3) >= 0.95


def reviews_data(run_dir: Path) -> None:
    data = Path(f"{run_dir}.data")
    data.mkdir(parents=True)
    write_csv(data / "train.csv", synthetic_reviews(150, seed=0))
    write_csv(data / "val.csv", synthetic_reviews(30, seed=1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def shared_compilation_cache(tmp_path_factory):
    """One JAX compilation cache on disk for every worker process of this module.

    The workers train the same few models on the same batch shapes; with the cache,
    a program that one process compiled is loaded by the next instead of compiled
    again. A size limit turns on the cache's file lock, for workers that run at once.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path_factory.mktemp("jax-cache")))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        patch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", str(2**30))
        yield


@pytest.fixture(scope="module")
def one_device_translation(tmp_path_factory):
    """Two epochs on one device, batches padded as for two (see the worker).

    Started, not awaited: the fixture is a call that waits for the worker's JSON (once),
    so the first test that uses it trains its own run meanwhile.
    """
    process = worker(tmp_path_factory.mktemp("one") / "run", "translation", 2, pad_as=2)
    yield functools.cache(functools.partial(finish, process))
    if process.poll() is None:
        process.kill()


@pytest.mark.slow
def test_two_devices_train_the_translation_model_as_one_does(tmp_path, one_device_translation):
    two = worker(tmp_path / "run", "translation", 2, 2, devices=2)
    assert_same_steps(one_device_translation(), finish(two))


@pytest.mark.slow
def test_two_devices_train_the_classifier_as_one_does(tmp_path):
    # Classification batches have any number of rows: padding rows carry weight 0.
    # The two runs are independent, so they train at once.
    reviews_data(tmp_path / "one")
    reviews_data(tmp_path / "two")
    one = worker(tmp_path / "one", "classification", 2, pad_as=2)
    two = worker(tmp_path / "two", "classification", 2, 2, devices=2)
    assert_same_steps(finish(one), finish(two))


@pytest.mark.slow
def test_two_processes_over_loopback_train_as_one_device(tmp_path, one_device_translation):
    address = f"127.0.0.1:{free_port()}"
    processes = [worker(tmp_path / f"run{i}", "translation", 2, 1, address, 2, i) for i in range(2)]
    for process in processes:
        assert_same_steps(one_device_translation(), finish(process))


@pytest.mark.slow
def test_checkpoints_move_between_one_device_and_two(tmp_path, one_device_translation):
    # Epoch 1 on two devices, epoch 2 resumed on one; and the other way round. The two
    # directions are independent runs, so each stage runs both at once.
    two_devices, one_device = dict(devices=2), dict(pad_as=2)
    directions = {"2to1": (two_devices, one_device), "1to2": (one_device, two_devices)}

    def start(name: str, options: dict, epochs: int, resume: bool = False):
        parallel = [2] if "devices" in options else []
        return worker(tmp_path / name, "translation", epochs, *parallel, resume=resume, **options)

    started = {name: start(name, first, 1) for name, (first, _) in directions.items()}
    started = {name: finish(process) for name, process in started.items()}
    for name in directions:
        config_path = tmp_path / name / "config.json"
        config = json.loads(config_path.read_text())
        config_path.write_text(json.dumps({**config, "epochs": 2}))
    resumed = {name: start(name, then, 2, resume=True) for name, (_, then) in directions.items()}
    resumed = {name: finish(process) for name, process in resumed.items()}
    reference = one_device_translation()
    epoch_1 = len(reference["losses"]) // 2
    for name in directions:
        assert len(started[name]["losses"]) == epoch_1
        joined = {
            "losses": started[name]["losses"] + resumed[name]["losses"],
            "weights": resumed[name]["weights"],
        }
        assert_same_steps(reference, joined)


class _Rows:
    """A dataset of one batch with `rows` rows: inputs `(source, target)`, targets."""

    epoch = 0

    def __init__(self, count: int):
        self.count = count

    def __len__(self):
        return 1

    def rows(self, index):
        return self.count

    def __getitem__(self, index):
        ids = np.arange(1, 1 + self.count * 3).reshape(self.count, 3)
        return (ids, ids + 100), ids + 200


@pytest.mark.core
@pytest.mark.parametrize("processes", [1, 2])
def test_sharded_batches_pad_rows_and_split_them_between_processes(processes):
    rows = []
    for index in range(processes):
        shards = Shards(devices=4, processes=processes, process_index=index)
        batch = ShardedBatches(_Rows(5), shards, pad_id=0, weight_rows=True)[0]
        (source, target), labels, weights = batch
        assert source.shape == target.shape == labels.shape == (8 // processes, 3)
        rows.append((source, weights))
    source = np.concatenate([s for s, _ in rows])
    weights = np.concatenate([w for _, w in rows])
    np.testing.assert_array_equal(source[:5], _Rows(5)[0][0][0])
    assert not source[5:].any()  # three padding rows of pad_id
    np.testing.assert_array_equal(weights, [1, 1, 1, 1, 1, 0, 0, 0])


class _Unbuilt(_Rows):
    def __getitem__(self, index):
        raise AssertionError("the padding summary must not build batches")


@pytest.mark.core
def test_the_padding_summary_counts_rows_without_building_batches():
    summary = ShardedBatches(_Unbuilt(5), Shards(4, 1, 0), pad_id=0).padding_summary()
    assert "4 devices in 1 process(es); 3 padding rows added to 5 (60.0%)" in summary


@pytest.mark.core
def test_bad_data_parallel_options_are_clear_errors():
    with pytest.raises(ValueError, match="coordinator address HOST:PORT"):
        DataParallel(2, None, num_processes=2, process_id=0)
    with pytest.raises(ValueError, match="process_id"):
        DataParallel(2, "127.0.0.1:1234", num_processes=2, process_id=2)
    with pytest.raises(ValueError, match="devices"):
        DataParallel(0)


@pytest.mark.core
def test_other_backends_are_told_to_use_jax():
    import keras

    from mintransformer.backend.distribution import start

    if keras.backend.backend() == "jax":
        pytest.skip("the JAX backend runs data parallelism")
    with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
        start(DataParallel(1))


@pytest.mark.slow
def test_the_command_line_trains_a_language_model_on_two_devices(tmp_path):
    from tests.training.test_language_model import TINY_FLAGS, write_grammar

    text = write_grammar(tmp_path / "grammar.txt")
    flags = [str(part) for flag in {**TINY_FLAGS, "--epochs": 1}.items() for part in flag]
    argv = ["train", "lm", "--run", tmp_path / "run", "--text", text, *flags]
    parallel = ["--backend", "jax", "--distribute", "data", "--devices", 2]
    result = subprocess.run(
        [sys.executable, "-m", "mintransformer", *map(str, argv + parallel)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "XLA_FLAGS": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "data parallel: 2 devices in 1 process(es)" in result.stdout
    assert (tmp_path / "run" / "model.npz").is_file()


def test_parallel_flags_without_distribute_are_refused(capsys, tmp_path):
    from mintransformer import cli

    argv = ["train", "lm", "--run", str(tmp_path / "run"), "--text", "x.txt", "--devices", "2"]
    assert cli.main(argv) == 2
    assert "--devices: these flags apply only with --distribute data" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
