"""JIT tests: the memory-plan checker runs on every capture bound during a test (the `device` fixture is the
shared one in tests/conftest.py)."""
from __future__ import annotations

import pytest

from tests.engine.plan_check import check_plan
from tolk_core.engine import jit as engine_jit


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
