"""CPU kernels in a forked child (plugins/tolk_cpu/tolk_cpu/teams.py): libgomp's worker threads do not survive a
fork, and a child's parallel loop used to wait for them forever. A child forked after the parent started a team
runs its parallel loops on its one thread and gets numpy's answers, eager and jitted, on the host's device and on
virtual ones; a child forked before any team started keeps its own team. Each case runs in a fresh process with a
time limit (the failure this guards against is a hang)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")

_PROBE = r"""
import json, os, sys
import numpy as np
import tolk_core
from tolk_core import Tensor
from tolk_cpu import teams
a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
dev = "CPU:1" if os.environ.get("TOLK_CPU_DEVICES") == "2" else "CPU"
ta = Tensor(a, device=dev).realize()
step = tolk_core.jit(lambda x: (x @ x + 1).realize())

def check():
    '''a parallel kernel launched by itself and one replayed by a JIT, against numpy'''
    eager = np.allclose((ta @ ta).numpy(), a @ a, rtol=1e-4, atol=1e-3)
    jitted = [step(ta).numpy() for _ in range(3)][-1]
    return bool(eager and np.allclose(jitted, a @ a + 1, rtol=1e-4, atol=1e-3))

parent_first = sys.argv[1] == "after"
ok_parent = check() if parent_first else True
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.write(w, json.dumps({"ok": check(), "one_thread": teams.forked()}).encode())
    finally:
        os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 4096))
print(json.dumps({"parent": ok_parent and check(), **child}))
"""


@pytest.mark.parametrize("devices", ["1", "2"])
@pytest.mark.parametrize("when", ["after", "before"])
def test_a_forked_child_computes_with_parallel_kernels(when, devices):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "TOLK_DEVICE", "TOLK_CPU_DEVICES")}
    out = subprocess.run([sys.executable, "-c", _PROBE, when], capture_output=True, text=True, timeout=120,
                         env=base | {"TOLK_DEVICE": "CPU", "TOLK_CPU_DEVICES": devices})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # a child forked after a team started runs on one thread; one forked before keeps its team
    assert got == {"parent": True, "ok": True, "one_thread": when == "after"}
