"""The CPU cores this process may run on, for sizing thread pools."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """How many cores this process may run on (its CPU affinity, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
