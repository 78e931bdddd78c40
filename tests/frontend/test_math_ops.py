"""Inverse trigonometric and hyperbolic functions, tan, expm1, log1p, atan2, and the float classification and
rounding ops (isnan/isinf/isfinite, sign, round, fmod) against numpy (values, float64 references for the ULP
bounds of docs/dtypes.md) and torch (gradients), on CPU and OPENCL (the `device` fixture)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core import Tensor

INF, NAN = math.inf, math.nan
_SPECIALS = [0.0, -0.0, INF, -INF, NAN]
_TINY = {"float32": 1e-44, "float64": 1e-320}
_BIG = {"float32": 3.4e38, "float64": 1.7e308}
_EXP_MAX = {"float32": 90.0, "float64": 711.0}


def _sweep(dt: str, lo: float, hi: float) -> np.ndarray:
    """A linear sweep of [lo, hi], geometric sweeps of both signs from the dtype's subnormals to max(|lo|, |hi|),
    and the special values."""
    g = np.geomspace(_TINY[dt], max(abs(lo), abs(hi)), 3000)
    return np.concatenate([np.linspace(lo, hi, 8001), g, -g, _SPECIALS]).astype(dt)


def _inputs(name: str, dt: str) -> np.ndarray:
    big = _BIG[dt]
    if name in ("asin", "acos", "atanh"):
        near_one = 1 - np.geomspace(1e-15 if dt == "float64" else 1e-7, 0.5, 500)
        return np.concatenate([_sweep(dt, -1, 1), near_one, -near_one, [1.5, -1.5, 1.0, -1.0]]).astype(dt)
    if name == "acosh":
        return np.concatenate([np.geomspace(1, big, 4000), 1 + np.geomspace(1e-15, 1, 2000),
                               [1.0, 0.5, -2.0, INF, NAN]]).astype(dt)
    if name in ("sinh", "cosh", "expm1"):
        return _sweep(dt, -_EXP_MAX[dt], _EXP_MAX[dt])
    if name == "log1p":
        return np.concatenate([_sweep(dt, -1, 10), np.geomspace(1, big, 2000), [-1.0, -2.0]]).astype(dt)
    if name == "tan":
        near_half_pi = np.nextafter(np.array(math.pi / 2, dt), np.array([0, 4], dt))
        return np.concatenate([_sweep(dt, -10, 10), near_half_pi, -near_half_pi]).astype(dt)
    return _sweep(dt, -big, big)  # atan, asinh: the whole line


_REFS = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
         "tan": np.tan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "expm1": np.expm1,
         "log1p": np.log1p}
# the bound docs/dtypes.md states for each, in ulps of the result's dtype
ULP_BOUND = 4


def _ulp_error(got: np.ndarray, x: np.ndarray, ref) -> np.ndarray:
    """ULPs of got's dtype between `got` and the reference (in long double, where float64 needs it); where
    either is not finite they must agree exactly (else the error is inf)."""
    dt = got.dtype
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.longdouble))
        rounded = want.astype(dt)
        special = ~np.isfinite(rounded) | ~np.isfinite(got)
        agree = (np.isnan(got) & np.isnan(rounded)) | (got == rounded)
        ulp = np.spacing(np.abs(rounded)).astype(np.longdouble)
        return np.where(special, np.where(agree, 0.0, np.inf), np.abs(got.astype(np.longdouble) - want) / ulp)


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(_REFS))
def test_function_within_its_ulp_bound(device, name, dt):
    x = _inputs(name, dt)
    got = getattr(Tensor(x, device=device), name)().numpy()
    assert got.dtype == np.dtype(dt)
    err = _ulp_error(got, x, _REFS[name])
    worst = int(np.argmax(err))
    assert err[worst] <= ULP_BOUND, f"{name}({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp"


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(_REFS))
def test_half_floats_round_once_from_float32(device, name, dt):
    """float16/bfloat16 are computed in float32 and rounded to their dtype: within 1 ulp of the dtype."""
    npdt = np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)
    x = np.clip(_inputs(name, "float32"), -60000, 60000).astype(npdt)
    got = getattr(Tensor(x, device=device), name)().numpy()
    assert got.dtype == npdt
    with np.errstate(all="ignore"):
        want = _REFS[name](x.astype(np.float64)).astype(npdt)
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    spacing = np.spacing(np.abs(w64).astype(np.float32)) * 2.0 ** (23 - ml_dtypes.finfo(npdt).nmant)
    ok = (np.isnan(g64) & np.isnan(w64)) | (g64 == w64) | (np.abs(g64 - w64) <= spacing * 1.01)
    assert ok.all(), list(zip(x[~ok], got[~ok], want[~ok], strict=True))[:5]


def test_integer_inputs_compute_in_the_default_float(device):
    x = np.array([-1, 0, 1, 3], np.int32)
    for name in ("asin", "atan", "sinh", "tanh", "asinh", "expm1", "log1p", "tan"):
        got = getattr(Tensor(x, device=device), name)().numpy()
        assert got.dtype == np.float32, name
        with np.errstate(all="ignore"):
            want = getattr(np, {"asin": "arcsin", "atan": "arctan", "asinh": "arcsinh"}.get(name, name))(
                x.astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)


def test_signed_zeros_and_domain_ends(device):
    """asin(+-1) = +-pi/2, acos(-1) = pi, atanh(+-1) = +-inf, acosh(1) = 0; odd functions keep -0.0."""
    t = Tensor(np.array([-0.0, 1.0, -1.0], np.float32), device=device)
    assert np.signbit(t.asin().numpy()[0]) and np.signbit(t.atan().numpy()[0]) and np.signbit(t.sinh().numpy()[0])
    assert np.signbit(t.asinh().numpy()[0]) and np.signbit(t.atanh().numpy()[0]) and np.signbit(t.tan().numpy()[0])
    np.testing.assert_array_equal(t.asin().numpy()[1:], np.float32([math.pi / 2, -math.pi / 2]))
    np.testing.assert_array_equal(t.acos().numpy()[1:], np.float32([0.0, math.pi]))
    np.testing.assert_array_equal(t.atanh().numpy()[1:], np.float32([INF, -INF]))
    assert Tensor(np.float32([1.0]), device=device).acosh().numpy()[0] == 0.0


_GRAD_X = {
    "asin": np.float32([-0.99, -0.5, 0.0, 0.3, 0.9]), "acos": np.float32([-0.99, -0.5, 0.0, 0.3, 0.9]),
    "atan": np.float32([-1e4, -2.0, 0.0, 0.5, 30.0]), "sinh": np.float32([-50.0, -1.0, 1e-4, 2.0, 45.0]),
    "cosh": np.float32([-50.0, -1.0, 1e-4, 2.0, 45.0]), "tan": np.float32([-1.5, -0.3, 0.0, 1.0, 1.55]),
    "asinh": np.float32([-1e5, -2.0, 0.0, 0.5, 3e4]), "acosh": np.float32([1.001, 1.5, 3.0, 100.0, 1e5]),
    "atanh": np.float32([-0.99, -0.5, 0.0, 0.3, 0.9]), "expm1": np.float32([-50.0, -1.0, 1e-6, 2.0, 45.0]),
    "log1p": np.float32([-0.9, -1e-6, 0.0, 2.0, 1e6]),
}


@pytest.mark.parametrize("name", sorted(_GRAD_X))
def test_gradient_matches_torch(device, name):
    x = _GRAD_X[name]
    check(device, lambda t: getattr(t, name)(), lambda t: getattr(t, name)(), [x], rtol=2e-5)


def test_atan2_of_every_pair_of_edge_values(device):
    """numpy's arctan2 over all pairs of signed zeros, infinities, NaN and ordinary values: exact where the
    result is 0, +-pi/2, +-pi/4, +-3pi/4, +-pi or NaN (signs of zero included), within 4 ulp elsewhere."""
    e = np.float32([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 3e38, -1e-45, 0.5, -7.0])
    y, x = np.repeat(e, len(e)), np.tile(e, len(e))
    got = Tensor(y, device=device).atan2(Tensor(x, device=device)).numpy()
    want = np.arctan2(y, x)
    same = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    close = np.abs(got.astype(np.float64) - want) <= 4 * np.spacing(np.abs(want))
    ok = same | (close & np.isfinite(want) & (want != 0))
    assert ok.all(), list(zip(y[~ok], x[~ok], got[~ok], strict=True))[:6]


def test_atan2_sweep_and_gradient(device):
    rng = np.random.default_rng(0)
    y, x = (rng.standard_normal(4000) * 10.0 ** rng.integers(-20, 20, 4000)).astype(np.float32).reshape(2, -1)
    got = Tensor(y, device=device).atan2(Tensor(x, device=device)).numpy()
    want = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    assert (np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))).max() <= 4
    small = rng.standard_normal((2, 6)).astype(np.float32)
    check(device, lambda a, b: a.atan2(b), lambda a, b: a.atan2(b), [small[0], small[1]])


def test_atan2_promotes_and_broadcasts(device):
    got = Tensor(np.array([[1], [-2]], np.int32), device=device).atan2(Tensor(np.float64([1.0, -1.0]), device=device))
    assert got.numpy().dtype == np.float64
    np.testing.assert_allclose(got.numpy(), np.arctan2([[1], [-2]], [1.0, -1.0]), rtol=1e-15)
    np.testing.assert_allclose(Tensor(np.float32([1.0]), device=device).atan2(2).numpy(), np.arctan2(1, 2), rtol=1e-6)


_CLASSIFY = np.array([NAN, INF, -INF, 0.0, -0.0, 1e-45, -3e38, 2.0])


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_isnan_isinf_isfinite(device, dt):
    t = Tensor(_CLASSIFY.astype(dt), device=device)
    for name in ("isnan", "isinf", "isfinite"):
        got = getattr(t, name)().numpy()
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, getattr(np, name)(_CLASSIFY.astype(dt)), err_msg=name)


def test_classification_of_integers_is_constant(device):
    for dt in ("int8", "uint64", "int32", "bool"):
        x = np.array([0, 1, 1], dt)
        t = Tensor(x, device=device)
        for name in ("isnan", "isinf", "isfinite"):
            np.testing.assert_array_equal(getattr(t, name)().numpy(), getattr(np, name)(x), err_msg=f"{name} {dt}")


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind == "f":
        ok = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    else:
        ok = got == want
    assert ok.all(), list(zip(got[~ok], want[~ok], strict=True))[:8]


@pytest.mark.parametrize("dt", ["float16", "float32", "float64", "int8", "int64", "uint8", "bool"])
def test_sign_as_numpy(device, dt):
    """numpy's sign: -0.0 gives 0.0, NaN gives NaN; integers -1/0/1 (the minimum included); bools unchanged."""
    if dt == "bool":
        x = np.array([True, False])
    elif dt.startswith(("int", "uint")):
        info = np.iinfo(dt)
        x = np.array([info.min, -1, 0, 1, info.max] if info.min else [0, 1, info.max], dt)
    else:
        x = np.array([NAN, INF, -INF, 0.0, -0.0, 1e-45, -2.5, 7.0], dt)
    want = x if dt == "bool" else np.sign(x)  # torch's sign of bools (numpy has none)
    _same_bits(Tensor(x, device=device).sign().numpy(), want)


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_round_half_to_even(device, dt):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.4, 0.4, -0.0, 0.49999997, 2.5000002, 1e7 + 0.5,
                  2.0 ** 52 + 1, -(2.0 ** 23) - 1, 4503599627370495.5, 3e38, INF, -INF, NAN, 1e-45,
                  65504.0, 1234.5], np.float64)
    with np.errstate(over="ignore"):
        x = x.astype(dt)
    _same_bits(Tensor(x, device=device).round().numpy(), np.round(x))


def test_round_gradient_is_zero(device):
    """torch's: rounding passes no gradient (only the `+ t` does), huge values included."""
    check(device, lambda t: t.round() * 3 + t, lambda t: t.round() * 3 + t, [np.float32([-1.5, 0.2, 2.5, 1e30])])


@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "uint16", "bool"])
def test_rounding_of_integers_is_the_identity(device, dt):
    x = np.array([True, False]) if dt == "bool" else np.array([np.iinfo(dt).min, 0, 7, np.iinfo(dt).max], dt)
    t = Tensor(x, device=device)
    for name in ("floor", "ceil", "trunc", "round"):
        got = getattr(t, name)().numpy()
        assert got.dtype == x.dtype, name
        np.testing.assert_array_equal(got, x, err_msg=name)


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_fmod_of_floats_as_c(device, dt):
    e = np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 2.5, -7.25, 1e-40, 3e4], np.float64)
    a, b = (v.astype(dt) for v in (np.repeat(e, len(e)), np.tile(e, len(e))))
    with np.errstate(all="ignore"):
        want = np.fmod(a, b)
    _same_bits(Tensor(a, device=device).fmod(Tensor(b, device=device)).numpy(), want)


@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "uint8", "uint64"])
def test_fmod_of_integers_takes_the_dividends_sign(device, dt):
    """Truncated remainder (the dividend's sign, where % takes the divisor's); x fmod 0 is 0 as numpy gives,
    INT_MIN fmod -1 is 0."""
    info = np.iinfo(dt)
    vals = [info.min, info.min + 1, -7, -1, 0, 1, 7, info.max] if info.min else [0, 1, 7, 200, info.max]
    a, b = (np.array(v, dt) for v in (np.repeat(vals, len(vals)), np.tile(vals, len(vals))))
    with np.errstate(all="ignore"):
        want = np.fmod(a, b)
    _same_bits(Tensor(a, device=device).fmod(Tensor(b, device=device)).numpy(), want)
    np.testing.assert_array_equal(Tensor(np.array([-7, 7], dt if info.min else "int8"), device=device).fmod(3)
                                  .numpy(), [-1, 1])


def test_fmod_gradient_matches_torch(device):
    check(device, lambda a, b: a.fmod(b), lambda a, b: a.fmod(b),
          [np.float32([5.5, -7.0, 3.0, -0.5]), np.float32([2.0, 3.0, -1.25, 0.3])])
