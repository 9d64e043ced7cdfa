"""Compiled programs kept on disk between processes (JAX's persistent compilation cache)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mintransformer.backend import compile_cache
from mintransformer.backend.compile_cache import (
    cache_folder,
    cache_summary,
    keep_compiled_programs,
    machine_fingerprint,
)

SRC = Path(__file__).resolve().parents[2] / "src"
JAX_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")


@pytest.fixture
def clean_environment(monkeypatch):
    for name in JAX_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_folder_is_named_after_jax_and_this_machine(clean_environment, tmp_path):
    fingerprint = machine_fingerprint()
    assert len(fingerprint) == 12 and int(fingerprint, 16) >= 0
    assert fingerprint == machine_fingerprint()
    folder = keep_compiled_programs(tmp_path / "compiled")
    assert folder == cache_folder(tmp_path / "compiled") and folder.is_dir()
    assert folder.name.startswith("jax-") and folder.name.endswith(fingerprint)
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(folder)
    assert os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"


def test_another_machine_gets_another_folder(clean_environment, tmp_path):
    here = cache_folder(tmp_path)
    clean_environment.setattr(compile_cache.platform, "machine", lambda: "another-arch")
    assert cache_folder(tmp_path) != here


def test_off_keeps_nothing_and_a_folder_the_environment_names_is_kept(clean_environment, tmp_path):
    assert keep_compiled_programs("off") is None
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ
    chosen = tmp_path / "mine"
    clean_environment.setenv("JAX_COMPILATION_CACHE_DIR", str(chosen))
    assert keep_compiled_programs() == chosen and chosen.is_dir()
    # A folder given is used over the environment's.
    assert keep_compiled_programs(tmp_path / "given") == cache_folder(tmp_path / "given")


def test_a_root_that_is_a_file_is_refused(clean_environment, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        keep_compiled_programs(a_file)
    with pytest.raises(ValueError, match="cannot create it"):
        keep_compiled_programs(a_file / "below")
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ


def test_cache_summary_counts_programs_and_megabytes(tmp_path):
    (tmp_path / "a").write_bytes(b"0" * 2**20)
    (tmp_path / "b").write_bytes(b"0" * 2**20)
    assert cache_summary(tmp_path) == f"{tmp_path} (2 programs, 2 MB)"


COMPILE_ONCE = """
import sys
from mintransformer.backend.compile_cache import keep_compiled_programs
keep_compiled_programs(sys.argv[1])
import jax, jax.numpy as jnp
step = jax.jit(lambda x, w: (x @ w).sum())
print(float(step(jnp.ones((4, 8)), jnp.ones((8, 8)))))
"""


def test_a_second_process_loads_what_the_first_compiled(clean_environment, tmp_path):
    pytest.importorskip("jax", reason="the compile cache is JAX's")
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def run() -> set[str]:
        done = subprocess.run(
            [sys.executable, "-c", COMPILE_ONCE, str(tmp_path)],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "256.0"
        return {path.name for path in cache_folder(tmp_path).iterdir()}

    first = run()
    assert first, "the first process kept no program"
    assert run() == first  # the second found each program and compiled none anew
