"""Calling plugin code under a time limit: entry-point imports and probes (docs/plugins.md, §7 liveness).

A plugin's import or probe runs in a daemon thread; the caller waits at most `timeout` seconds. A Python thread
cannot be killed, so on timeout the thread is *cancelled*: `Cancelled` is raised in it asynchronously, which
ends a probe that spins in Python at its next bytecode (so a probe that overran cannot keep slowing the
process). Code blocked in C (a driver call, `time.sleep`) holds no GIL and costs nothing while it waits; it sees
the cancellation when it returns. Only C code that spins while holding the GIL escapes both, and is named in
the guide as the one thing this cannot bound.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Cancelled(BaseException):
    """Raised inside a plugin call that overran its time limit (a BaseException: a plugin's `except Exception`
    does not swallow it)."""


@dataclass(frozen=True)
class Outcome:
    """What a guarded call did: `done` (it returned or raised within the limit), its `value` or `error`, the
    seconds it took (the limit when it timed out), and for a call that timed out, where it was stuck (`stack`)."""
    done: bool
    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    stack: str = ""


def _cancel(th: threading.Thread) -> None:
    import ctypes  # only on a timeout: ctypes costs a few milliseconds to import

    if th.ident is not None and th.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(th.ident), ctypes.py_object(Cancelled))


def _stack(th: threading.Thread) -> str:
    """Where thread `th` is now, innermost last (what ``tolk devices -v`` shows for an import that hung)."""
    import sys
    import traceback

    frame = sys._current_frames().get(th.ident) if th.ident is not None else None
    return "Stuck at (most recent call last):\n" + "".join(traceback.format_stack(frame)) if frame else ""


def call(fn: Callable[[], Any], timeout: float, name: str) -> Outcome:
    """Run `fn()` in a daemon thread named `name` and wait at most `timeout` seconds (finite, > 0: the settings
    are validated where they are read). Never raises what `fn` raises: it is in the Outcome."""
    import time

    box: list[tuple[Any, BaseException | None]] = []

    def target() -> None:
        try:
            try:
                result: tuple[Any, BaseException | None] = (fn(), None)
            except Cancelled:
                return
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                result = (None, e)
            box.append(result)
        except Cancelled:  # the cancellation landed just after `fn` returned: nothing is waiting any more
            pass

    th = threading.Thread(target=target, daemon=True, name=name)
    t0 = time.perf_counter()
    th.start()
    th.join(timeout if math.isfinite(timeout) else None)
    dt = time.perf_counter() - t0
    if not box:
        stack = _stack(th)
        _cancel(th)
        return Outcome(False, seconds=dt, stack=stack)
    value, error = box[0]
    return Outcome(True, value, error, dt)
