"""Core binding: a CPU device's OpenMP threads run one per core while its parallel kernels run.

Tolk's OpenMP threads sleep as soon as a parallel loop ends (``OMP_WAIT_POLICY=PASSIVE``, runtime.py), so each
parallel kernel wakes its team again. Left to the OS, a woken thread may be placed on the core of the thread that
woke it, even with another core idle: on the 2-vCPU virtual machines Tolk is measured on, after an idle spell of
a few hundred ms, the worker and the launching thread ran one after the other on one vCPU for call after call
(a 2-thread 512^3 matmul at one thread's speed; docs/performance.md, "Threads that share a core"). Binding keeps
them apart:

- each worker thread of a launching thread's team is bound to its own core, once (`bind_team`, a parallel region
  in which thread t > 0 sets its own affinity to core t; libgomp reuses the same threads for later teams);
- the launching thread is kept off its workers' cores for a parallel launch (`CoreBinding.pin` / `unpin`): where
  it runs on one, it is bound to core 0 of the device for the launch and gets its own mask back right after (it
  is the user's thread, and threads and processes it starts inherit its affinity); elsewhere it is left alone,
  so most launches pay one `sched_getcpu` and no system call (binding it at every launch measured the same, and
  asks the OS more).

A device binds only where it owns the cores its threads use (`device_cores`): its team is as large as the cores
the process may run on (or, with virtual devices, its share of them), so no other team of this process is
placed on them. A team smaller than the machine (OMP_NUM_THREADS=2 on 16 cores, CPU_THREADS) is left to the OS:
the cores it would be bound to may be the ones other programs use; so is a process that is one of several ranks
of a job on this host (`tolk launch`, mpiexec: `_shares_the_host`), whose teams would all be bound to the same
cores. `CPU_BIND=0` turns binding off.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from tolk_core import config
from tolk_cpu.keeper import CoreKeeper, keeper_for

try:  # glibc's sched_getcpu (a vDSO read): the core the calling thread runs on now
    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
    _LIBC.sched_getcpu.restype = ctypes.c_int
except (OSError, AttributeError):
    _LIBC = None


BIND_TEAM = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <omp.h>
/* binds thread t > 0 of a team of n to cores[t]; returns how many threads were bound */
int tolk_bind_team(const int* cores, int n) {
  int bound = 0;
  #pragma omp parallel num_threads(n) reduction(+:bound)
  {
    int t = omp_get_thread_num();
    if (t > 0 && t < n) {
      cpu_set_t s;
      CPU_ZERO(&s);
      CPU_SET(cores[t], &s);
      bound += pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
    }
  }
  return bound;
}
"""


def _team_size(threads: int | None, allowed: int) -> int:
    """The OpenMP team a device's parallel kernels run with: its thread count, else OMP_NUM_THREADS's first
    value, else libgomp's default (the cores the process may run on)."""
    if threads is not None:
        return threads
    try:
        return int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        return allowed


# a launcher's count of the ranks on this host, else of the whole job (Open MPI, MPICH/Hydra, tolk launch's TCP
# ranks, which are all local); a rank whose launcher names none of these is taken to have the host to itself
_RANKS_HERE = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "TOLK_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def _shares_the_host() -> bool:
    """Whether this process is one of several ranks of a job that may run on this host."""
    for var in _RANKS_HERE:
        if (n := os.environ.get(var, "")).isdigit():
            return int(n) > 1
    return False


def device_cores(name: str, threads: int | None) -> tuple[int, ...] | None:
    """The cores device `name` (``CPU`` or virtual ``CPU:i``) binds its team to, one per thread, or None where it
    does not bind (module docstring): CPU_BIND off, no affinity API, a rank sharing the host, a team of one, or a
    team that does not own its cores (its share of the process's cores is smaller than the team)."""
    if not config.get("CPU_BIND") or not hasattr(os, "sched_getaffinity") or _shares_the_host():
        return None
    allowed = sorted(os.sched_getaffinity(0))
    team = _team_size(threads, len(allowed))
    index = int(name.partition(":")[2] or 0)
    if team < 2 or team * config.get("CPU_DEVICES") != len(allowed):
        return None
    return tuple(allowed[index * team:(index + 1) * team])


class CoreBinding:
    """The binding of one device's teams to `cores` (module docstring): `pin` before a parallel launch, `unpin`
    with what it returned after."""

    def __init__(self, device: Any, cores: tuple[int, ...]):
        self.device, self.cores = device, cores
        self._workers = frozenset(cores[1:])
        self._bound = threading.local()  # per launching thread: its team is bound
        self._bind_fn: Any = None
        self._keeper: CoreKeeper | None = None  # its worker cores kept awake between kernels (keeper.py)

    def _bind_team(self) -> None:
        if self._bind_fn is None:
            lib = self.device.load(self.device.compiler.compile_cached(BIND_TEAM))
            self._bind_fn = lib.tolk_bind_team
            self._bind_fn.restype = ctypes.c_int
        cores = (ctypes.c_int * len(self.cores))(*self.cores)
        self._bind_fn(cores, ctypes.c_int(len(self.cores)))
        self._bound.done = True
        if self._keeper is None:
            self._keeper = keeper_for(self.device, self.cores[1:])

    def pin(self) -> set[int] | None:
        """Keep the calling thread off its team's cores for a launch (binding the team the first time): where it
        runs on a worker's core it is bound to the device's first core, and the mask to give back is returned;
        elsewhere (most launches: ~0.3 us to ask) nothing changes and None is returned, as it is where the
        caller's own mask excludes the first core."""
        if not getattr(self._bound, "done", False):
            self._bind_team()
        if (k := self._keeper) is not None:
            if k.alive:
                k.begin()
            else:  # a forked child: the parent's keepers have no threads here, and its kernels one thread (teams.py)
                self._keeper = None
        if _LIBC is None or _LIBC.sched_getcpu() not in self._workers:
            return None
        mine = os.sched_getaffinity(0)
        if self.cores[0] not in mine:
            return None
        os.sched_setaffinity(0, (self.cores[0],))
        return mine

    def unpin(self, mask: set[int] | None) -> None:
        """After the launch: the calling thread's mask given back (`mask`, what `pin` returned) and the worker
        cores kept awake from now (keeper.py)."""
        if mask is not None:
            os.sched_setaffinity(0, mask)
        if (k := self._keeper) is not None:
            k.end()


def launch(binding: CoreBinding | None, fn: Any, args: Sequence[Any], wait: bool) -> float | None:
    """Call native `fn(*args)` with `binding` pinned around it (None: no binding); its seconds when `wait`."""
    mask = binding.pin() if binding is not None else None
    try:
        t0 = time.perf_counter()
        fn(*args)
        return time.perf_counter() - t0 if wait else None
    finally:
        if binding is not None:
            binding.unpin(mask)


def runs_threads(lib: bytes) -> bool:
    """Whether a compiled kernel library starts OpenMP teams: it imports libgomp's (GCC) or libomp's (clang) entry
    for a parallel region. A library of several kernels counts for each of them (a pin too many costs ~2 us)."""
    return b"GOMP_parallel" in lib or b"__kmpc_fork_call" in lib
