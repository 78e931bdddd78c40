"""Timing: the best of several calls after one warm-up (the least disturbed run on a shared machine)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_time(fn: Callable[[], Any], reps: int, min_total_s: float = 0.3, budget_s: float = 10.0) -> float:
    """Seconds of the fastest call of `fn` after a warm-up call: at least `reps` calls, more (up to 100) until
    `min_total_s` is spent, fewer when `budget_s` runs out."""
    fn()
    best, spent, n = float("inf"), 0.0, 0
    while n < reps or (spent < min_total_s and n < 100):
        st = time.perf_counter()
        fn()
        dt = time.perf_counter() - st
        best, spent, n = min(best, dt), spent + dt, n + 1
        if spent > budget_s:
            break
    return best
