"""Fixtures of the multi-device tests: four virtual CPU devices (TOLK_CPU_DEVICES=4) on any machine."""
from __future__ import annotations

import pytest

DEVICES4 = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")


@pytest.fixture
def cpus4(monkeypatch):
    """The registry rebuilt with TOLK_CPU_DEVICES=4 (CPU:0 .. CPU:3), and rebuilt without it afterwards.
    Yields the canonical names (CPU:0 is "CPU")."""
    from tolk_core import plugins
    monkeypatch.setenv("TOLK_CPU_DEVICES", "4")
    plugins.reset()
    yield ("CPU", "CPU:1", "CPU:2", "CPU:3")
    monkeypatch.delenv("TOLK_CPU_DEVICES")
    plugins.reset()
