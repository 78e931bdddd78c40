"""Compares and selects on vector lanes in the CPU dialect (tolk_cpu/renderer.py `_vector_compare`,
`_vector_select`): gcc's vector compare narrowed to 0/1 bool lanes, a `where` as a bitwise select under a -1/0
mask. They appear where a register-tiled reduction's epilogue compares (a matmul followed by GELU, a clamp), and
must give numpy's values lane for lane: NaN (compares false, `!=` true), +-inf, the sign of a zero a select
passes through or a scalar branch supplies, unsigned lanes past 2^31, float64 and int64 lanes."""
from __future__ import annotations

import numpy as np
import pytest
from tolk_cpu.renderer import CRenderer

from tolk_core import Tensor
from tolk_core.codegen import generate
from tolk_core.testing import kernels


def _float_inputs(dtype) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((12, 16)).astype(dtype), rng.standard_normal((16, 40)).astype(dtype)
    a[0, 0], a[1, 3], a[2, 5] = np.nan, np.inf, -np.inf  # rows of NaN, +inf and -inf sums (and NaN where they meet)
    b[:, 7] = 0.0  # a column of +0.0 sums
    return a, b


def _tolk_epilogue(mm: Tensor) -> list[Tensor]:
    """Selects over compares: a pass-through, computed branches, a scalar branch (-0.0), `==` and `!=`."""
    neg = mm < 0
    return [neg.where(mm * 2, mm), neg.where(mm * -1, -0.0), (mm == mm).where(mm != mm, mm)]


def _numpy_epilogue(mm: np.ndarray) -> list[np.ndarray]:
    neg = mm < 0
    zero = np.array(-0.0, mm.dtype)
    return [np.where(neg, mm * 2, mm), np.where(neg, mm * -1, zero), np.where(mm == mm, mm != mm, mm).astype(mm.dtype)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_selects_in_a_matmul_epilogue_match_numpy_lane_for_lane(dtype):
    a, b = _float_inputs(dtype)
    with np.errstate(invalid="ignore"):
        want_mm = a @ b
        wants = _numpy_epilogue(want_mm)
    outs = _tolk_epilogue(Tensor(a) @ Tensor(b))
    outs[0].realize(*outs[1:])
    for got, want in zip(outs, wants, strict=True):
        got = got.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
        assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.0 where numpy has it, +0.0 elsewhere


def test_the_epilogue_compares_and_selects_on_vectors():
    """The plan above is what runs: the kernel's epilogue uses the native compare and select (no lane loop)."""
    srcs = [generate(c.src[0], CRenderer()).source
            for c in kernels.build(lambda x, y: (lambda m: (m < 0).where(m * 2, m))(x @ y),
                                   ((12, 16), "float32"), ((16, 40), "float32")).calls]
    assert any("__builtin_convertvector" in s and "&" in s for s in srcs)
    assert not any("_r[_l] = (" in s and "<" in s.split("_r[_l] = (")[1][:40] for s in srcs)


@pytest.mark.parametrize("np_dtype,big", [(np.int32, 2 ** 30), (np.uint32, 3 * 2 ** 30), (np.int64, 2 ** 40)])
def test_integer_lanes_compare_and_select_as_numpy(np_dtype, big):
    """An integer reduction tiled in vector lanes, then a clamp: unsigned lanes past 2^31 compare unsigned."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 1000, (10, 12)).astype(np_dtype)
    a[3, 0] = big  # a row whose sums pass 2^31 (uint32) / 2^40 (int64)
    w = rng.integers(0, 3, (12, 24)).astype(np_dtype)
    limit = np_dtype(big // 2)
    s = (a[:, :, None] * w[None]).sum(1).astype(np_dtype)  # summed as numpy sums (64-bit), then the lanes' type
    want = np.where(s < limit, s, limit)
    t = (Tensor(a).reshape(10, 12, 1) * Tensor(w).reshape(1, 12, 24)).sum(1).cast(np_dtype)
    got = (t < int(limit)).where(t, int(limit)).numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want)
