"""Bad arguments to the wider op surface raise clear TolkErrors (or numpy's IndexError) naming the problem."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.errors import DTypeError, ShapeError
from tolk_core.frontend.tensor import Tensor


def f32(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.float32))


def i32(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.int32))


def test_cat_names_the_mismatched_shapes() -> None:
    with pytest.raises(ShapeError, match=r"axis 0: shapes \(2, 3\), \(2, 4\) differ off that axis"):
        f32(2, 3).cat(f32(2, 4))
    with pytest.raises(ShapeError, match=r"one rank.*\(2, 3\), \(3,\)"):
        Tensor.cat(f32(2, 3), f32(3))
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        f32(2, 3).cat(f32(2, 3), dim=2)


def test_stack_names_the_shapes() -> None:
    with pytest.raises(ShapeError, match=r"one shape, got \(2, 3\), \(3, 2\)"):
        f32(2, 3).stack(f32(3, 2))


def test_conv2d_channel_mismatch_names_shapes() -> None:
    with pytest.raises(ShapeError, match=r"input \(1, 3, 8, 8\) with weight \(4, 2, 3, 3\)"):
        f32(1, 3, 8, 8).conv2d(f32(4, 2, 3, 3))
    with pytest.raises(ShapeError, match="4-d"):
        f32(3, 8, 8).conv2d(f32(4, 3, 3, 3))
    with pytest.raises(ShapeError, match="larger than the padded input"):
        f32(1, 1, 2, 2).conv2d(f32(1, 1, 3, 3))
    with pytest.raises(ShapeError, match="padding"):
        f32(1, 1, 4, 4).conv2d(f32(1, 1, 3, 3), padding=(1, 2, 3))


def test_bitwise_on_floats_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="and needs bool or integer tensors, got float32"):
        f32(3) & 1
    with pytest.raises(DTypeError, match="shl needs integer tensors, got bool"):
        (f32(3) > 0) << (f32(3) > 1)
    with pytest.raises(DTypeError, match="bitwise not"):
        ~f32(2)


def test_bitcast_size_mismatch() -> None:
    with pytest.raises(DTypeError, match=r"float32 to int64 of shape \(3,\): the last axis holds 12 bytes, not a "
                                         r"whole number of 8-byte elements"):
        f32(3).bitcast("int64")


def test_int_to_negative_power() -> None:
    with pytest.raises(DTypeError, match="negative integer power -2"):
        i32(3) ** -2


def test_index_errors() -> None:
    with pytest.raises(DTypeError, match="must hold integers, got float32"):
        f32(4)[f32(2)]
    with pytest.raises(DTypeError, match="boolean masks are not supported"):
        f32(4)[Tensor(np.array([True, False]))]
    with pytest.raises(IndexError, match="single ellipsis"):
        f32(2, 3)[..., ...]
    with pytest.raises(ShapeError, match=r"too many indices \(3\)"):
        f32(2, 3)[0, None, 0, 0]
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 3"):
        f32(2, 3)[0, 3]
    # integer indices given as host data are checked as numpy does (a Tensor's values are not known yet)
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        f32(2, 3)[[0, 2]]
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 1 with size 3"):
        f32(2, 3)[:, np.array([[1], [-4]])]
    with pytest.raises(DTypeError, match="must hold integers, got float64"):
        f32(4)[[0.5]]
    assert f32(2, 3)[[]].shape == (0, 3) and f32(2, 3)[[-2, 1]].shape == (2, 3)
    with pytest.raises(ShapeError, match=r"index tensors of shapes \(2,\), \(3,\)"):
        f32(4, 4)[i32(2), i32(3)]


def test_reduction_and_shape_errors() -> None:
    with pytest.raises(ShapeError, match=r"empty axis 0 of shape \(0, 3\)"):
        f32(0, 3).argmax(0)
    with pytest.raises(ShapeError, match="unsqueeze axis 3"):
        f32(2, 3).unsqueeze(3)
    with pytest.raises(ShapeError, match="start_dim 1 comes after end_dim 0"):
        f32(2, 3).flatten(1, 0)
    with pytest.raises(ShapeError, match="eye needs non-negative"):
        Tensor.eye(-1)
    with pytest.raises(ValueError, match="clip needs min_ or max_"):
        f32(2).clip()
