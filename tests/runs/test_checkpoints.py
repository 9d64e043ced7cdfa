import keras
import numpy as np
import pytest

from mintransformer.runs import checkpoints
from tests.conftest import to_numpy


def make_variables(shapes, value=0.0):
    return [keras.Variable(np.full(s, value, "float32")) for s in shapes]


def test_round_trip(tmp_path):
    saved = make_variables([(2, 3), (4,)], 1.5)
    checkpoints.save_variables(tmp_path / "c.npz", saved)
    loaded = make_variables([(2, 3), (4,)])
    checkpoints.load_variables(tmp_path / "c.npz", loaded)
    for a, b in zip(saved, loaded, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_shape_mismatch_names_the_tensor_and_both_shapes(tmp_path):
    checkpoints.save_variables(tmp_path / "c.npz", make_variables([(2, 3), (4,)]))
    wrong = make_variables([(2, 3), (5,)])
    with pytest.raises(ValueError, match=r"shape \(4,\).*shape \(5,\)"):
        checkpoints.load_variables(tmp_path / "c.npz", wrong)
    with pytest.raises(ValueError, match="holds 2 tensors but the model has 1"):
        checkpoints.load_variables(tmp_path / "c.npz", make_variables([(2, 3)]))


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "c.npz"
    checkpoints.save_variables(target, make_variables([(2,)], 3.0))
    before = target.read_bytes()

    def crash(f):
        f.write(b"partial")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        checkpoints.atomic_write(target, crash)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]


def test_corrupt_and_missing_files_are_clear_errors(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="bad.npz"):
        checkpoints.read_arrays(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        checkpoints.read_arrays(tmp_path / "missing.npz")


def test_average(tmp_path):
    for i, value in enumerate((1.0, 2.0, 6.0)):
        checkpoints.save_variables(tmp_path / f"{i}.npz", make_variables([(2,)], value))
    average = checkpoints.average_checkpoints([tmp_path / f"{i}.npz" for i in range(3)])
    np.testing.assert_allclose(average[0], [3.0, 3.0])
