"""The CPU device's core keepers (plugins/tolk_cpu/tolk_cpu/keeper.py): after a parallel kernel one thread per worker
core, bound to it, keeps the core from going idle for CPU_KEEP_AWAKE seconds and then sleeps; a keeper whose core
another thread wants leaves it to that thread; CPU_KEEP_AWAKE=0 makes none, nor does a forked child whose kernels
run on one thread. Each case runs in a fresh process (keepers, like libgomp's threads, are per process) and reads
what the OS reports: the threads' names, masks and CPU time (/proc/self/task), and the cores' idle time
(/proc/stat)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
pytestmark = pytest.mark.skipif(len(CORES) < 2 or not os.path.exists("/proc/self/task"),
                                reason="keepers run beside a team of two threads or more, read through Linux's /proc")

_HELPERS = r"""
import json, os, sys, time
import numpy as np
from tolk_core import Tensor

def keepers():
    '''tid -> (its core mask, its seconds on a CPU so far) for each keeper thread of this process'''
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().strip() != "tolk-keeper":
                    continue
            with open(f"/proc/self/task/{t}/status") as f:
                mask = next(ln.split()[1] for ln in f if ln.startswith("Cpus_allowed_list"))
            with open(f"/proc/self/task/{t}/schedstat") as f:
                out[t] = (mask, int(f.read().split()[0]) / 1e9)
        except FileNotFoundError:
            continue
    return out

def busy(cores):
    '''seconds each of `cores` was not idle, so far (/proc/stat, clock ticks)'''
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    with open("/proc/stat") as f:
        for ln in f:
            name, *v = ln.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                v = [int(x) for x in v]
                out[int(name[3:])] = (sum(v[:8]) - v[3] - v[4]) / tick  # all but idle and iowait
    return out

def cpu(ks):
    return sum(s for _, s in ks.values())

a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
ta = Tensor(a).realize()
def matmul():
    '''a parallel kernel (the device's team starts), checked against numpy'''
    assert np.allclose((ta @ ta).numpy(), a @ a, rtol=1e-4, atol=1e-3)
"""


def _run(body: str, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "TOLK_CPU_BIND", "TOLK_DEVICE", "TOLK_CPU_KEEP_AWAKE", "TOLK_CPU_DEVICES")}
    out = subprocess.run([sys.executable, "-c", _HELPERS + body], env=base | {"TOLK_DEVICE": "CPU"} | env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_worker_cores_stay_awake_for_the_window_then_the_keepers_sleep():
    got = _run(r"""
workers = [int(c) for c in sys.argv[1:]] if len(sys.argv) > 1 else sorted(os.sched_getaffinity(0))[1:]
matmul()
b0, k0 = busy(workers), keepers()
time.sleep(0.3)  # inside the window: nothing of this process runs but the keepers
b1, k1 = busy(workers), keepers()
time.sleep(0.5)  # the window closed
k2 = keepers()
time.sleep(0.3)
k3 = keepers()
print(json.dumps({"masks": sorted(m for m, _ in k3.values()),
                  "idle_share": max(1 - (b1[c] - b0[c]) / 0.3 for c in workers),
                  "after": cpu(k3) - cpu(k2)}))
""", TOLK_CPU_KEEP_AWAKE="0.6")
    assert got["masks"] == [str(c) for c in CORES[1:]]  # one keeper per worker core, bound to it
    # the core did not go idle while the window was open (kept by its keeper, or by whatever else wanted it)
    assert got["idle_share"] < 0.3, got
    assert got["after"] < 0.01, got  # once the window closed the keepers sleep


def test_a_keeper_leaves_its_core_to_a_thread_that_wants_it():
    # a process spinning on the first worker core wants it: the keeper stops yielding there after its first
    # late yield, where without the back-off it would hold about half of the core for the whole window
    spin = subprocess.Popen([sys.executable, "-c",
                             f"import os\nos.sched_setaffinity(0, {{{CORES[1]}}})\nwhile True: pass"])
    try:
        got = _run(r"""
matmul()
time.sleep(0.05)
k0 = keepers()
time.sleep(0.4)
k1 = keepers()
core = str(sorted(os.sched_getaffinity(0))[1])
print(json.dumps({"held": sum(s for m, s in k1.values() if m == core) - sum(s for m, s in k0.values() if m == core)}))
""", TOLK_CPU_KEEP_AWAKE="1.0")
    finally:
        spin.kill()
        spin.wait()
    assert got["held"] < 0.04, got  # of the 0.4 s, with the core wanted throughout


def test_keep_awake_zero_makes_no_keepers():
    got = _run(r"""
matmul()
print(json.dumps({"keepers": len(keepers())}))
""", TOLK_CPU_KEEP_AWAKE="0")
    assert got["keepers"] == 0


def test_a_child_forked_after_a_team_started_makes_no_keepers():
    # its kernels run on one thread (teams.py: the parent's OpenMP workers do not exist there)
    got = _run(r"""
matmul()
parent = len(keepers())
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        matmul()
        os.write(w, bytes([len(keepers())]))
    finally:
        os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"child": os.read(r, 1)[0], "parent": parent}))
""")
    assert got == {"child": 0, "parent": len(CORES) - 1}


def test_keepers_that_cannot_be_made_are_warned_once_and_kernels_run_without(monkeypatch):
    from tolk_cpu import keeper
    from tolk_cpu.helpers import HelperThreads

    from tolk_core import config
    from tolk_core.plugins import Device

    class Broken:
        def __init__(self, *args) -> None:
            raise OSError("no threads here")
    monkeypatch.setattr(keeper, "CoreKeeper", Broken)
    monkeypatch.setattr(keeper, "_keepers", HelperThreads("the core keepers", "cores sleep"))
    with config.override(CPU_KEEP_AWAKE=0.001):
        with pytest.warns(RuntimeWarning, match="no threads here"):
            assert keeper.keeper_for(Device["CPU"], (1,)) is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no second try, no second warning
            assert keeper.keeper_for(Device["CPU"], (1,)) is None
