"""Bad input gets a clear TolkError (or numpy's IndexError) naming the problem, by subject as the front end is
organised."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.errors import DeviceMismatchError, DTypeError, ShapeError, TolkError, UnsupportedError
from tolk_core.frontend.tensor import Tensor


def f32(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.float32))


def i32(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.int32))


# ---------------------------------------------------------------- construction
def test_eye_needs_non_negative_sizes() -> None:
    with pytest.raises(ShapeError, match="eye needs non-negative"):
        Tensor.eye(-1)


# ---------------------------------------------------------------- movement
def test_reshape_to_wrong_size() -> None:
    with pytest.raises(ShapeError, match=r"cannot reshape tensor of shape \(3, 4\).*\(5, 3\)"):
        Tensor(np.zeros((3, 4), np.float32)).reshape(5, 3)


def test_reshape_minus_one_that_does_not_divide() -> None:
    with pytest.raises(ShapeError, match="cannot reshape"):
        Tensor(np.zeros((3, 4), np.float32)).reshape(5, -1)


def test_unsqueeze_and_flatten_name_the_bad_axes() -> None:
    with pytest.raises(ShapeError, match="unsqueeze axis 3"):
        f32(2, 3).unsqueeze(3)
    with pytest.raises(ShapeError, match="start_dim 1 comes after end_dim 0"):
        f32(2, 3).flatten(1, 0)


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


# ---------------------------------------------------------------- elementwise
def test_incompatible_broadcast_names_both_shapes() -> None:
    with pytest.raises(ShapeError, match=r"\(3, 4\) and \(5,\)"):
        Tensor(np.zeros((3, 4), np.float32)) + Tensor(np.zeros(5, np.float32))


def test_device_mismatch_names_both_devices(device) -> None:
    other = "OPENCL" if device == "CPU" else "CPU"
    pytest.importorskip("pyopencl")
    try:
        b = Tensor(np.ones(3, np.float32), device=other)
    except TolkError as e:
        pytest.skip(f"{other} unavailable: {e}")
    with pytest.raises(DeviceMismatchError, match=f"{device}.*{other}"):
        Tensor(np.ones(3, np.float32), device=device) + b


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


def test_clip_needs_a_bound() -> None:
    with pytest.raises(ValueError, match="clip needs min_ or max_"):
        f32(2).clip()


# ---------------------------------------------------------------- reductions (and every op taking an axis)
@pytest.mark.parametrize("op", [lambda t: t.sum(axis=2), lambda t: t.max(axis=-3), lambda t: t.transpose(0, 5),
                                lambda t: t.softmax(axis=7)])
def test_axis_out_of_range(op) -> None:
    with pytest.raises(ShapeError, match="axis .* out of range .* 2 dimension"):
        op(Tensor(np.zeros((3, 4), np.float32)))


def test_argmax_over_an_empty_axis() -> None:
    with pytest.raises(ShapeError, match=r"empty axis 0 of shape \(0, 3\)"):
        f32(0, 3).argmax(0)


# ---------------------------------------------------------------- indexing
def test_index_errors() -> None:
    with pytest.raises(DTypeError, match="must hold integers, got float32"):
        f32(4)[f32(2)]
    with pytest.raises(UnsupportedError, match="boolean Tensor mask .* is not supported"):
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


# ---------------------------------------------------------------- nn ops
def test_matmul_inner_sizes_named() -> None:
    with pytest.raises(ShapeError, match=r"\(2, 3\) and \(4, 5\)"):
        Tensor(np.zeros((2, 3), np.float32)) @ Tensor(np.zeros((4, 5), np.float32))


def test_conv2d_channel_mismatch_names_shapes() -> None:
    with pytest.raises(ShapeError, match=r"input \(1, 3, 8, 8\) with weight \(4, 2, 3, 3\)"):
        f32(1, 3, 8, 8).conv2d(f32(4, 2, 3, 3))
    with pytest.raises(ShapeError, match="4-d"):  # (a 3-d input is an unbatched image, as torch)
        f32(8, 8).conv2d(f32(4, 3, 3, 3))
    with pytest.raises(ShapeError, match="larger than the padded input"):
        f32(1, 1, 2, 2).conv2d(f32(1, 1, 3, 3))
    with pytest.raises(ShapeError, match="padding"):
        f32(1, 1, 4, 4).conv2d(f32(1, 1, 3, 3), padding=(1, 2, 3))


# ---------------------------------------------------------------- every tensor
def test_errors_are_tolk_errors() -> None:
    assert issubclass(ShapeError, TolkError) and issubclass(DeviceMismatchError, TolkError)


def test_repr_does_not_realize(kernels) -> None:
    t = Tensor(np.ones(4, np.float32)) + 1
    with kernels() as k:
        text = repr(t)
    assert k.count == 0 and "(4,)" in text and "float32" in text
