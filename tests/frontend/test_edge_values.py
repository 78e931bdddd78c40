"""Edge values give numpy's answer (numpy 2, float64 references for the ULP bounds) or a named error, under the rules
of docs/dtypes.md: NaN in comparisons and selections, signed integer extremes, Python ints beyond a dtype,
C99's pow special cases, and the stated ULP bound of each transcendental function. Every test runs on CPU and
OPENCL (the `device` fixture) and the PYTHON reference device."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tolk_core import ScalarOverflowError, Tensor, dtypes

INF, NAN = math.inf, math.nan
EDGES = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1e-40, 3e38, -1.5])


@pytest.fixture(params=["compiled", "PYTHON"])
def dev(request, device) -> str:
    """CPU and OPENCL (the `device` fixture), and the PYTHON reference device once."""
    if request.param == "PYTHON":
        if device != "CPU":
            pytest.skip("the PYTHON device runs once, beside CPU")
        return "PYTHON"
    return device


def _pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of the edge values."""
    e = EDGES.astype(dtype)
    return np.repeat(e, len(e)), np.tile(e, len(e))


def _same_floats(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values with equal signs of zero; NaN where numpy has NaN."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    ok = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    assert ok.all(), list(zip(got[~ok], want[~ok], strict=True))[:8]


# ---- NaN
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_comparison_with_nan_is_false(dev, dtype):
    a, b = _pairs(dtype)
    ta, tb = Tensor(a, device=dev), Tensor(b, device=dev)
    for op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
        np.testing.assert_array_equal(getattr(ta, op)(tb).numpy(), getattr(a, op)(b), err_msg=op)
        np.testing.assert_array_equal(getattr(ta, op)(1.0).numpy(), getattr(a, op)(dtype(1.0)), err_msg=op)
    assert not (Tensor([NAN], device=dev) <= 1.0).item()  # the reported case


def test_maximum_minimum_and_clip_propagate_nan(dev):
    a, b = _pairs(np.float32)
    ta, tb = Tensor(a, device=dev), Tensor(b, device=dev)
    nan_either = np.isnan(a) | np.isnan(b)
    for got, want in [(ta.maximum(tb), np.maximum(a, b)), (ta.minimum(tb), np.minimum(a, b))]:
        got = got.numpy()
        np.testing.assert_array_equal(np.isnan(got), nan_either)
        np.testing.assert_array_equal(got[~nan_either], want[~nan_either])  # (the sign of a zero tie is open)
    e = EDGES.astype(np.float32)
    t = Tensor(e, device=dev)
    # an infinite constant bounds every number but not NaN: MAX(x, inf) must not fold to inf
    _same_floats(t.maximum(INF).numpy(), np.maximum(e, np.float32(INF)))
    _same_floats(t.minimum(-INF).numpy(), np.minimum(e, np.float32(-INF)))
    _same_floats(t.clip(-1.0, 1.0).numpy(), np.clip(e, np.float32(-1), np.float32(1)))
    _same_floats((t > 0).where(t, -t).numpy(), np.where(e > 0, e, -e))


def test_abs_floor_ceil_tanh_keep_edge_values(dev):
    e = EDGES.astype(np.float32)
    t = Tensor(e, device=dev)
    _same_floats(t.abs().numpy(), np.abs(e))  # abs(-0.0) is +0.0
    _same_floats(t.floor().numpy(), np.floor(e))
    _same_floats(t.ceil().numpy(), np.ceil(e))
    small = np.array([1e-40, -1e-30, 1e-8, -1e-4, 0.01, 0.2, 0.3, -0.0], np.float32)  # 2*sigmoid(2x)-1 cancels here
    np.testing.assert_allclose(Tensor(small, device=dev).tanh().numpy(), np.tanh(small), rtol=3e-7, atol=0)


# ---- signed integer extremes
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32])
def test_min_of_int_minimum(dev, dtype):
    info = np.iinfo(dtype)
    x = np.array([5, info.min, 3, info.max, info.min + 1], dtype)
    t = Tensor(x, device=dev)
    assert t.min().item() == x.min()
    assert t.max().item() == x.max()
    np.testing.assert_array_equal(Tensor(x.reshape(1, 5), device=dev).min(1).numpy(), x.reshape(1, 5).min(1))
    np.testing.assert_array_equal(t.argmin().item(), x.argmin())


@pytest.mark.parametrize("lo,hi", [(-200, 200), (-200, 100), (-100, 2**40), (None, 300), (-129, None)])
def test_clip_bounds_beyond_the_dtype_clip_exactly(dev, lo, hi):
    x = np.array([-128, -100, -5, 0, 5, 100, 127], np.int8)
    got = Tensor(x, device=dev).clip(lo, hi)
    assert got.dtype == dtypes.int8
    np.testing.assert_array_equal(got.numpy(), np.clip(x, lo, hi))  # numpy 2 clips by the exact bounds


@pytest.mark.parametrize("lo,hi", [(-(2**40), -129), (128, 300), (200, None)])
def test_clip_to_a_bound_the_dtype_cannot_hold_raises_overflow(dev, lo, hi):
    """Every element would become a value int8 cannot hold: numpy 2 and Tolk raise OverflowError."""
    x = np.array([-128, 0, 127], np.int8)
    with pytest.raises(OverflowError):
        np.clip(x, lo, hi)
    with pytest.raises(ScalarOverflowError):
        Tensor(x, device=dev).clip(lo, hi)


@pytest.mark.parametrize("dtype,value", [(np.int32, 2**32 + 5), (np.int32, -(2**31) - 1), (np.uint8, -1),
                                         (np.int8, 300), (np.int64, 2**63), (np.uint64, -(2**70))])
def test_comparison_with_python_int_beyond_the_dtype_is_exact(dev, dtype, value):
    info = np.iinfo(dtype)
    x = np.array([info.min, 0, 5, info.max], dtype)
    t = Tensor(x, device=dev)
    for op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
        np.testing.assert_array_equal(getattr(t, op)(value).numpy(), getattr(x, op)(value), err_msg=op)
    np.testing.assert_array_equal((value < t).numpy(), value < x)
    np.testing.assert_array_equal((value >= t).numpy(), value >= x)


def test_pow_special_cases_follow_c99(dev):
    bases = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0], np.float32)
    exps = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5], np.float32)
    a, b = np.repeat(bases, len(exps)), np.tile(exps, len(bases))
    with np.errstate(all="ignore"):
        want = np.power(a, b)
    got = (Tensor(a, device=dev) ** Tensor(b, device=dev)).numpy()
    exact = np.isin(np.abs(a), [0.0, 1.0, 2.0, 0.5, INF]) | ~np.isfinite(want) | np.isnan(a) | np.isnan(b)
    _same_floats(got[exact], want[exact])  # the special cases exactly, signs of zeros and infinities included
    np.testing.assert_allclose(got[~exact], want[~exact], rtol=1e-6)
    assert (Tensor([-INF], device=dev) ** 0.5).item() == INF  # C99 (np.power, torch); numpy's `** 0.5` is sqrt


# ---- Python integers
def test_python_int_outside_int32_infers_int64(dev):
    big = 2**40
    cases = [(Tensor([1, big], device=dev), np.array([1, big])),
             (Tensor(big + 7, device=dev), np.array(big + 7)),
             (Tensor.full((2,), -big, device=dev), np.full((2,), -big)),
             (Tensor.arange(big, big + 3, device=dev), np.arange(big, big + 3)),
             (Tensor([[2**63 + 1]], device=dev), np.array([[2**63 + 1]]))]
    for t, want in cases:
        assert t.dtype == dtypes.from_np(want.dtype)
        np.testing.assert_array_equal(t.numpy(), want)
    assert Tensor([1, 2**31 - 1], device=dev).dtype == dtypes.int32  # ints that fit stay the default int32


def test_python_int_a_dtype_cannot_hold_raises_overflow(dev):
    i8 = Tensor(np.array([1, 2], np.int8), device=dev)
    makers = [lambda: Tensor([300], dtype=dtypes.uint8, device=dev), lambda: Tensor(-1, dtype="uint8", device=dev),
              lambda: Tensor.full((2,), 2**40, dtype=dtypes.int32, device=dev),
              lambda: Tensor.arange(250, 260, dtype=dtypes.uint8, device=dev), lambda: i8 + 300,
              lambda: i8 * -129, lambda: i8.maximum(300), lambda: i8.full_like(2**40)]
    numpy_too = [lambda: np.array([300], np.uint8), lambda: np.array(-1, np.uint8),
                 lambda: np.full((2,), 2**40, np.int32), None, lambda: np.array([1, 2], np.int8) + 300,
                 lambda: np.array([1, 2], np.int8) * -129, lambda: np.maximum(np.array([1], np.int8), 300), None]
    for make, ref in zip(makers, numpy_too, strict=True):
        with pytest.raises(ScalarOverflowError, match="out of bounds"):
            make()
        if ref is not None:
            with pytest.raises(OverflowError):
                ref()
    with pytest.raises(ScalarOverflowError, match="fits no integer dtype"):
        Tensor([2**64], device=dev)


def test_python_scalars_are_weak(dev):
    """NEP 50: a Python scalar takes the tensor's dtype within its category (an int tensor with a Python float
    gives the default float, float32, where numpy gives float64)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x, scalar in [(np.array([1, 127], np.int8), 1), (np.array([1.5], np.float32), 1.5),
                          (np.array([1.5], np.float16), 1e6), (np.array([True, False]), 2**40),
                          (np.array([3], np.uint8), 255)]:
            t, want = Tensor(x, device=dev) + scalar, x + scalar
            assert t.dtype == dtypes.from_np(want.dtype), (x.dtype, scalar)
            np.testing.assert_array_equal(t.numpy(), want)
    t = Tensor(np.array([1, 2], np.int32), device=dev) + 0.5
    assert t.dtype == dtypes.default_float
    np.testing.assert_array_equal(t.numpy(), np.array([1.5, 2.5], np.float32))


# ---- ULP bounds of the transcendental functions (docs/dtypes.md), float32 against numpy in float64
def _ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """float32 ULPs (at the reference) between `got` and the float64 `ref`; where either is not finite they must
    agree exactly (else the error is inf)."""
    got64, r32 = got.astype(np.float64), ref.astype(np.float32)
    special = ~np.isfinite(ref) | ~np.isfinite(got64) | ~np.isfinite(r32)
    agree = (np.isnan(got64) & np.isnan(ref)) | (got64 == ref) | (got == r32)
    ulp = np.spacing(np.abs(r32)).astype(np.float64)
    return np.where(special, np.where(agree, 0.0, np.inf), np.abs(got64 - ref) / ulp)


_SPECIALS = [0.0, -0.0, INF, -INF, NAN, 1e-45, 1e-40, 1.17549435e-38]


def _sweep(lo: float, hi: float, tiny: float, signed: bool = True) -> np.ndarray:
    """A linear sweep of [lo, hi], a geometric one from `tiny` (both signs when `signed`), and the edge values."""
    g = np.geomspace(tiny, max(abs(lo), abs(hi)), 2000)
    parts = [np.linspace(lo, hi, 8001), g, -g if signed else g[:0], _SPECIALS]
    return np.concatenate(parts).astype(np.float32)


_POSITIVE = np.concatenate([np.geomspace(1e-45, 3.4e38, 8001), [-1.0, -1e-30], _SPECIALS]).astype(np.float32)
# name: (the function, its float64 reference, inputs, bound in ulp) - the bounds of docs/dtypes.md
ULP_BOUNDS = {
    "exp": (Tensor.exp, np.exp, _sweep(-103, 88.7, 1e-30), 64),
    "exp2": (Tensor.exp2, np.exp2, _sweep(-149, 127.9, 1e-30), 3),
    "log": (Tensor.log, np.log, _POSITIVE, 2),
    "log2": (Tensor.log2, np.log2, _POSITIVE, 1),
    "sqrt": (Tensor.sqrt, np.sqrt, _POSITIVE, 0.5),
    "rsqrt": (Tensor.rsqrt, lambda x: 1 / np.sqrt(x), _POSITIVE, 2),
    "reciprocal": (Tensor.reciprocal, lambda x: 1 / x, _POSITIVE, 0.5),
    "sin": (Tensor.sin, np.sin, _sweep(-100, 100, 1e-30), 2),
    "cos": (Tensor.cos, np.cos,
            np.concatenate([_sweep(-100, 100, 1e-30), [1e4, -1e6, 1e10, 3.4e38]]).astype(np.float32), 2),
    "tanh": (Tensor.tanh, np.tanh, _sweep(-20, 20, 1e-40), 3),
    "sigmoid": (Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), _sweep(-100, 100, 1e-40), 64),
}


@pytest.mark.parametrize("name", sorted(ULP_BOUNDS))
def test_transcendental_within_its_ulp_bound(dev, name):
    fn, ref, x, bound = ULP_BOUNDS[name]
    with np.errstate(all="ignore"):
        err = _ulp_error(fn(Tensor(x, device=dev)).numpy(), ref(x.astype(np.float64)))
    worst = int(np.argmax(err))
    assert err[worst] <= bound, f"{name}({x[worst]!r}): {err[worst]:.2f} ulp > {bound}"


def test_pow_within_its_ulp_bound(dev):
    """Positive bases 1e-3..1e3 and negative integers, exponents in [-12, 12] (integers and not): 128 ulp."""
    b = np.concatenate([np.geomspace(1e-3, 1e3, 300), -np.arange(1, 20.0)])
    e = np.concatenate([np.linspace(-12, 12, 97), np.arange(-10, 11.0)])
    a, y = (v.ravel().astype(np.float32) for v in np.meshgrid(b, e))
    with np.errstate(all="ignore"):
        err = _ulp_error((Tensor(a, device=dev) ** Tensor(y, device=dev)).numpy(),
                         np.power(a.astype(np.float64), y.astype(np.float64)))
    worst = int(np.argmax(err))
    assert err[worst] <= 128, f"{a[worst]!r} ** {y[worst]!r}: {err[worst]:.2f} ulp"
