"""The OpenMP team a CPU kernel's parallel loops run with, per launching thread, and across a fork.

libgomp keeps the team size per thread (virtual devices launch from threads of their own: their share of the
cores is set on each), and its worker threads do not survive a fork: a forked child's next parallel loop waits
for the parent's workers forever. So once this process has started a team (`prepare`, on every parallel launch),
a child forked from it runs its parallel loops on its one thread (slower, never stuck; docs/performance.md,
"Threads after a fork"). A process that forks before any parallel kernel ran keeps its teams in the child.
"""
from __future__ import annotations

import ctypes
import os
import threading

# the OpenMP thread count last set by each launching thread (0: never set, libgomp's default)
_set = threading.local()
_started: list[bool] = []  # a team started in this process (then the fork hook is registered, once)
_forked: list[bool] = []  # this process is a child forked after a team started


def prepare(threads: int | None) -> None:
    """Before a parallel launch from the calling thread: its team sized to `threads` (None: OpenMP's default),
    or to one thread in a child forked after a team started."""
    if not _started:
        _started.append(True)
        os.register_at_fork(after_in_child=_in_child)
    n = 1 if _forked else threads
    if n is not None and getattr(_set, "n", 0) != n:
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(ctypes.c_int(n))
        _set.n = n


def _in_child() -> None:
    if not _forked:
        _forked.append(True)


def forked() -> bool:
    """Whether this process's parallel loops run on one thread (a child forked after a team started)."""
    return bool(_forked)
