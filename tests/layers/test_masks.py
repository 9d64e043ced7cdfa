import numpy as np
import pytest
from keras import ops

from mintransformer.layers import masks
from tests.conftest import to_numpy

pytestmark = pytest.mark.core


def test_padding_mask_marks_real_tokens_with_true():
    ids = np.array([[5, 7, 0, 0], [3, 0, 0, 0]])
    mask = to_numpy(masks.padding_mask(ids))
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == bool
    np.testing.assert_array_equal(mask[:, 0, 0], ids != 0)


def test_padding_mask_honours_a_custom_pad_id():
    ids = np.array([[5, 7, 9, 9]])
    np.testing.assert_array_equal(
        to_numpy(masks.padding_mask(ids, pad_id=9))[0, 0, 0], [1, 1, 0, 0]
    )


def test_look_ahead_mask_lets_position_t_see_only_keys_up_to_t():
    mask = to_numpy(masks.look_ahead_mask(5))
    assert mask.shape == (1, 1, 5, 5)
    np.testing.assert_array_equal(mask[0, 0], np.tril(np.ones((5, 5), dtype=bool)))


def test_combined_mask_is_look_ahead_and_target_padding():
    ids = np.array([[4, 6, 8, 0]])
    mask = to_numpy(masks.combined_mask(ids))
    expected = np.tril(np.ones((4, 4), dtype=bool)) & (ids != 0)[:, None, :]
    np.testing.assert_array_equal(mask[:, 0], expected)


def test_from_blocked_mask_converts_the_one_means_blocked_convention():
    blocked = np.array([[0.0, 0.0, 1.0]], dtype="float32")  # 1 = blocked
    np.testing.assert_array_equal(to_numpy(masks.from_blocked_mask(blocked)), [[True, True, False]])


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_non_boolean_masks_are_rejected_with_the_fix_in_the_message(dtype):
    with pytest.raises(ValueError, match="from_blocked_mask") as err:
        masks.check_attention_mask(ops.ones((1, 1, 2, 2), dtype=dtype))
    assert "True means 'may attend'" in str(err.value)


def test_rank_3_masks_gain_a_head_axis_and_other_ranks_are_rejected():
    assert tuple(masks.check_attention_mask(ops.ones((2, 3, 4), dtype="bool")).shape) == (
        2,
        1,
        3,
        4,
    )
    with pytest.raises(ValueError, match="rank 3"):
        masks.check_attention_mask(ops.ones((3, 4), dtype="bool"))


def test_check_padding_mask_names_the_argument_on_a_wrong_shape_or_dtype():
    ids = np.ones((2, 3), "int32")
    mask = np.ones((2, 3), bool)
    assert masks.check_padding_mask(mask, ids, "my_mask") is mask
    for wrong in (np.ones((2, 4), bool), np.ones((2, 3, 1), bool), np.ones((2, 3), "int32")):
        with pytest.raises(ValueError, match="my_mask"):
            masks.check_padding_mask(wrong, ids, "my_mask")
