"""Liveness: a plugin whose import or probe never returns costs a bounded wait, is reported with the reason, and
leaves every other device working; an overrun probe is cancelled; the time limits are validated."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from tolk_core import config
from tolk_core.errors import ConfigError
from tolk_core.plugins import PluginWarning, run_probe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

_PROGRAM = """
import json, time
t0 = time.perf_counter()
import numpy as np
from tolk_core import Tensor
from tolk_core.plugins import get_registry
got = (Tensor(np.arange(6, dtype=np.float32), device="CPU") * 2 + 1).numpy().tolist()
p = next(p for p in get_registry().plugins if p.dist == "tolk-hang-import")
print(json.dumps({"got": got, "state": p.state, "reason": p.reason, "traceback": p.traceback,
                  "s": time.perf_counter() - t0}))
"""


def test_hanging_import_is_broken_while_a_cpu_program_runs(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLK_") or k == "TOLK_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURES / "hang_import"), env.get("PYTHONPATH", "")])
    env["TOLK_PLUGIN_IMPORT_TIMEOUT"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-c", _PROGRAM], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.perf_counter() - t0 < 30
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["got"] == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    assert out["state"] == "broken"
    assert out["reason"].startswith("import did not finish within 1s (TOLK_PLUGIN_IMPORT_TIMEOUT)")
    assert out["traceback"].startswith("Stuck at") and "tolk_hang_import/plugin.py" in out["traceback"]
    assert "threading.Event().wait()" in out["traceback"]  # the line it waits on, for `tolk devices -v`


def test_overrun_probe_is_cancelled_and_stops_running():
    spins = [0]

    def spin():
        while True:
            spins[0] += 1
    t0 = time.perf_counter()
    a = run_probe(spin, 0.2)
    assert not a.ok and a.reason == "probe timed out after 0.2s (cancelled)" and time.perf_counter() - t0 < 2
    deadline = time.perf_counter() + 5
    while any(t.name == "tolk-probe" for t in threading.enumerate()) and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "tolk-probe" for t in threading.enumerate()), "the overrun probe is still running"
    before = spins[0]
    time.sleep(0.05)
    assert spins[0] == before  # it no longer takes the process's time


def test_slow_probe_warns_naming_it(monkeypatch):
    from tolk_core.plugins import registry
    from tolk_core.plugins.specs import Availability
    monkeypatch.setattr(registry, "PROBE_SLOW_S", 0.1)  # the rule, not the 1 s: keeps the test short

    def slow():
        time.sleep(0.2)
        return Availability(True, "slow but fine")
    with pytest.warns(PluginWarning, match=r"the probe .*slow.* took 0\.\d\d s \(more than 0.1 s\).*make the probe"):
        assert run_probe(slow, 5).ok
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)
        assert run_probe(lambda: Availability(True, "fast"), 5).ok  # a fast probe says nothing


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
@pytest.mark.parametrize("setting", ["PROBE_TIMEOUT", "PLUGIN_IMPORT_TIMEOUT"])
def test_time_limits_are_validated(tolk_env, monkeypatch, setting, value):
    monkeypatch.setenv(f"TOLK_{setting}", value)
    config.reset()
    with pytest.raises(ConfigError, match=rf"TOLK_{setting}: {setting} = '{value}' .*finite number of seconds "
                                          r"above 0 \(e\.g\. 10\)"):
        config.get(setting)
