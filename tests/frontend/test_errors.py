"""Bad input gets a clear TolkError naming the problem."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.errors import DeviceMismatchError, ShapeError, TolkError
from tolk_core.frontend.tensor import Tensor


def test_incompatible_broadcast_names_both_shapes() -> None:
    with pytest.raises(ShapeError, match=r"\(3, 4\) and \(5,\)"):
        Tensor(np.zeros((3, 4), np.float32)) + Tensor(np.zeros(5, np.float32))


def test_reshape_to_wrong_size() -> None:
    with pytest.raises(ShapeError, match=r"cannot reshape tensor of shape \(3, 4\).*\(5, 3\)"):
        Tensor(np.zeros((3, 4), np.float32)).reshape(5, 3)


def test_reshape_minus_one_that_does_not_divide() -> None:
    with pytest.raises(ShapeError, match="cannot reshape"):
        Tensor(np.zeros((3, 4), np.float32)).reshape(5, -1)


@pytest.mark.parametrize("op", [lambda t: t.sum(axis=2), lambda t: t.max(axis=-3), lambda t: t.transpose(0, 5),
                                lambda t: t.softmax(axis=7)])
def test_axis_out_of_range(op) -> None:
    with pytest.raises(ShapeError, match="axis .* out of range .* 2 dimension"):
        op(Tensor(np.zeros((3, 4), np.float32)))


def test_device_mismatch_names_both_devices(device) -> None:
    other = "OPENCL" if device == "CPU" else "CPU"
    pytest.importorskip("pyopencl")
    try:
        b = Tensor(np.ones(3, np.float32), device=other)
    except TolkError as e:
        pytest.skip(f"{other} unavailable: {e}")
    with pytest.raises(DeviceMismatchError, match=f"{device}.*{other}"):
        Tensor(np.ones(3, np.float32), device=device) + b


def test_matmul_inner_sizes_named() -> None:
    with pytest.raises(ShapeError, match=r"\(2, 3\) and \(4, 5\)"):
        Tensor(np.zeros((2, 3), np.float32)) @ Tensor(np.zeros((4, 5), np.float32))


def test_errors_are_tolk_errors() -> None:
    assert issubclass(ShapeError, TolkError) and issubclass(DeviceMismatchError, TolkError)


def test_repr_does_not_realize(kernels) -> None:
    t = Tensor(np.ones(4, np.float32)) + 1
    with kernels() as k:
        text = repr(t)
    assert k.count == 0 and "(4,)" in text and "float32" in text
