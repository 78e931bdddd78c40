"""Timing: the best of several calls after one warm-up (the least disturbed run on a shared machine)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_time(fn: Callable[[], Any], reps: int, budget_s: float = 10.0) -> float:
    """Seconds of the fastest of `reps` calls of `fn` after a warm-up call; stops early after `budget_s`."""
    fn()
    best, spent = float("inf"), 0.0
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        dt = time.perf_counter() - st
        best, spent = min(best, dt), spent + dt
        if spent > budget_s:
            break
    return best
