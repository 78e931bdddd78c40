"""Parity with numpy (ml_dtypes for bfloat16) of Tensor ops over the dtype matrix, per device: the core ops
(arithmetic, comparisons, where, casts, movement, sums, matmul, exp/log/sqrt) over every dtype, then the wider
op surface (maths, division, bitwise, reductions, cat/stack, log_softmax) over the floats and the narrow and wide
integers (test_parity.py covers float32/int32/bool in depth).

Like test_parity, every case of a device is built first and realized together: one compile per device.

Tolerances, per dtype:
- elementwise arithmetic, comparisons, where, casts and movement: exact for every dtype. numpy and Tolk both
  round each operation's exact result once to the dtype (Tolk computes float16/bfloat16 in float32 where it
  emulates them and rounds after every operation; float32 holds more than twice their bits, so that is exact).
- sums and matmuls: inputs on a quarter grid, so every product and the float32 (or wider) accumulation are
  exact; the tolerance is one rounding of the result to the input dtype (its unit roundoff), which allows the
  result to be returned in the input dtype as well as in the accumulator's.
- exp/log/sqrt: two units in the last place of the dtype (libm implementations differ by an ulp).
- the wider op surface: integer and bool results exact; float results against a float64 numpy reference of the
  same inputs, within 8 units of roundoff of the dtype (relative and absolute): a composite op rounds to the
  dtype after each of its few primitive steps (float16/bfloat16 compute in float32 and round per operation).
Integers wrap as in numpy where C defines it (unsigned arithmetic, narrowing conversions); signed overflow is
undefined in C and OpenCL C, so the int32/int64 inputs stay small.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp

MATRIX: tuple[DType, ...] = (dtypes.bool, dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.float16,
                             dtypes.bfloat16, dtypes.float32, dtypes.float64)
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
INTS = (dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64)
UNIT_ROUNDOFF = {dtypes.float16: 2.0 ** -11, dtypes.bfloat16: 2.0 ** -8, dtypes.float32: 2.0 ** -24,
                 dtypes.float64: 2.0 ** -53}


@dataclass
class Case:
    inputs: list[np.ndarray]
    fn: Callable                 # applied to Tensors
    ref: Callable                # applied to the numpy inputs
    rtol: float = 0.0            # rtol and atol 0: exact
    by_value: bool = False       # compare values only (reductions: the result dtype is the accumulator's)
    atol: float = 0.0


CASES: dict[str, Case] = {}


def np_dt(dt: DType) -> np.dtype:
    return dtypes.to_np(dt)


def values(dt: DType, shape: tuple[int, ...], seed: int, *, small: bool = False, grid: bool = False) -> np.ndarray:
    """Random inputs of `dt`: bools; ints in a range whose arithmetic stays defined (uint8 and int8 also wrap);
    floats in [-3, 3], on a quarter grid when `grid` (exact products and sums)."""
    rng = np.random.default_rng(seed)
    if dtypes.is_bool(dt):
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtypes.is_int(dt):
        lo, hi = {dtypes.uint8: (0, 255), dtypes.int8: (-128, 127)}.get(dt, (-1000, 1000))
        if small:
            lo, hi = (0, 3) if dtypes.is_unsigned(dt) else (-3, 3)
        return rng.integers(lo, hi + 1, size=shape).astype(np_dt(dt))
    x = rng.uniform(-3, 3, size=shape)
    return (np.round(x * 4) / 4 if grid else x).astype(np_dt(dt))


def add(name: str, inputs: list[np.ndarray], fn: Callable, ref: Callable | None = None, rtol: float = 0.0,
        by_value: bool = False, atol: float = 0.0) -> None:
    assert name not in CASES, name
    CASES[name] = Case(inputs, fn, ref or fn, rtol, by_value, atol)


for i, dt in enumerate(MATRIX):
    n, b = dt.name, dtypes.is_bool(dt)
    a2, b2 = values(dt, (7, 9), 10 * i), values(dt, (1, 9), 10 * i + 1)
    # elementwise arithmetic: bool + is logical or and * logical and, in numpy and in Tolk
    add(f"add_{n}", [a2, b2], lambda x, y: x + y)
    add(f"mul_{n}", [a2, b2], lambda x, y: x * y)
    if not b:
        add(f"sub_{n}", [a2, b2], lambda x, y: x - y)
    if dtypes.is_float(dt) or (dtypes.is_int(dt) and not dtypes.is_unsigned(dt)):
        add(f"neg_{n}", [a2], lambda x: -x)
    if not b:  # numpy has no true division of bools; ints divide in float32 in Tolk (torch's default float)
        den = values(dt, (1, 9), 10 * i + 2, small=True)
        ref_div = ((lambda x, y: x / (y * y + 1)) if dtypes.is_float(dt) else
                   (lambda x, y: x.astype(np.float32) / (y * y + 1).astype(np.float32)))
        add(f"div_{n}", [a2, den], lambda x, y: x / (y * y + 1), ref_div)
    add(f"maximum_{n}", [a2, b2], lambda x, y: x.maximum(y), np.maximum)
    # comparisons and where
    add(f"lt_{n}", [a2, b2], lambda x, y: x < y)
    eq_a = values(dt, (7, 9), 10 * i + 3, small=True)
    eq_b = values(dt, (1, 9), 10 * i + 4, small=True)
    add(f"eq_{n}", [eq_a, eq_b], lambda x, y: x == y)
    add(f"where_{n}", [a2, b2], lambda x, y: (x < y).where(x, y), lambda x, y: np.where(x < y, x, y))
    # movement: non-contiguous views feeding compute, and size-0 axes
    v1, v2 = values(dt, (8, 10), 10 * i + 5), values(dt, (10, 8), 10 * i + 6)
    add(f"views_{n}", [v1, v2], lambda x, y: x.T[1:, ::2].flip(1) + y[1:, ::-2],
        lambda x, y: np.flip(x.T[1:, ::2], 1) + y[1:, ::-2])
    add(f"pad_expand_{n}", [v1], lambda x: x.pad(((1, 0), (0, 2)))[:, :1].expand(9, 4) * x[:1, :4],
        lambda x: np.broadcast_to(np.pad(x, ((1, 0), (0, 2)))[:, :1], (9, 4)) * x[:1, :4])
    add(f"empty_{n}", [values(dt, (0, 5), 10 * i + 7), values(dt, (1, 5), 10 * i + 8)], lambda x, y: x + y)
    # reductions and matmul over quarter-grid inputs (see the module docstring); results compared by value
    rtol = UNIT_ROUNDOFF.get(dt, 0.0)
    g = values(dt, (6, 33), 10 * i + 9, small=True, grid=True)
    add(f"sum_axis_{n}", [g], lambda x: x.sum(axis=1), lambda x: x.astype(np.float64).sum(axis=1), rtol, True)
    add(f"sum_empty_{n}", [values(dt, (0, 4), 10 * i)], lambda x: x.sum(axis=0),
        lambda x: x.astype(np.float64).sum(axis=0), by_value=True)
    add(f"max_{n}", [g], lambda x: x.max(axis=0), lambda x: x.max(axis=0))
    add(f"min_{n}", [g], lambda x: x.min(axis=1), lambda x: x.min(axis=1))
    if not b:  # bool matmul has no agreed meaning (numpy: logical or of ands; torch: unsupported)
        m1, m2 = values(dt, (5, 8), 10 * i + 1, small=True, grid=True), values(dt, (8, 6), 10 * i + 2, small=True,
                                                                               grid=True)
        add(f"matmul_{n}", [m1, m2], lambda x, y: x @ y, lambda x, y: x.astype(np.float64) @ y.astype(np.float64),
            rtol, True)
    if dtypes.is_float(dt):
        u, pos = UNIT_ROUNDOFF[dt], np.abs(a2) + np_dt(dt).type(0.25)
        # the front end computes exp(x) as exp2(x*log2(e)) and log(x) as log2(x)*ln(2), each step rounded to the
        # dtype. For exp, log2(e) rounded (<= 4.4u on the argument, |x*log2(e)| < 4.4) and the rounded product
        # (<= 4u, half an ulp below 8) move exp2's argument by <= 9u: a relative error of 9u*ln(2), plus one
        # rounding. For log: log2(x), ln(2) and their product are each rounded once, plus libm's ulp.
        add(f"exp_{n}", [a2], lambda x: x.exp(), np.exp, (9 * np.log(2) + 1) * u)
        add(f"log_{n}", [pos], lambda x: x.log(), np.log, 4 * u)
        add(f"sqrt_{n}", [pos], lambda x: x.sqrt(), np.sqrt, 2 * u)

# integer wraparound where C defines it (or gcc/clang implement it as two's complement: narrowing conversions)
for dt in (dtypes.uint8, dtypes.int8):
    add(f"wrap_{dt.name}", [np.array([100, 127, 0, 3], np_dt(dt)), np.array([100, 1, 1, 127], np_dt(dt))],
        lambda x, y: (x + y, x * y, x - y), lambda x, y: (x + y, x * y, x - y))


# casts between every pair: float->int truncates toward zero, ->bool is != 0, int->narrower int wraps. The
# inputs stay where every conversion is defined: non-negative floats below 128 for unsigned and int8 targets.
def cast_inputs(src: DType, dst: DType) -> np.ndarray:
    if dtypes.is_bool(src):
        return np.array([True, False, True, True, False])
    if dtypes.is_float(src):
        x = [0.0, 0.5, 1.0, 1.75, 2.5, 7.25, 99.75, 120.0, 0.1, 3.3, -0.0]
        if dtypes.is_float(dst) or dtypes.is_bool(dst) or dst in (dtypes.int32, dtypes.int64):
            x += [-0.5, -1.75, -120.0, -3.3, 1001.0, 65504.0, 1e-3]
        return np.array(x, np.float64).astype(np_dt(src))
    lo, hi = dtypes.min(src), dtypes.max(src)
    x = [0, 1, 2, 7, 100, 127, 255, 1001, -1, -7, -100, -128, -1001, 100000, -100000]
    return np.array([v for v in x if lo <= v <= hi], np.int64).astype(np_dt(src))


for src in MATRIX:
    for dst in MATRIX:
        if src != dst:
            add(f"cast_{src.name}_to_{dst.name}", [cast_inputs(src, dst)], lambda x, d=dst: x.cast(d),
                lambda x, d=dst: x.astype(np_dt(d)))

# non-finite and extreme values through the float dtypes (70000 overflows float16 to inf, as intended)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 70000.0, -1e-3, 3.0]
for dt in FLOATS:
    with np.errstate(over="ignore"):
        sx, sy = np.array(SPECIAL).astype(np_dt(dt)), np.array(SPECIAL[::-1]).astype(np_dt(dt))
    for to in (*FLOATS, dtypes.bool):
        if to != dt:
            add(f"special_cast_{dt.name}_to_{to.name}", [sx], lambda x, d=to: x.cast(d),
                lambda x, d=to: x.astype(np_dt(d)))
    add(f"special_arith_{dt.name}", [sx, sy], lambda x, y: (x + y, x * y, x < y, x == y, (x != x).where(x, y)),
        lambda x, y: (x + y, x * y, x < y, x == y, np.where(x != x, x, y)))



def bitcast(t: Tensor, dt: DType) -> Tensor:
    """The bits of `t` read as `dt`, built as the bare IR node so these dtype tests do not depend on
    Tensor.bitcast."""
    return Tensor(UOp(Op.BITCAST, dt, (t.uop,)), t.device)


# bitcasts between equal-size dtypes of a non-contiguous view, against numpy's view of the same elements
BITCASTS = ((dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.float64, dtypes.int64),
            (dtypes.float16, dtypes.int16), (dtypes.bfloat16, dtypes.uint16), (dtypes.float16, dtypes.bfloat16),
            (dtypes.int8, dtypes.uint8), (dtypes.int32, dtypes.uint32))
for j, (p, q) in enumerate(BITCASTS):
    for src, dst in ((p, q), (q, p)):
        bits = np.random.default_rng(j).integers(0, 256, size=5 * 6 * src.itemsize, dtype=np.uint8)
        x = values(src, (5, 6), 1000 + j) if dtypes.is_float(src) else bits.view(np_dt(src)).reshape(5, 6)
        add(f"bitcast_{src.name}_to_{dst.name}", [x], lambda t, d=dst: bitcast(t.T.flip(0), d),
            lambda a, d=dst: np.ascontiguousarray(a.T[::-1]).view(np_dt(d)))


# ---------------------------------------------------------------- the wider op surface over floats and integers
def seeded_values(dt: DType, shape: tuple[int, ...], name: str, low: float, high: float) -> np.ndarray:
    """Inputs of `dt` uniform in [low, high] (bools: either), from a generator seeded by `name` (crc32)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if dtypes.is_bool(dt):
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtypes.is_int(dt):
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtypes.to_np(dt))
    return rng.uniform(low, high, size=shape).astype(dtypes.to_np(dt))


def add_op(name: str, dt: DType, fn: Callable, ref: Callable, *shapes: tuple[int, ...], low=-3.0,
           high=3.0) -> None:
    """A case of the wider op surface: `ref` sees float inputs widened to float64; a float result is compared
    within 8 units of roundoff of `dt`, any other by value, exactly."""
    inputs = [seeded_values(dt, s, f"{name}{i}", low, high) for i, s in enumerate(shapes or ((5, 7),))]
    wide = (lambda *xs: ref(*(x.astype(np.float64) for x in xs))) if dtypes.is_float(dt) else ref
    tol = 8 * UNIT_ROUNDOFF[dt] if dtypes.is_float(dt) else 0.0
    add(name, inputs, fn, wide, rtol=tol, by_value=True, atol=tol)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


for dt in FLOATS:
    n = dt.name
    add_op(f"exp2_{n}", dt, lambda x: x.exp2(), np.exp2)
    add_op(f"log2_{n}", dt, lambda x: x.log2(), np.log2, low=0.25, high=6)
    add_op(f"sin_{n}", dt, lambda x: x.sin(), np.sin)
    add_op(f"cos_{n}", dt, lambda x: x.cos(), np.cos)
    add_op(f"tanh_{n}", dt, lambda x: x.tanh(), np.tanh)
    add_op(f"sigmoid_{n}", dt, lambda x: x.sigmoid(), _sigmoid)
    add_op(f"silu_{n}", dt, lambda x: x.silu(), lambda x: x * _sigmoid(x))
    add_op(f"gelu_{n}", dt, lambda x: x.gelu(),  # torch's approximate="tanh"
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))))
    add_op(f"rsqrt_{n}", dt, lambda x: x.rsqrt(), lambda x: 1 / np.sqrt(x), low=0.25, high=6)
    add_op(f"abs_{n}", dt, lambda x: x.abs(), np.abs)
    add_op(f"clip_{n}", dt, lambda x: x.clip(-1, 1.5), lambda x: np.clip(x, -1, 1.5))
    add_op(f"pow_{n}", dt, lambda x, y: x ** y, lambda x, y: x ** y, (5, 7), (5, 7), low=0.5, high=2)
    add_op(f"floordiv_{n}", dt, lambda x, y: x // y, lambda x, y: np.floor(x / y), (5, 7), (5, 7), low=0.5, high=4)
    add_op(f"log_softmax_{n}", dt, lambda x: x.log_softmax(),
        lambda x: x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)))
    add_op(f"var_{n}", dt, lambda x: x.var(axis=1), lambda x: x.var(axis=1, ddof=1))
    add_op(f"prod_{n}", dt, lambda x: x.prod(axis=0), lambda x: x.prod(axis=0), (4, 6), low=0.5, high=1.5)
    add_op(f"argmax_{n}", dt, lambda x: x.argmax(axis=1), lambda x: x.argmax(axis=1))
    add_op(f"cat_{n}", dt, lambda x, y: x.cat(y, dim=0), lambda x, y: np.concatenate([x, y]), (2, 3), (4, 3))

for dt in INTS:
    n, signed = dt.name, not dtypes.is_unsigned(dt)
    lo, hi = (-100, 100) if signed else (0, 200)
    add_op(f"floordiv_{n}", dt, lambda x, y: x // y, lambda x, y: x // y, (5, 7), (1, 7), low=1, high=hi)
    add_op(f"mod_{n}", dt, lambda x, y: x % y, lambda x, y: x % y, (5, 7), (1, 7), low=1, high=hi)
    if signed:
        add_op(f"floordiv_neg_{n}", dt, lambda x, y: x // (-y), lambda x, y: x // (-y), (5, 7), (1, 7), low=1, high=9)
        add_op(f"mod_neg_{n}", dt, lambda x, y: x % (-y), lambda x, y: x % (-y), (5, 7), (1, 7), low=1, high=9)
        add_op(f"abs_{n}", dt, lambda x: x.abs(), np.abs, low=lo, high=hi)
    add_op(f"and_{n}", dt, lambda x, y: x & y, lambda x, y: x & y, (5, 7), (5, 7), low=lo, high=hi)
    add_op(f"or_{n}", dt, lambda x, y: x | y, lambda x, y: x | y, (5, 7), (5, 7), low=lo, high=hi)
    add_op(f"xor_{n}", dt, lambda x, y: x ^ y, lambda x, y: x ^ y, (5, 7), (5, 7), low=lo, high=hi)
    add_op(f"invert_{n}", dt, lambda x: ~x, np.invert, low=lo, high=hi)
    add_op(f"shl_{n}", dt, lambda x: x << 2, lambda x: x << 2, low=0, high=20)
    add_op(f"shr_{n}", dt, lambda x: x >> 1, lambda x: x >> 1, low=0, high=hi)
    add_op(f"clip_{n}", dt, lambda x: x.clip(3, 50), lambda x: np.clip(x, 3, 50), low=lo, high=hi)
    add_op(f"prod_{n}", dt, lambda x: x.prod(axis=0), lambda x: x.prod(axis=0), (3, 5), low=1, high=3)
    add_op(f"argmin_{n}", dt, lambda x: x.argmin(axis=0), lambda x: x.argmin(axis=0), low=lo, high=hi)
    add_op(f"any_{n}", dt, lambda x: x.any(axis=1), lambda x: x.any(axis=1), low=0, high=1)
    add_op(f"all_{n}", dt, lambda x: x.all(axis=1), lambda x: x.all(axis=1), low=0, high=1)
    add_op(f"stack_{n}", dt, lambda x, y: x.stack(y, dim=1), lambda x, y: np.stack([x, y], 1), (2, 3), (2, 3))

add_op("and_bool", dtypes.bool, lambda x, y: x & y, lambda x, y: x & y, (5, 7), (5, 7))
add_op("xor_bool", dtypes.bool, lambda x, y: x ^ y, lambda x, y: x ^ y, (5, 7), (5, 7))
add_op("invert_bool", dtypes.bool, lambda x: ~x, np.invert)
add_op("any_bool", dtypes.bool, lambda x: x.any(axis=0), lambda x: x.any(axis=0))


DEVICE_RESULTS: dict[str, dict[str, object]] = {}


def _results(device: str) -> dict[str, object]:
    """Build every case on `device` and realize them all at once (one compile per device)."""
    if device not in DEVICE_RESULTS:
        built: dict[str, object] = {}
        for name, case in CASES.items():
            try:
                built[name] = case.fn(*(Tensor(x, device=device) for x in case.inputs))
            except Exception as e:  # noqa: BLE001 - reported by the case's own test
                built[name] = e
        tensors = [t for out in built.values() if not isinstance(out, Exception)
                   for t in (out if isinstance(out, tuple) else (out,))]
        tensors[0].realize(*tensors[1:])
        DEVICE_RESULTS[device] = built
    return DEVICE_RESULTS[device]


def check(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, by_value: bool) -> None:
    """`got` equals numpy's `want`: within rtol/atol where either is set and `want` holds floats (bfloat16 too,
    whose numpy kind is "V"), else exactly (and of `want`'s dtype unless `by_value`)."""
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if not (rtol or atol) or want.dtype.kind in "iub":
        # exact, compared as values in float64 (bfloat16 and float16 widen exactly); NaN equals NaN
        assert by_value or got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
        np.testing.assert_array_equal(np.signbit(got.astype(np.float64)), np.signbit(want.astype(np.float64)))
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_dtype_parity(device: str, name: str) -> None:
    case = CASES[name]
    got = _results(device)[name]
    if isinstance(got, Exception):
        raise got
    with np.errstate(all="ignore"):  # the special cases overflow and meet NaN on purpose, x // 0 is 0
        want = case.ref(*case.inputs)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                    strict=True):
        check(g.numpy(), w, case.rtol, case.atol, case.by_value)


def test_matrix_covers_every_dtype_and_cast() -> None:
    for dt in MATRIX:
        assert f"add_{dt.name}" in CASES and f"sum_axis_{dt.name}" in CASES and f"views_{dt.name}" in CASES
    assert sum(name.startswith("cast_") for name in CASES) == len(MATRIX) * (len(MATRIX) - 1)


def test_bfloat16_is_ml_dtypes() -> None:
    assert np_dt(dtypes.bfloat16) == np.dtype(ml_dtypes.bfloat16)
