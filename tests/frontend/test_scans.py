"""cumsum, cumprod and logsumexp against numpy and torch (values, dtypes, gradients), on CPU and OPENCL: every
axis, lengths across the scan's block size and several levels, empty and 0-d inputs, the integer accumulation
rule of docs/dtypes.md, NaN and infinities."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core import Tensor


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 33, 257, 5000])
def test_cumsum_and_cumprod_along_a_long_axis(device, n):
    """Lengths across one block (16), two and three levels of the blocked scan."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((2, n)).astype(np.float32)
    got = Tensor(x, device=device).cumsum(1).numpy()
    want = np.cumsum(x.astype(np.float64), 1)
    bound = n * np.finfo(np.float32).eps * np.cumsum(np.abs(x.astype(np.float64)), 1) + 1e-30
    assert (np.abs(got - want) <= bound).all()
    p = (1 + x * 1e-3).astype(np.float32)
    np.testing.assert_allclose(Tensor(p, device=device).cumprod(1).numpy(), np.cumprod(p.astype(np.float64), 1),
                               rtol=2 * n * np.finfo(np.float32).eps)
    ints = rng.integers(-100, 100, (3, n)).astype(np.int32)
    got_i = Tensor(ints, device=device).cumsum(-1).numpy()
    assert got_i.dtype == np.int64
    np.testing.assert_array_equal(got_i, np.cumsum(ints, -1))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_every_axis(device, axis):
    x = np.random.default_rng(0).integers(-5, 6, (3, 4, 5)).astype(np.int16)
    np.testing.assert_array_equal(Tensor(x, device=device).cumsum(axis).numpy(), np.cumsum(x, axis))
    np.testing.assert_array_equal(Tensor(x, device=device).cumprod(axis).numpy(), np.cumprod(x, axis))


@pytest.mark.parametrize("dt", ["bool", "int8", "uint8", "uint32", "int64", "float16", "bfloat16", "float64"])
def test_dtypes_follow_the_sum_rule(device, dt):
    """bools and signed ints give int64, unsigned uint64 (numpy's); half floats keep their dtype."""
    npdt = np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)
    x = (np.arange(24).reshape(4, 6) % 3 == 1) if dt == "bool" else (np.arange(24).reshape(4, 6) % 7).astype(npdt)
    want_sum, want_prod = np.cumsum(x, 1), np.cumprod(x, 1)
    if dt in ("float16", "bfloat16"):
        want_sum = np.cumsum(x.astype(np.float32), 1).astype(npdt)
        want_prod = np.cumprod(x.astype(np.float32), 1).astype(npdt)
    got = Tensor(x, device=device).cumsum(1).numpy()
    assert got.dtype == want_sum.dtype, (got.dtype, want_sum.dtype)
    np.testing.assert_array_equal(got, want_sum)
    np.testing.assert_array_equal(Tensor(x, device=device).cumprod(1).numpy(), want_prod)


def test_dtype_argument_and_edge_shapes(device):
    x = np.array([100, 100, 100], np.int8)
    got = Tensor(x, device=device).cumsum(0, dtype="int16").numpy()
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, [100, 200, 300])
    empty = Tensor(np.zeros((2, 0), np.float32), device=device)
    assert empty.cumsum(1).shape == (2, 0) and empty.cumprod(0).numpy().shape == (2, 0)
    np.testing.assert_array_equal(Tensor(np.float32(3.0), device=device).cumsum(0).numpy(), np.float32(3.0))


def test_axis_must_be_one_int(device):
    from tolk_core.errors import ArgumentTypeError, ShapeError
    t = Tensor(np.zeros((2, 3), np.float32), device=device)
    with pytest.raises(ShapeError, match="one axis"):
        t.cumsum((0, 1))
    with pytest.raises(ShapeError):
        t.cumprod(2)
    with pytest.raises(ArgumentTypeError):
        t.cumsum(1.0)


def test_non_finite_values_propagate(device):
    x = np.float32([1.0, math.inf, -math.inf, 2.0, math.nan, 3.0] * 4)
    with np.errstate(invalid="ignore"):
        want_s, want_p = np.cumsum(x), np.cumprod(x)
    np.testing.assert_array_equal(Tensor(x, device=device).cumsum(0).numpy(), want_s)
    np.testing.assert_array_equal(Tensor(x, device=device).cumprod(0).numpy(), want_p)


def test_gradients_match_torch(device):
    """cumprod's gradient with zeros in the data (no division by the elements)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    check(device, lambda t: t.cumsum(1), lambda t: t.cumsum(1), [x])
    p = (1 + 0.05 * x).astype(np.float32)
    p[0, 5] = 0.0
    p[1, 20] = p[1, 30] = 0.0
    check(device, lambda t: t.cumprod(1), lambda t: t.cumprod(1), [p], rtol=1e-4, atol=1e-5)
    check(device, lambda t: t.cumsum(0), lambda t: t.cumsum(0), [x])


@pytest.mark.parametrize("axis,keepdim", [(None, False), (1, False), (1, True), ((0, 2), False), (-1, True)])
def test_logsumexp_matches_torch(device, axis, keepdim):
    import torch
    x = (np.random.default_rng(5).standard_normal((3, 4, 5)) * 30).astype(np.float32)
    dims = tuple(range(3)) if axis is None else axis
    check(device, lambda t: t.logsumexp(axis, keepdim), lambda t: torch.logsumexp(t, dims, keepdim), [x])


def test_logsumexp_of_special_rows(device):
    """All -inf gives -inf, any +inf gives inf, NaN propagates, huge values do not overflow."""
    inf, nan = math.inf, math.nan
    x = np.float32([[-inf, -inf, -inf], [1.0, inf, 2.0], [1.0, nan, 2.0], [3e38, 3e38, 1.0], [-inf, inf, 0.0],
                    [-1e30, -1e30, -inf]])
    got = Tensor(x, device=device).logsumexp(1).numpy()
    want = np.array([-inf, inf, nan, math.log(2) + 3e38, inf, -1e30 + math.log(2)], np.float32)
    np.testing.assert_array_equal(got, want)
    empty = Tensor(np.zeros((2, 0), np.float32), device=device).logsumexp(1).numpy()
    np.testing.assert_array_equal(empty, [-inf, -inf])


def test_logsumexp_dtypes(device):
    ints = np.array([[1, 2], [3, 100]], np.int32)
    got = Tensor(ints, device=device).logsumexp(1).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.log(np.exp(ints.astype(np.float64)).sum(1)), rtol=1e-6)
    h = np.float16([[1, 2, 3], [10, 11, 12]])
    got_h = Tensor(h, device=device).logsumexp(1).numpy()
    assert got_h.dtype == np.float16
    np.testing.assert_array_equal(got_h, np.log(np.exp(h.astype(np.float64)).sum(1)).astype(np.float16))
