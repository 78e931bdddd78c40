"""`tolk demo`: the main job. An MLP forward (784-256-10, batch 64) and one attention head (q, k, v of shape
(1, 128, 64)) on the chosen device, each checked against numpy, with kernel counts and time per call."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from tolk_core.counters import GlobalCounters
from tolk_core.frontend.tensor import Tensor


def _rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _measure(fn: Callable[[], Tensor], runs: int = 5) -> tuple[np.ndarray, int, float, float]:
    """(result, kernels per call, first-call seconds, median seconds of later calls)."""
    st = time.perf_counter()
    k0 = GlobalCounters.kernels_launched
    out = fn().numpy()
    first = time.perf_counter() - st
    kernels = GlobalCounters.kernels_launched - k0
    times = []
    for _ in range(runs):
        st = time.perf_counter()
        fn().numpy()
        times.append(time.perf_counter() - st)
    return out, kernels, first, statistics.median(times)


def run(device: str | None = None) -> int:
    """Run both programs, print a report, and return a process exit code (0 when both match numpy)."""
    rng = np.random.default_rng(0)
    x, w1, b1 = _rand(rng, 64, 784), _rand(rng, 784, 256, scale=784 ** -0.5), _rand(rng, 256)
    w2, b2 = _rand(rng, 256, 10, scale=256 ** -0.5), _rand(rng, 10)
    q, k, v = _rand(rng, 1, 128, 64), _rand(rng, 1, 128, 64), _rand(rng, 1, 128, 64)
    tx, tw1, tb1, tw2, tb2 = (Tensor(a, device=device) for a in (x, w1, b1, w2, b2))
    tq, tk, tv = (Tensor(a, device=device) for a in (q, k, v))

    def mlp() -> Tensor:
        return (tx @ tw1 + tb1).relu() @ tw2 + tb2

    def attention() -> Tensor:
        return ((tq @ tk.transpose(-1, -2)) * 64 ** -0.5).softmax() @ tv

    s = q @ k.transpose(0, 2, 1) * 64 ** -0.5
    e = np.exp(s - s.max(-1, keepdims=True))
    want = {"mlp": np.maximum(x @ w1 + b1, 0) @ w2 + b2, "attention": (e / e.sum(-1, keepdims=True)) @ v}
    print(f"tolk demo on {tx.device}")
    ok = True
    for name, fn in (("mlp", mlp), ("attention", attention)):
        got, kernels, first, per_call = _measure(fn)
        err = float(np.abs(got - want[name]).max())
        good = err < 1e-3 * max(1.0, float(np.abs(want[name]).max()))
        ok &= good
        print(f"  {name:10s} kernels={kernels}  first call {first * 1e3:8.1f} ms  per call {per_call * 1e3:7.2f} ms"
              f"  max error {err:.2e}  {'PASS' if good else 'FAIL'}")
    return 0 if ok else 1
