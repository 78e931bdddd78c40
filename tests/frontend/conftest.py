"""Fixtures for front-end tests: every available compiled device, and a numpy comparison helper."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.counters import GlobalCounters

COMPILED_DEVICES = ("CPU", "OPENCL")


def _available(name: str) -> tuple[bool, str]:
    from tolk_core.plugins import Device
    try:
        Device[name]
    except Exception as e:  # noqa: BLE001 - the reason is the skip message
        return False, f"{name} unavailable here: {e}"
    return True, ""


@pytest.fixture(params=COMPILED_DEVICES)
def device(request) -> str:
    ok, why = _available(request.param)
    if not ok:
        pytest.skip(why)
    return request.param


@pytest.fixture
def kernels():
    """Counts kernels launched inside a block: `with kernels() as k: ...; k.count`."""
    class Counter:
        def __enter__(self):
            self.start = GlobalCounters.kernels_launched
            return self

        def __exit__(self, *exc):
            self.count = GlobalCounters.kernels_launched - self.start
    return Counter


def close(got, want, dtype=np.float32) -> None:
    """Assert tolk's result equals numpy's: exact for integers and bools, a stated tolerance for floats."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def np_mlp(x, w1, b1, w2, b2):
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def np_attention(q, k, v):
    s = (q @ k.transpose(0, 2, 1)) / 8
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v
