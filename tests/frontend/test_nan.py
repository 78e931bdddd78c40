"""NaN propagates through max-like operations as in numpy: `maximum`, `minimum`, `max`, `min` (a NaN anywhere in
a reduced row makes the row NaN), on rows small and large (vector lanes, threads and split reductions meet)."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import Tensor


def _with_nans(shape, spots, dtype=np.float32) -> np.ndarray:
    x = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    for s in spots:
        x[s] = np.nan
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_maximum_and_minimum_keep_nan_of_either_operand(device, dtype):
    a = _with_nans((64,), [0, 5, 63], dtype)
    b = _with_nans((64,), [1, 5, 40], dtype)[::-1].copy()
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    with np.errstate(invalid="ignore"):
        for got, want in [(ta.maximum(tb), np.maximum(a, b)), (tb.maximum(ta), np.maximum(b, a)),
                          (ta.minimum(tb), np.minimum(a, b)), (tb.minimum(ta), np.minimum(b, a)),
                          (ta.maximum(float("nan")), np.maximum(a, np.nan)), (ta.relu(), np.maximum(a, 0))]:
            np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("shape,spots,axis", [
    ((4, 300), [(1, 7), (2, 299), (3, 0)], 1),      # rows: NaN first, in the middle, last
    ((300, 4), [(7, 1), (299, 2)], 0),              # columns
    ((1 << 20,), [(12345,)], None),                 # one long row: vector lanes (and threads) meet at the end
    ((1 << 23,), [((1 << 23) - 1,)], None),         # split in two kernels: the NaN is in the second stage's input
])
def test_max_and_min_reductions_keep_nan(device, shape, spots, axis):
    x = _with_nans(shape, spots)
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(t.max(axis).numpy(), np.max(x, axis))
    np.testing.assert_array_equal(t.min(axis).numpy(), np.min(x, axis))
    clean = np.nan_to_num(x, nan=0.5)
    np.testing.assert_array_equal(Tensor(clean, device=device).max(axis).numpy(), np.max(clean, axis))


def test_reference_device_agrees():
    x = _with_nans((3, 50), [(0, 3), (2, 49)])
    np.testing.assert_array_equal(Tensor(x, device="PYTHON").max(1).numpy(), np.max(x, 1))
    np.testing.assert_array_equal(Tensor(x, device="PYTHON").maximum(Tensor(x[::-1].copy(), device="PYTHON"))
                                  .numpy(), np.maximum(x, x[::-1]))
