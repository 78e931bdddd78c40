"""Core binding of the CPU device's OpenMP teams (plugins/tolk_cpu/tolk_cpu/binding.py): which devices bind, that a
parallel launch leaves each worker thread on a core of its own and gives the launching thread its mask back, and
that a kernel library is recognised as starting a team. The launches run in fresh processes (libgomp's threads and
their masks are per process)."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tolk_cpu import binding

from tolk_core import config

CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two = pytest.mark.skipif(len(CORES) < 2, reason="binding needs a process allowed two cores or more")


@pytest.fixture
def fake_cores(monkeypatch):
    for var in binding._RANKS_HERE:  # this test process is no rank of a job
        monkeypatch.delenv(var, raising=False)

    def use(n: int, omp: str | None = None) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4, 4 + n)))
        if omp is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", omp)
    return use


def test_a_device_that_owns_the_cores_binds_one_thread_per_core(fake_cores):
    fake_cores(4)
    with config.override(CPU_BIND=1, CPU_DEVICES=1):
        assert binding.device_cores("CPU", None) == (4, 5, 6, 7)
    fake_cores(4, omp="4")
    with config.override(CPU_BIND=1, CPU_DEVICES=1):
        assert binding.device_cores("CPU", None) == (4, 5, 6, 7)


@pytest.mark.parametrize("env,binds", [
    ({"TOLK_WORLD_SIZE": "2"}, False),
    ({"OMPI_COMM_WORLD_SIZE": "4"}, False),
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}, True),  # one rank per host
    ({"TOLK_WORLD_SIZE": "1"}, True),
])
def test_ranks_that_share_the_host_do_not_bind(fake_cores, monkeypatch, env, binds):
    fake_cores(4)
    for var in binding._RANKS_HERE:
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with config.override(CPU_BIND=1, CPU_DEVICES=1):
        assert (binding.device_cores("CPU", None) is not None) == binds


def test_virtual_devices_bind_their_share(fake_cores):
    fake_cores(4)
    with config.override(CPU_BIND=1, CPU_DEVICES=2):
        assert binding.device_cores("CPU:0", 2) == (4, 5)
        assert binding.device_cores("CPU:1", 2) == (6, 7)


@pytest.mark.parametrize("n,omp,threads,devices,bind", [
    (4, "2", None, 1, 1),   # a team smaller than the machine: the other cores may be someone else's
    (4, None, 1, 4, 1),     # teams of one thread have nothing to keep apart
    (1, None, None, 1, 1),  # one core
    (4, None, None, 1, 0),  # CPU_BIND=0
    (4, None, 3, 2, 1),     # shares that do not add up to the cores
])
def test_devices_that_do_not_own_their_cores_do_not_bind(fake_cores, n, omp, threads, devices, bind):
    fake_cores(n, omp)
    with config.override(CPU_BIND=bind, CPU_DEVICES=devices):
        assert binding.device_cores("CPU:0" if devices > 1 else "CPU", threads) is None


_PROBE = r"""
import json, os, sys
import numpy as np
import tolk_core
from tolk_core import Tensor
from tolk_core.plugins import Device
a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
ta = Tensor(a).realize()
eager = (ta @ ta).numpy()
if sys.argv[1] != "all":  # the launching thread restricts itself after the device bound its team
    os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
before = sorted(os.sched_getaffinity(0))
step = tolk_core.jit(lambda x: (x @ x + 1).realize())
jitted = [step(ta).numpy() for _ in range(3)][-1]
def mask(tid):
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(ln.split()[1] for ln in f if ln.startswith("Cpus_allowed_list"))
def name(tid):
    with open(f"/proc/self/task/{tid}/comm") as f:
        return f.read().strip()
# the OpenMP workers (keeper threads, bound to the same cores, are test_cpu_keeper.py's)
workers = sorted(mask(t) for t in os.listdir("/proc/self/task") if int(t) != os.getpid() and name(t) != "tolk-keeper")
print(json.dumps({"before": before, "after": sorted(os.sched_getaffinity(0)), "workers": workers,
                  "binds": Device["CPU"].binding is not None,
                  "eager_ok": bool(np.allclose(eager, a @ a, rtol=1e-4, atol=1e-3)),
                  "jit_ok": bool(np.allclose(jitted, a @ a + 1, rtol=1e-4, atol=1e-3))}))
"""


def _launch(mask: str = "all", **env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "TOLK_CPU_BIND", "TOLK_DEVICE")}
    out = subprocess.run([sys.executable, "-c", _PROBE, mask], env=base | {"TOLK_DEVICE": "CPU"} | env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _single(masks: list[str]) -> list[int]:
    """The cores of the masks that name exactly one core."""
    return sorted(int(m) for m in masks if m.isdigit())


@needs_two
def test_parallel_launches_keep_workers_apart_and_give_the_caller_its_mask_back():
    got = _launch()
    assert got["binds"] and got["eager_ok"] and got["jit_ok"]
    assert got["after"] == got["before"] == CORES  # eager launches and the jitted graph both restored it
    assert _single(got["workers"]) == CORES[1:]  # one worker per core but the launching thread's


@needs_two
def test_binding_off_leaves_placement_to_the_os():
    got = _launch(TOLK_CPU_BIND="0")
    assert not got["binds"] and got["eager_ok"] and got["jit_ok"]
    assert got["after"] == got["before"] and _single(got["workers"]) == []


@needs_two
def test_a_caller_whose_mask_excludes_the_first_core_is_not_moved():
    # a launching thread restricted to a core other than the device's first keeps its restriction (the
    # device's binding stands aside rather than move it)
    got = _launch(str(CORES[1]))
    assert got["binds"] and got["eager_ok"] and got["jit_ok"] and got["after"] == got["before"] == [CORES[1]]


def test_a_library_with_a_parallel_loop_is_recognised():
    from tolk_core.plugins import Device
    dev = Device["CPU"]
    par = dev.compiler.compile_cached("void tolk_p(float* x, int n) {\n#pragma omp parallel for\n"
                                      "for (int i = 0; i < n; i++) x[i] += 1.0f;\n}\n")
    serial = dev.compiler.compile_cached("void tolk_s(float* x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }\n")
    assert binding.runs_threads(par) and not binding.runs_threads(serial)
    x = np.zeros(1000, np.float32)
    fn = dev.load(par).tolk_p
    fn(x.ctypes.data_as(ctypes.c_void_p), 1000)
    np.testing.assert_array_equal(x, np.ones(1000, np.float32))


@pytest.mark.parametrize("running_on,moved", [(0, False), (1, True), (2, True), (5, False)])
def test_the_launching_thread_is_moved_only_off_a_workers_core(monkeypatch, running_on, moved):
    """A launch from core 0 (the device's first) or from a core outside the team changes nothing; from a worker's
    core the thread is bound to core 0 for the launch and given its mask back after."""
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(binding, "_LIBC", type("FakeLibc", (), {"sched_getcpu": staticmethod(lambda: running_on)}))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5})
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, mask: calls.append(tuple(sorted(mask))))
    b = binding.CoreBinding(device=None, cores=(0, 1, 2))
    b._bound.done = True  # the team's own binding is the fresh-process tests' part
    mask = b.pin()
    b.unpin(mask)
    assert calls == ([(0,), (0, 1, 2, 5)] if moved else [])
