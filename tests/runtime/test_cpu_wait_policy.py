"""The CPU device's OpenMP wait settings (plugins/tolk_cpu): threads sleep at once unless CPU_SPIN_COUNT asks
them to spin; the environment's own OMP_WAIT_POLICY / GOMP_SPINCOUNT win. libgomp reads them when it loads, so
each case runs in a fresh process that opens the device and prints what the kernels' runtime will read."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = ("import os, json; from tolk_core.plugins import Device; Device['CPU']; "
          "print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}))")


def _opened(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                              "TOLK_CPU_SPIN_COUNT")}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=base | env, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env,want", [
    ({}, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}),
    ({"TOLK_CPU_SPIN_COUNT": "30000"}, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "30000"}),
    ({"TOLK_CPU_SPIN_COUNT": "30000", "GOMP_SPINCOUNT": "7"}, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "7"}),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None}),
])
def test_spin_count_setting_reaches_libgomp_environment(env, want):
    assert _opened(**env) == want


def test_a_negative_spin_count_is_refused():
    env = {k: v for k, v in os.environ.items()} | {"TOLK_CPU_SPIN_COUNT": "-1"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "CPU_SPIN_COUNT" in out.stderr
