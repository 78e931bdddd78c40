"""Fixtures for JIT tests: every compiled device, and the memory-plan checker run on every capture."""
from __future__ import annotations

import pytest

from tests.engine.plan_check import check_plan
from tolk_core.engine import jit as engine_jit

COMPILED_DEVICES = ("CPU", "OPENCL")


def available(name: str) -> tuple[bool, str]:
    from tolk_core.plugins import Device
    try:
        Device[name]
    except Exception as e:  # noqa: BLE001 - the reason is the skip message
        return False, f"{name} unavailable here: {e}"
    return True, ""


@pytest.fixture(params=COMPILED_DEVICES)
def device(request) -> str:
    ok, why = available(request.param)
    if not ok:
        pytest.skip(why)
    return request.param


@pytest.fixture(autouse=True)
def planned_captures(monkeypatch):
    """Every capture bound during a test is checked by the independent plan checker; yields the list of
    (captured jit, (arena bytes, peak live bytes)) for tests that assert on it."""
    seen: list = []
    bind = engine_jit.CapturedJit.bind

    def checked_bind(self, *args, **kwargs):
        bind(self, *args, **kwargs)
        seen.append((self, check_plan(self.linear)))
    monkeypatch.setattr(engine_jit.CapturedJit, "bind", checked_bind)
    yield seen
