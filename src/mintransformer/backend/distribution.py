"""Data-parallel training with `keras.distribution` (JAX backend): where to train.

Every device holds the whole model and takes a slice of the rows of every batch;
JAX averages the gradients across devices (and across processes, over the
network). Nothing here computes gradients: Keras and JAX do.

    DataParallel(devices=2)                        # one host, two devices
    DataParallel(coordinator="10.0.0.1:1234",      # two hosts, run once on each
                 num_processes=2, process_id=0)    # (process_id=1 on the other)

`request_host_devices` must run before JAX starts (it sets an XLA flag), so this
module imports Keras only inside the functions that need it. `start` sets the
distribution before the model is built, so its variables are replicated;
`current_shards` tells the batches (`training.data_parallel`) how to split their rows.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from mintransformer.core import checks

_HOST_PORT = re.compile(r"^[^:\s]+:\d{1,5}$")


@dataclass(frozen=True)
class DataParallel:
    """Where to train: devices per process and, for several processes, how they meet.

    Args:
        devices: devices per process; None: every device JAX sees.
        coordinator: "HOST:PORT" of process 0 (required with several processes).
        num_processes: processes in the job, one per host usually.
        process_id: this process's index, 0 .. num_processes - 1.
    """

    devices: int | None = None
    coordinator: str | None = None
    num_processes: int = 1
    process_id: int = 0

    def __post_init__(self):
        if self.devices is not None:
            checks.positive_int(self.devices, "devices")
        checks.positive_int(self.num_processes, "num_processes")
        if not 0 <= self.process_id < self.num_processes:
            raise ValueError(
                f"`process_id` must be in [0, {self.num_processes}), got {self.process_id}."
            )
        if self.num_processes > 1 and not _HOST_PORT.match(self.coordinator or ""):
            raise ValueError(
                f"{self.num_processes} processes need a coordinator address HOST:PORT (the "
                f"address of process 0), got {self.coordinator!r}."
            )


def data_parallel_from_flags(
    distribute: str | None,
    devices: int | None = None,
    coordinator: str | None = None,
    num_processes: int = 1,
    process_id: int = 0,
) -> DataParallel | None:
    """The `DataParallel` of the command line's flags; None without `--distribute data`.

    Raises:
        ValueError: for device or process flags given without `--distribute data`.
    """
    if distribute:
        return DataParallel(devices, coordinator, num_processes, process_id)
    given = [f for f, v in (("devices", devices), ("coordinator", coordinator)) if v]
    given += ["num_processes"] if num_processes != 1 else []
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"{flags}: these flags apply only with --distribute data")
    return None


def request_host_devices(devices: int | None) -> None:
    """Asks XLA for `devices` CPU devices; XLA reads the flag once, when JAX starts."""
    if devices and "jax" not in sys.modules:
        flag = f"--xla_force_host_platform_device_count={devices}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()


def start(options: DataParallel) -> None:
    """Sets `keras.distribution` to data parallelism over the devices of `options`.

    Raises:
        ValueError: on a backend other than JAX, or with fewer devices than asked for.
    """
    start_data_parallel(
        options.devices, options.coordinator, options.num_processes, options.process_id
    )


@dataclass(frozen=True)
class Shards:
    """How the rows of a batch are spread: over `devices` in all, `processes` of them."""

    devices: int
    processes: int
    process_index: int


def current_shards() -> Shards | None:
    """The `Shards` of the data-parallel distribution in force, if one is."""
    layout = data_parallel_layout()
    return None if layout is None else Shards(*layout)


def start_data_parallel(
    devices: int | None, coordinator: str | None, num_processes: int, process_id: int
) -> None:
    """Replicates models built from now on over the devices, with `keras.distribution`.

    JAX only: Keras 3's distribution runs on JAX's collectives (on TensorFlow it
    trains on one device without a word; on PyTorch it fails). With several
    processes, `keras.distribution.initialize` joins them first.

    Args:
        devices: devices per process; None: all that JAX sees.
        coordinator: "HOST:PORT" of process 0, with several processes.
        num_processes: processes in the job.
        process_id: this process's index.

    Raises:
        ValueError: on another backend, or if JAX sees fewer devices than asked for.
    """
    import keras

    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            f"data-parallel training runs on the JAX backend (keras.distribution); this "
            f"process runs {backend}: set KERAS_BACKEND=jax or pass --backend jax."
        )
    import jax

    if num_processes > 1:
        keras.distribution.initialize(coordinator, num_processes, process_id)
    local = jax.local_devices()
    if devices is not None and devices > len(local):
        raise ValueError(
            f"--devices {devices}, but JAX sees {len(local)} here ({local[0].platform}). "
            f"On a CPU host, start Python with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} "
            "(the command line sets it for --devices)."
        )
    # The first `per_process` devices of every process, process by process: each
    # process feeds the rows of its own devices (`ShardedBatches`).
    per_process = devices or len(local)
    mesh_devices = [
        device
        for index in range(jax.process_count())
        for device in [d for d in jax.devices() if d.process_index == index][:per_process]
    ]
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=mesh_devices, auto_shard_dataset=False)
    )


def data_parallel_layout() -> tuple[int, int, int] | None:
    """`(devices in the job, processes, this process's index)` of the data-parallel
    distribution in force (`start_data_parallel`); None without one."""
    import keras
    import numpy as np

    distribution = keras.distribution.distribution()
    if not isinstance(distribution, keras.distribution.DataParallel):
        return None
    import jax  # a DataParallel distribution runs only on JAX (`start_data_parallel`)

    devices = int(np.prod(distribution.device_mesh.shape))
    return devices, jax.process_count(), jax.process_index()
