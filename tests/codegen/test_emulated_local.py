"""Kernel-local arrays (group-reduction partials in shared memory, row arrays) of emulated dtypes: half types
are held as float there, so OpenCL without cl_khr_fp16 builds them, and values equal numpy's."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tolk_core import Tensor


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_half_reductions_and_row_arrays(device, dtype):
    rng = np.random.default_rng(0)
    rows, long, sm = (rng.standard_normal(s).astype(dtype) for s in ((4, 300), (1 << 16,), (64, 1000)))
    np.testing.assert_array_equal(Tensor(rows, device=device).max(1).numpy(), rows.max(1))  # one group per row
    assert Tensor(long, device=device).max().numpy() == long.max()                          # partials meet
    x = sm.astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    got = Tensor(sm, device=device).softmax(-1).numpy().astype(np.float32)                  # a row array
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), atol=2e-3 if dtype is np.float16 else 1e-2)
