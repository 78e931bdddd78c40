"""Fixtures for front-end tests: every available compiled device, and a numpy comparison helper."""
from __future__ import annotations

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
