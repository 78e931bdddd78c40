"""Sums, products, means and matmuls of float16/bfloat16 give their input's dtype (numpy and torch do), computed
in float32: each result equals numpy's float32 computation rounded once to the half type."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tolk_core import Tensor, dtypes


@pytest.mark.parametrize("npdt,dt", [(np.float16, dtypes.float16), (ml_dtypes.bfloat16, dtypes.bfloat16)],
                         ids=["float16", "bfloat16"])
def test_half_reductions_keep_dtype_and_round_once(device, npdt, dt):
    a = np.random.default_rng(0).standard_normal((8, 100)).astype(npdt)
    f = a.astype(np.float32)
    t = Tensor(a, device=device)
    p = Tensor((a[:, :6] * 0 + 1.25).astype(npdt), device=device)
    cases = [(t.sum(1), f.sum(1)), (t.sum(), f.sum()), (t.mean(0), f.mean(0)), (t @ t.T, f @ f.T),
             (p.prod(1), np.full(8, 1.25 ** 6, np.float32))]
    for got, want in cases:
        assert got.dtype == dt
        np.testing.assert_allclose(got.numpy().astype(np.float32), want.astype(npdt).astype(np.float32),
                                   rtol=0, atol=float(np.abs(want).max()) * 2.0 ** -7)  # sums' order differs
    assert t.sum(1, dtype=dtypes.float32).dtype == dtypes.float32  # an explicit dtype is kept
