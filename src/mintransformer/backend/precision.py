"""Choosing fp32 or bf16 mixed precision for the hardware at hand, by measuring it.

The CPU flags do not decide it. Two CPUs that both list `avx512_bf16` can
multiply bf16 matrices faster than fp32 or slower, so where bf16
is possible at all, a short matrix product is timed in both precisions on the
active backend and bf16 is chosen where it is at least `BF16_MIN_SPEEDUP` times
faster. The answer is cached per machine (CPU model, flags and core count) and
backend version, in `cache_dir()`, so each machine measures once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import keras

from mintransformer.core.files import atomic_write

BF16_MIN_SPEEDUP = 1.3
PRODUCT_SIZE = 1024  # a (1024, 1024) @ (1024, 1024) product: 2 GFLOP
CACHE_MAX_AGE_DAYS = 30
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX-512 / AMX, Arm


@dataclass(frozen=True)
class Measurement:
    """Matrix-product speeds of this machine in fp32 and bf16, in GFLOP/s."""

    fp32_gflops: float
    bf16_gflops: float

    @property
    def speedup(self) -> float:
        """bf16 speed over fp32 speed (> 1: bf16 is faster)."""
        return self.bf16_gflops / self.fp32_gflops


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags the kernel reports (empty where it reports none)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.partition(":")[2].split())
    return set()


def cpu_description(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model, family, model number and stepping as the kernel reports them."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return "unknown CPU"
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or fields.get("CPU part") or "unknown CPU"
    details = [
        f"{key} {fields[key]}" for key in ("cpu family", "model", "stepping") if key in fields
    ]
    return f"{name} ({', '.join(details)})" if details else name


def has_accelerator() -> bool:
    """Whether the backend sees a GPU (or TPU)."""
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    if name == "jax":
        import jax

        return any(device.platform != "cpu" for device in jax.devices())
    if name == "torch":
        import torch

        return torch.cuda.is_available()
    return False


def backend_version(backend: str | None = None) -> str:
    """A Keras backend (default: the active one) and its version, with Keras'."""
    backend = backend or keras.backend.backend()
    distributions = {"tensorflow": ("tensorflow", "tensorflow-cpu"), "jax": ("jaxlib",)}
    installed = "?"
    for distribution in distributions.get(backend, (backend,)):
        with contextlib.suppress(metadata.PackageNotFoundError):
            installed = metadata.version(distribution)
            break
    return f"{backend} {installed}, keras {keras.__version__}"


def machine_key(flags: set[str] | None = None, backend: str | None = None) -> str:
    """What a cached measurement is valid for: CPU, its flags and cores, the backend."""
    flags = cpu_flags() if flags is None else flags
    flag_hash = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return (
        f"{cpu_description()}; flags {flag_hash}; {os.cpu_count()} cores; "
        f"{backend_version(backend)}"
    )


def cache_dir() -> Path:
    """Where per-machine measurements are kept: `$MINTRANSFORMER_CACHE`, else
    `$XDG_CACHE_HOME/mintransformer`, else `~/.cache/mintransformer`."""
    if os.environ.get("MINTRANSFORMER_CACHE"):
        return Path(os.environ["MINTRANSFORMER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mintransformer"


def measure_products(
    size: int = PRODUCT_SIZE,
    repeats: int = 7,
    warmup: int = 8,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Times a `(size, size) @ (size, size)` product in fp32 and in bf16 on the backend.

    `warmup` untimed products of each precision come first: a fresh process's
    first fp32 products run slower than its later ones, which would overstate
    bf16's speed-up in the measurement a process makes first. Then the two
    precisions are timed in turns, and each speed is the fastest of `repeats`:
    other work on the machine (another process, a data-loading thread) only ever
    slows a product down, so the fastest is the one least disturbed, where a median
    still moves with a burst of load that happens to fall on one precision's
    products. `clock` reads the time in seconds.
    """
    import numpy as np
    from keras import ops

    values = np.random.default_rng(0).standard_normal((2, size, size)).astype("float32")
    operands = {
        "float32": [ops.convert_to_tensor(v) for v in values],
        "bfloat16": [ops.cast(ops.convert_to_tensor(v), "bfloat16") for v in values],
    }

    def multiply(a, b) -> None:
        product = ops.matmul(a, b)
        ops.convert_to_numpy(ops.cast(product[0, 0], "float32"))  # waits for the product

    for _ in range(warmup):
        for a, b in operands.values():
            multiply(a, b)
    seconds: dict[str, list[float]] = {dtype: [] for dtype in operands}
    for _ in range(repeats):
        for dtype, (a, b) in operands.items():
            start = clock()
            multiply(a, b)
            seconds[dtype].append(clock() - start)
    flops = 2.0 * size**3
    fp32, bf16 = (flops / min(seconds[d]) / 1e9 for d in operands)
    return Measurement(fp32_gflops=fp32, bf16_gflops=bf16)


def cached_measurement(
    key: str, measure: Callable[[], Measurement], cache_file: Path
) -> tuple[Measurement, str]:
    """`measure()`, or the measurement cached for `key` in `cache_file` if it is recent.

    Returns the measurement and "measured" or "measured <date>, cached". A cache
    that cannot be read is measured over; one that cannot be written is skipped.
    """
    try:
        entries = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        entries = {}
    if not isinstance(entries, dict):
        entries = {}
    try:
        entry = entries[key]
        measured_at = datetime.fromisoformat(entry["measured_at"])
        if (datetime.now(UTC) - measured_at).days <= CACHE_MAX_AGE_DAYS:
            cached = Measurement(float(entry["fp32_gflops"]), float(entry["bf16_gflops"]))
            return cached, f"measured {measured_at:%Y-%m-%d}, cached"
    except (ValueError, KeyError, TypeError):
        pass  # not measured here yet, or an entry that cannot be read: measure it
    measurement = measure()
    entries[key] = {**asdict(measurement), "measured_at": datetime.now(UTC).isoformat()}
    text = json.dumps(entries, indent=1, sort_keys=True)
    with contextlib.suppress(OSError):  # a read-only home: measure again next time
        atomic_write(cache_file, lambda f: f.write(text.encode()))
    return measurement, "measured"


def choose_precision(
    requested: bool | None,
    flags: set[str] | None = None,
    measure: Callable[[], Measurement] = measure_products,
    cache_file: Path | None = None,
) -> tuple[bool, str]:
    """Whether to run in bf16 mixed precision, and why (a line for the log).

    A GPU multiplies bf16 natively: bf16. A CPU without bf16 instructions
    (`BF16_CPU_FLAGS`) would emulate it: fp32. Otherwise bf16 where a measured
    bf16 product is at least `BF16_MIN_SPEEDUP` times as fast as fp32.

    Args:
        requested: True (bf16) or False (fp32) forces the choice; None decides.
        flags: CPU flags to judge by (default: this machine's).
        measure: times the products (`measure_products`; tests pass a fake).
        cache_file: where measurements are cached (default: `cache_dir()/precision.json`).
    """
    if requested is not None:
        return bool(requested), f"precision: {'bf16' if requested else 'fp32'} (as requested)"
    if has_accelerator():
        return True, "precision: bf16 (an accelerator is present)"
    flags = cpu_flags() if flags is None else flags
    if not flags & set(BF16_CPU_FLAGS):
        return False, "precision: fp32 (the CPU has no bf16 instructions, no GPU)"
    cache_file = cache_dir() / "precision.json" if cache_file is None else cache_file
    measurement, how = cached_measurement(machine_key(flags), measure, cache_file)
    speedup = measurement.speedup
    figures = (
        f"bf16 products {speedup:.2f}x fp32 on this CPU ({measurement.bf16_gflops:.0f} "
        f"against {measurement.fp32_gflops:.0f} GFLOP/s), {how}"
    )
    if speedup >= BF16_MIN_SPEEDUP:
        return True, f"precision: bf16 ({figures})"
    return False, f"precision: fp32 ({figures}; bf16 needs {BF16_MIN_SPEEDUP}x)"
