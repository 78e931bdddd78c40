"""Float `//` and `%` equal numpy's floor_divide and mod bit for bit (sign of zero included), edge cases too:
zero divisors, infinities, NaN, signed zeros, and quotients that round up to an integer."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import Tensor

EDGES = [(0., 0.), (5., 0.), (-5., 3.), (5., -3.), (np.inf, 2.), (3., np.inf), (np.nan, 1.), (1e30, 3.), (-0.0, 2.),
         (0.0, -2.), (-3., np.inf), (3., -np.inf), (1.0, 0.1), (0.3, 0.1), (7.0, 0.7), (-7.0, 0.7), (1e-30, 3.)]


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    nan = np.isnan(want)
    return bool(np.array_equal(np.isnan(got), nan) and np.array_equal(got[~nan], want[~nan])
                and np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan])))


def _check(dev: str, dtype) -> None:
    rng = np.random.default_rng(3)
    a = np.concatenate([[x for x, _ in EDGES], rng.standard_normal(300) * 100]).astype(dtype)
    b = np.concatenate([[y for _, y in EDGES], rng.standard_normal(300)]).astype(dtype)
    ta, tb = Tensor(a, device=dev), Tensor(b, device=dev)
    with np.errstate(all="ignore"):
        assert _same((ta // tb).numpy(), np.floor_divide(a, b))
        assert _same((ta % tb).numpy(), np.mod(a, b))
        assert _same((ta % 0.7).numpy(), np.mod(a, dtype(0.7)))
        assert _same((2.5 // tb).numpy(), np.floor_divide(dtype(2.5), b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_floordiv_and_mod_match_numpy(device, dtype):
    _check(device, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reference_device_agrees(dtype):
    _check("PYTHON", dtype)
