"""concurrent: the launches of several devices run at the same time, each device's from its own thread
(docs/multi-device.md, devices at the same time).

Inside `together()` a device's launches are not run where they are asked for: `defer(device, work)` queues
them per device, in order. `settle()` runs what is queued: each device's queue on that device's worker thread
(the first device's on the calling thread), all at once, and returns when every one is done (re-raising the
first error). With DEVICE_THREADS=2 (auto), a queue whose thread has not started it by the time the calling
thread is done with its own is run by the calling thread instead (a thread may wait a scheduler slice). A
kernel call releases the GIL (ctypes, an OpenCL enqueue), so virtual CPU devices compute on their own cores
at the same time; the Python that builds the calls still takes turns.

Work queued on different devices must be independent: a device's kernels read and write that device's
buffers only, and whatever reads another device's memory (a copy, a read to the host, an allreduce's fold)
calls `settle()` first (engine/buffers.py does for copies and reads). Leaving the outermost `together()`
settles. Outside one, `defer` runs the work at once.

Threads pay only where cores are free (`threads_pay`, setting DEVICE_THREADS): otherwise `settle()` runs the
queues one after another on the calling thread.

`spans()` are the (device, start, end) times, in `time.perf_counter` seconds, of each device's run in the
last settle that ran more than one device: what shows that they overlapped.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tolk_core import config
from tolk_core.counters import GlobalCounters

Work = Callable[[], Any]

_state = threading.local()  # .queues: dict device -> [work, ...] while a together() is open in this thread
_workers: dict[str, ThreadPoolExecutor] = {}
_workers_lock = threading.Lock()
_last_spans: list[tuple[str, float, float]] = []
_load = [0.0, -10.0]  # the 1-minute load average last read, and when (time.monotonic)


def _forget_workers() -> None:
    _workers.clear()


# a forked child has none of the parent's threads: it makes its own workers
os.register_at_fork(after_in_child=_forget_workers)


def _worker(device: str) -> ThreadPoolExecutor:
    """The one thread that runs `device`'s queued work (made on first use, kept for the process)."""
    with _workers_lock:
        if (ex := _workers.get(device)) is None:
            ex = _workers[device] = ThreadPoolExecutor(1, thread_name_prefix=f"tolk-{device}")
        return ex


def _queues() -> dict[str, list[Work]] | None:
    return getattr(_state, "queues", None)


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Queue launches per device inside the block (`defer`), run them concurrently at `settle()` and on leaving
    the outermost block. Nested blocks join the outer one."""
    if _queues() is not None:
        yield
        return
    _state.queues = {}
    try:
        yield
        settle()
    finally:
        _state.queues = None


def defer(device: str, work: Work) -> None:
    """Run `work` (a device's launches) on `device`'s queue inside `together()`, else now."""
    if (queues := _queues()) is None:
        work()
        return
    queues.setdefault(device, []).append(work)


def _run_all(device: str, works: list[Work]) -> tuple[str, float, float]:
    t0 = time.perf_counter()
    for w in works:
        w()
    return device, t0, time.perf_counter()


def threads_pay(n: int) -> bool:
    """Whether `n` devices' queues run each on its own thread (DEVICE_THREADS): 1 always, 0 never, 2 while
    the 1-minute load average leaves a core free per device (read at most once a second). On a machine whose
    cores are busy a woken thread waits a scheduler slice before it starts, and the devices' work then takes
    longer than one after another."""
    mode = config.get("DEVICE_THREADS")
    if mode != 2:
        return bool(mode)
    now = time.monotonic()
    if now - _load[1] > 1.0:
        _load[:] = [os.getloadavg()[0], now]
    return _load[0] + n - 1 <= (os.cpu_count() or 1)  # the load counts this thread already


def settle() -> None:
    """Run every queued launch, each device's on its own thread (when `threads_pay`), and wait for all."""
    if not (queues := _queues()):
        return
    todo = list(queues.items())
    queues.clear()
    if len(todo) == 1 or not threads_pay(len(todo)):
        for d, ws in todo:
            _run_all(d, ws)
        return
    steal = config.get("DEVICE_THREADS") == 2  # DEVICE_THREADS=1 asks for threads, whatever they cost
    futures: list[Future] = [_worker(d).submit(_run_all, d, ws) for d, ws in todo[1:]]
    spans, error = [], None
    try:
        spans.append(_run_all(*todo[0]))
    except BaseException as e:  # the other devices' work still finishes before this returns
        error = e
    for f, (d, ws) in zip(futures, todo[1:], strict=True):
        try:
            # a device whose thread has not started yet (its core busy elsewhere) has its work run here: on
            # a loaded machine waiting for the thread to be scheduled costs more than the work
            spans.append(_run_all(d, ws) if steal and f.cancel() else f.result())
        except BaseException as e:
            error = error or e
    if error is not None:
        raise error
    GlobalCounters.concurrent_runs += 1
    _last_spans[:] = spans


def spans() -> list[tuple[str, float, float]]:
    """(device, start, end) of each device's run in the last settle that ran several devices at once."""
    return list(_last_spans)
