"""The wider op surface over the dtype matrix (test_ops_parity covers float32/int32/bool in depth; here every
op meets float16, bfloat16, float64 and the narrow and wide integers), per device, realized together.

Tolerances: integer and bool results are exact. Float results are compared with a float64 numpy reference of
the same inputs, within 8 units of roundoff of the dtype (relative and absolute): a composite op rounds to the
dtype after each of its few primitive steps (float16/bfloat16 compute in float32 and round per operation).
"""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from tests.frontend.helpers import realized_case
from tolk_core.ir.dtype import DType, dtypes

FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
INTS = (dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64)
ROUNDOFF = {dtypes.float16: 2.0 ** -11, dtypes.bfloat16: 2.0 ** -8, dtypes.float32: 2.0 ** -24,
            dtypes.float64: 2.0 ** -53}


@dataclass
class Case:
    dtype: DType
    inputs: list[np.ndarray]
    fn: Callable   # on Tensors
    ref: Callable  # on float64 / int64 numpy arrays


CASES: dict[str, Case] = {}


def _values(dt: DType, shape: tuple[int, ...], name: str, low: float, high: float) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if dtypes.is_bool(dt):
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtypes.is_int(dt):
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtypes.to_np(dt))
    return rng.uniform(low, high, size=shape).astype(dtypes.to_np(dt))


def add(name: str, dt: DType, fn: Callable, ref: Callable, *shapes: tuple[int, ...], low=-3.0, high=3.0) -> None:
    CASES[name] = Case(dt, [_values(dt, s, f"{name}{i}", low, high) for i, s in enumerate(shapes or ((5, 7),))],
                       fn, ref)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


for dt in FLOATS:
    n = dt.name
    add(f"exp2_{n}", dt, lambda x: x.exp2(), np.exp2)
    add(f"log2_{n}", dt, lambda x: x.log2(), np.log2, low=0.25, high=6)
    add(f"sin_{n}", dt, lambda x: x.sin(), np.sin)
    add(f"cos_{n}", dt, lambda x: x.cos(), np.cos)
    add(f"tanh_{n}", dt, lambda x: x.tanh(), np.tanh)
    add(f"sigmoid_{n}", dt, lambda x: x.sigmoid(), _sigmoid)
    add(f"silu_{n}", dt, lambda x: x.silu(), lambda x: x * _sigmoid(x))
    add(f"gelu_{n}", dt, lambda x: x.gelu(),  # torch's approximate="tanh"
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))))
    add(f"rsqrt_{n}", dt, lambda x: x.rsqrt(), lambda x: 1 / np.sqrt(x), low=0.25, high=6)
    add(f"abs_{n}", dt, lambda x: x.abs(), np.abs)
    add(f"clip_{n}", dt, lambda x: x.clip(-1, 1.5), lambda x: np.clip(x, -1, 1.5))
    add(f"pow_{n}", dt, lambda x, y: x ** y, lambda x, y: x ** y, (5, 7), (5, 7), low=0.5, high=2)
    add(f"floordiv_{n}", dt, lambda x, y: x // y, lambda x, y: np.floor(x / y), (5, 7), (5, 7), low=0.5, high=4)
    add(f"log_softmax_{n}", dt, lambda x: x.log_softmax(),
        lambda x: x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)))
    add(f"var_{n}", dt, lambda x: x.var(axis=1), lambda x: x.var(axis=1, ddof=1))
    add(f"prod_{n}", dt, lambda x: x.prod(axis=0), lambda x: x.prod(axis=0), (4, 6), low=0.5, high=1.5)
    add(f"argmax_{n}", dt, lambda x: x.argmax(axis=1), lambda x: x.argmax(axis=1))
    add(f"cat_{n}", dt, lambda x, y: x.cat(y, dim=0), lambda x, y: np.concatenate([x, y]), (2, 3), (4, 3))

for dt in INTS:
    n, signed = dt.name, not dtypes.is_unsigned(dt)
    lo, hi = (-100, 100) if signed else (0, 200)
    add(f"floordiv_{n}", dt, lambda x, y: x // y, lambda x, y: x // y, (5, 7), (1, 7), low=1, high=hi)
    add(f"mod_{n}", dt, lambda x, y: x % y, lambda x, y: x % y, (5, 7), (1, 7), low=1, high=hi)
    if signed:
        add(f"floordiv_neg_{n}", dt, lambda x, y: x // (-y), lambda x, y: x // (-y), (5, 7), (1, 7), low=1, high=9)
        add(f"mod_neg_{n}", dt, lambda x, y: x % (-y), lambda x, y: x % (-y), (5, 7), (1, 7), low=1, high=9)
        add(f"abs_{n}", dt, lambda x: x.abs(), np.abs, low=lo, high=hi)
    add(f"and_{n}", dt, lambda x, y: x & y, lambda x, y: x & y, (5, 7), (5, 7), low=lo, high=hi)
    add(f"or_{n}", dt, lambda x, y: x | y, lambda x, y: x | y, (5, 7), (5, 7), low=lo, high=hi)
    add(f"xor_{n}", dt, lambda x, y: x ^ y, lambda x, y: x ^ y, (5, 7), (5, 7), low=lo, high=hi)
    add(f"invert_{n}", dt, lambda x: ~x, np.invert, low=lo, high=hi)
    add(f"shl_{n}", dt, lambda x: x << 2, lambda x: x << 2, low=0, high=20)
    add(f"shr_{n}", dt, lambda x: x >> 1, lambda x: x >> 1, low=0, high=hi)
    add(f"clip_{n}", dt, lambda x: x.clip(3, 50), lambda x: np.clip(x, 3, 50), low=lo, high=hi)
    add(f"prod_{n}", dt, lambda x: x.prod(axis=0), lambda x: x.prod(axis=0), (3, 5), low=1, high=3)
    add(f"argmin_{n}", dt, lambda x: x.argmin(axis=0), lambda x: x.argmin(axis=0), low=lo, high=hi)
    add(f"any_{n}", dt, lambda x: x.any(axis=1), lambda x: x.any(axis=1), low=0, high=1)
    add(f"all_{n}", dt, lambda x: x.all(axis=1), lambda x: x.all(axis=1), low=0, high=1)
    add(f"stack_{n}", dt, lambda x, y: x.stack(y, dim=1), lambda x, y: np.stack([x, y], 1), (2, 3), (2, 3))

add("and_bool", dtypes.bool, lambda x, y: x & y, lambda x, y: x & y, (5, 7), (5, 7))
add("xor_bool", dtypes.bool, lambda x, y: x ^ y, lambda x, y: x ^ y, (5, 7), (5, 7))
add("invert_bool", dtypes.bool, lambda x: ~x, np.invert)
add("any_bool", dtypes.bool, lambda x: x.any(axis=0), lambda x: x.any(axis=0))

@pytest.mark.parametrize("name", sorted(CASES))
def test_op_over_dtype(device: str, name: str) -> None:
    case = CASES[name]
    got = realized_case(CASES, device, name, inputs=lambda _, c: c.inputs)
    wide = [x.astype(np.float64) if dtypes.is_float(case.dtype) else x for x in case.inputs]
    with np.errstate(all="ignore"):
        want = np.asarray(case.ref(*wide))
    out = got.numpy()
    assert out.shape == want.shape
    if dtypes.is_float(case.dtype) and want.dtype.kind == "f":
        tol = 8 * ROUNDOFF[case.dtype]
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(out, want.astype(out.dtype))
