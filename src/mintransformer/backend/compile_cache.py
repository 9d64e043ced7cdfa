"""Compiled programs kept on disk, so that a process started again skips XLA's compile.

A server compiles its decoding loops once per bucket shape; without a cache every start
compiles them all again, a few seconds each. JAX writes each program XLA compiles to a
folder (`JAX_COMPILATION_CACHE_DIR`, read when JAX starts) under a key computed from
the program itself, and a later process that compiles the same program loads it.

TensorFlow has such a cache too (`TF_XLA_FLAGS=--tf_xla_persistent_cache_directory`),
but its key includes the traced function's name, which counts every function traced
before it in the process: a request that arrives in the middle of a warm-up changes
the key of every program compiled after it, so a restart misses them and the folder
grows by a copy. It is not used; `serve` runs the Keras engine on JAX where JAX is
installed.

A program compiled for one CPU may use instructions another lacks, so the folder is
named after this machine's instruction set (and JAX's version): a cache shared between
machines, by a home folder on a network disk or a container image, keeps each
machine's programs apart.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
from pathlib import Path

OFF = "off"


def default_cache_root() -> Path:
    """`$XDG_CACHE_HOME/mintransformer/compiled` (`~/.cache/...` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mintransformer" / "compiled"


def machine_fingerprint() -> str:
    """12 hex digits naming this CPU's architecture and instruction-set extensions."""
    flags = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith(("flags", "Features")):  # x86, ARM
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    described = f"{platform.machine()} {platform.processor()} {flags}"
    return hashlib.sha256(described.encode()).hexdigest()[:12]


def cache_folder(root: str | Path) -> Path:
    """`root`/jax-VERSION-MACHINE: where this machine's JAX keeps its programs."""
    try:
        version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return Path(root) / f"jax-{version}-{machine_fingerprint()}"


def keep_compiled_programs(root: str | Path | None = None) -> Path | None:
    """Has JAX, when this process imports it, keep what XLA compiles under `root`
    (default `default_cache_root()`; "off": nothing kept) and load it from there.

    Call it before JAX is imported. Without `root`, a folder `JAX_COMPILATION_CACHE_DIR`
    already names is kept.

    Returns:
        the folder JAX will use (None when off).

    Raises:
        ValueError: if `root` exists and is not a folder, or cannot be created.
    """
    if str(root) == OFF:
        return None
    named = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if root is None and named:
        folder = Path(named)
    else:
        root = Path(root) if root is not None else default_cache_root()
        if root.exists() and not root.is_dir():
            raise ValueError(f"--compile-cache {root}: not a folder")
        folder = cache_folder(root)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--compile-cache {folder}: cannot create it ({err.strerror})") from None
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(folder)
    # JAX keeps only programs that took a second or more to compile by default; a
    # server's many small ones add up to most of its warm-up.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    return folder


def cache_summary(folder: str | Path) -> str:
    """`FOLDER (N programs, M MB)`, for a log line."""
    files = [path for path in Path(folder).glob("*") if path.is_file()]
    megabytes = sum(path.stat().st_size for path in files) / 2**20
    return f"{folder} ({len(files)} programs, {megabytes:.0f} MB)"
