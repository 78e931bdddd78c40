"""expand_bitcast on real data: a bitcast between types of different sizes equals numpy's `.view()`, for every
widening and narrowing pair, on every available device (all pairs of a device realized together).

Results are compared bit for bit, with one allowance: where a device emulates float16 through float32 (OpenCL
without cl_khr_fp16), a float16 NaN stays a NaN but not its payload. So float16 lanes that are NaN (in the source
or the result) must be NaN on both sides, and every other lane must carry exactly numpy's bits.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tolk_core.frontend.tensor import Tensor
from tolk_core.schedule.prepare import rule_fires

TYPES = (np.uint8, np.int16, np.int32, np.float16, np.float32, np.int64, np.float64)
PAIRS = [(a, b) for a, b in itertools.product(TYPES, TYPES) if np.dtype(a).itemsize != np.dtype(b).itemsize]
_RESULTS: dict[str, list[Tensor]] = {}


def _data(src) -> np.ndarray:
    raw = np.random.default_rng(np.dtype(src).itemsize).integers(0, 256, size=3 * 16 * np.dtype(src).itemsize)
    return raw.astype(np.uint8).view(src).reshape(3, 16)


def _results(device: str) -> list[Tensor]:
    if device not in _RESULTS:
        fired = rule_fires["expand_bitcast"]
        outs = [Tensor(_data(a), device=device).bitcast(np.dtype(b).name) for a, b in PAIRS]
        outs[0].realize(*outs[1:])
        assert rule_fires["expand_bitcast"] >= fired + len(PAIRS)
        _RESULTS[device] = outs
    return _RESULTS[device]


@pytest.mark.parametrize("pair", range(len(PAIRS)), ids=[f"{np.dtype(a).name}->{np.dtype(b).name}" for a, b in PAIRS])
def test_size_changing_bitcast_equals_numpy_view(device: str, pair: int) -> None:
    src, dst = PAIRS[pair]
    got, want = _results(device)[pair].numpy(), _data(src).view(dst)
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.float16 not in (src, dst):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        return
    halves_got, halves_want = got.view(np.uint16).reshape(-1), want.view(np.uint16).reshape(-1)
    nan = np.isnan(halves_want.view(np.float16))
    np.testing.assert_array_equal(halves_got[~nan], halves_want[~nan])
    assert np.isnan(halves_got[nan].view(np.float16)).all()
