"""Argument mistakes raise a named Tolk error whose message names the problem (never an AttributeError, a
KeyError or a silent truncation from inside): sizes and axes of the wrong Python type, pad and shrink arguments
of the wrong arity, operands that are ndarrays (taken, as torch takes them) or of no usable type, operands on
two devices. The numpy-integer cases check the values against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core.errors import ArgumentTypeError, DeviceMismatchError, ShapeError, TolkError
from tolk_core.frontend.tensor import Tensor


def other_device(device: str) -> str:
    """A second compiled device beside `device` (skips when the machine has only one)."""
    other = "OPENCL" if device == "CPU" else "CPU"
    try:
        Tensor(np.zeros(1, np.float32), device=other)
    except TolkError as e:
        pytest.skip(f"{other} unavailable, so no second device: {e}")
    return other


# ---------------------------------------------------------------- sizes
def test_numpy_integer_sizes_are_taken_as_ints(device) -> None:
    t = Tensor.zeros(np.int64(3), device=device)
    assert t.shape == (3,) and isinstance(t.shape[0], int)
    np.testing.assert_array_equal(Tensor.ones((np.int32(2), np.uint8(3)), device=device).numpy(), np.ones((2, 3)))
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(Tensor(x, device=device).reshape(np.int64(2), -1).numpy(), x.reshape(2, 3))


@pytest.mark.parametrize("make", [lambda: Tensor.zeros(2.5), lambda: Tensor.ones((2, 3.0)), lambda: Tensor.empty(1.5),
                                  lambda: Tensor.full((2.5,), 1.0), lambda: Tensor.rand(2.5)],
                         ids=["zeros", "ones", "empty", "full", "rand"])
def test_float_sizes_are_a_type_error(make) -> None:
    with pytest.raises(ArgumentTypeError, match=r"must be an integer, got float"):
        make()
    assert issubclass(ArgumentTypeError, TypeError)  # `except TypeError` still catches it


@pytest.mark.parametrize("make", [lambda: Tensor.zeros(-1), lambda: Tensor.empty(2, -3), lambda: Tensor.rand(-2)],
                         ids=["zeros", "empty", "rand"])
def test_negative_sizes_are_a_shape_error(make) -> None:
    with pytest.raises(ShapeError, match=r"negative size in shape .*-\d"):
        make()


def test_reshape_to_none_or_floats_is_a_type_error() -> None:
    x = Tensor(np.zeros(4, np.float32))
    with pytest.raises(ArgumentTypeError, match="must be an integer, got NoneType None"):
        x.reshape(None)
    with pytest.raises(ArgumentTypeError, match="got float 2.0"):
        x.reshape(2.0, 2)
    with pytest.raises(ArgumentTypeError, match="permute order must be an integer, got float 1.5"):
        x.reshape(2, 2).permute(0, 1.5)


# ---------------------------------------------------------------- pad, shrink, axes
def test_pad_with_an_odd_flat_padding() -> None:
    with pytest.raises(ShapeError, match=r"pad's flat form \(1, 2, 3\) needs an even count"):
        Tensor(np.zeros((4, 4), np.float32)).pad((1, 2, 3))
    with pytest.raises(ShapeError, match=r"at most 2 per axis of \(4,\)"):
        Tensor(np.zeros(4, np.float32)).pad((1, 1, 1, 1))
    with pytest.raises(ShapeError, match=r"pad needs one \(start, end\) pair per axis"):
        Tensor(np.zeros((4, 4), np.float32)).pad(((1, 2, 3), (0, 0)))
    with pytest.raises(ArgumentTypeError, match="pad or shrink bound must be an integer, got float 1.5"):
        Tensor(np.zeros(4, np.float32)).pad(((1.5, 0),))


def test_shrink_with_the_wrong_arity() -> None:
    x = Tensor(np.zeros((4, 4), np.float32))
    with pytest.raises(ShapeError, match=r"shrink needs one \(start, end\) pair per axis of \(4, 4\) \(2 in all\)"):
        x.shrink(((0, 2),))
    with pytest.raises(ShapeError, match="shrink needs one"):
        x.shrink(((0, 2, 3), (0, 1)))
    with pytest.raises(ShapeError, match="shrink needs one"):
        x.shrink(((0, 1), (0, 1), (0, 1)))


@pytest.mark.parametrize("op", [lambda t: t.sum(axis=1.5), lambda t: t.max(axis=1.5), lambda t: t.mean(axis=[0.5]),
                                lambda t: t.flip(1.5), lambda t: t.softmax(axis=1.5), lambda t: t.unsqueeze(1.5),
                                lambda t: t.stack(t, dim=1.5), lambda t: t.argmax(1.5)],
                         ids=["sum", "max", "mean", "flip", "softmax", "unsqueeze", "stack", "argmax"])
def test_float_axes_are_a_type_error(op) -> None:
    with pytest.raises(ArgumentTypeError, match="an axis must be an integer, got float"):
        op(Tensor(np.zeros((3, 4), np.float32)))


def test_numpy_integer_axes_are_taken(device) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(Tensor(x, device=device).sum(axis=np.int64(1)).numpy(), x.sum(axis=1))


# ---------------------------------------------------------------- ndarray and other operands
def test_ndarray_operands_become_tensors_on_the_other_operands_device(device) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 4), np.float32), rng.random((4, 2), np.float32)
    t = Tensor(a, device=device)
    for got, want in [(t @ b, a @ b), (a.T @ t, a.T @ a), (t + a, a + a), (a - t, a - a), (t * a[0], a * a[0]),
                      ((t > 0.5).where(a, 0.0), np.where(a > 0.5, a, 0.0))]:
        assert isinstance(got, Tensor) and got.device == t.device
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_operands_of_no_usable_type_are_a_type_error() -> None:
    t = Tensor(np.zeros(2, np.float32))
    with pytest.raises(ArgumentTypeError, match="cannot combine a Tensor with list"):
        t + [1.0, 2.0]
    with pytest.raises(ArgumentTypeError, match="matmul of a Tensor with list"):
        t @ [1.0, 2.0]
    with pytest.raises(ArgumentTypeError, match="matmul of a Tensor with str"):
        t.__rmatmul__("x")


# ---------------------------------------------------------------- operands on two devices
def _two(device: str, other: str):
    return Tensor(np.ones(3, np.float32), device=device), Tensor(np.ones(3, np.float32), device=other)


@pytest.mark.parametrize("op, what", [
    (lambda a, b: a + b, "elementwise"), (lambda a, b: a.maximum(b), "elementwise"),
    (lambda a, b: a.reshape(1, 3) @ b.reshape(3, 1), "matmul"), (lambda a, b: a.cat(b), "cat"),
    (lambda a, b: (a > 0).where(b, b), "where"), (lambda a, b: (b > 0).where(a, 0.0), "where"),
    (lambda a, b: (a > 0).where(1.0, b), "where"), (lambda a, b: a[b.cast("int32")], "indexing")],
    ids=["add", "maximum", "matmul", "cat", "where-cond", "where-x", "where-y", "index"])
def test_operands_on_two_devices(device, op, what) -> None:
    a, b = _two(device, other := other_device(device))
    # both devices named (in the operands' order), then the fix
    with pytest.raises(DeviceMismatchError, match=rf"(?=.*{device})(?=.*{other}){what}.* on different devices: "
                                                  r"\S+ and \S+; move them to one device first, e\.g\. x\.to\("):
        op(a, b)


def test_custom_kernel_on_two_devices(device) -> None:
    a, b = _two(device, other := other_device(device))
    with pytest.raises(DeviceMismatchError, match=rf"kernel k has operands on different devices: {device}.*{other}"):
        tolk_core.custom_kernel("void k(float *o, float *i) {}", "k", [a], [b])


def test_backward_seed_on_another_device(device) -> None:
    x = Tensor(np.ones(3, np.float32), device=device).requires_grad_()
    seed = Tensor(np.full(3, 3.0, np.float32), device=other_device(device))
    with pytest.raises(DeviceMismatchError, match=r"backward\(\) has operands on different devices"):
        (x * 2).backward(seed)
    (x * 2).backward(seed.to(device))  # the fix the message names
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 6.0, np.float32))
