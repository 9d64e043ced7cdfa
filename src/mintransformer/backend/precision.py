"""Choosing fp32 or bf16 mixed precision for the hardware at hand."""

from __future__ import annotations

from pathlib import Path

import keras


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


def choose_precision(requested: bool | None, flags: set[str] | None = None) -> tuple[bool, str]:
    """Whether to train in bf16 mixed precision, and why (a line for the log).

    bf16 pays only where the hardware multiplies bf16 matrices natively: a GPU, or a
    CPU with AMX tiles (`amx_bf16`). AVX-512-BF16 alone is not enough: on such a
    CPU a 2048^3 bf16 matmul ran at half the fp32 speed.

    Args:
        requested: True (bf16) or False (fp32) forces the choice; None decides.
        flags: CPU flags to judge by (default: this machine's).
    """
    if requested is not None:
        return bool(requested), f"precision: {'bf16' if requested else 'fp32'} (as requested)"
    if has_accelerator():
        return True, "precision: bf16 (an accelerator is present)"
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags:
        return True, "precision: bf16 (the CPU has AMX: amx_bf16)"
    detail = "AVX-512-BF16 but no AMX" if "avx512_bf16" in flags else "no AMX"
    return False, f"precision: fp32 (the CPU has {detail}, no GPU: bf16 would be slower)"
