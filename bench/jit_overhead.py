"""Replay cost per call of a jitted function of K tiny kernels (K = 1, 10, 50), per device, graphs on and off.

    python bench/jit_overhead.py [--devices CPU,OPENCL] [--calls 300]

Each kernel is an elementwise op on 16 floats forced into its own kernel (`.contiguous()`), so the time is
almost all dispatch overhead. Per-kernel overhead = (t(K=50) - t(K=1)) / 49. When `tinygrad` is importable
(it is not a dependency; never installed in CI) its TinyJit runs the same function in the same process.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Callable

import numpy as np

KS = (1, 10, 50)


def _time_calls(call: Callable[[], object], sync: Callable[[], None], calls: int) -> float:
    """Median seconds per call over `calls` calls in batches of 10 (the device is synchronized per batch)."""
    for _ in range(3):
        call()
    sync()
    samples = []
    for _ in range(max(calls // 10, 1)):
        t0 = time.perf_counter()
        for _ in range(10):
            call()
        sync()
        samples.append((time.perf_counter() - t0) / 10)
    return statistics.median(samples)


def bench_tolk(device: str, k: int, graphs: bool, calls: int) -> float:
    import tolk_core
    from tolk_core import config
    from tolk_core.frontend.tensor import Tensor
    from tolk_core.plugins import Device

    def chain(x):
        for i in range(k):
            x = (x + i).contiguous()
        return x

    jitted = tolk_core.jit(chain)
    xs = [Tensor(np.full(16, i, np.float32), device=device) for i in range(2)]
    state = {"i": 0}

    def call():
        state["i"] ^= 1
        return jitted(xs[state["i"]])
    with config.override(JIT=1 if graphs else 2):
        t = _time_calls(call, Device[device].synchronize, calls)
        np.testing.assert_allclose(jitted(xs[0]).numpy(), np.full(16, sum(range(k)), np.float32))
    return t


def bench_tinygrad(device: str, k: int, calls: int) -> float | None:
    if "CC" not in os.environ and shutil.which("clang") is None:  # tinygrad's CPU backend compiles with $CC or clang
        os.environ["CC"] = next((c for c in ("clang-15", "clang-14", "clang-16") if shutil.which(c)), "clang")
    try:
        from tinygrad import Device as TDevice
        from tinygrad import Tensor as TTensor
        from tinygrad import TinyJit
    except ImportError:
        return None
    tdev = {"CPU": "CPU", "OPENCL": "CL"}[device]

    @TinyJit
    def chain(x):
        for i in range(k):
            x = (x + i).contiguous()
        return x.realize()
    xs = [TTensor(np.full(16, i, np.float32), device=tdev).realize() for i in range(2)]
    state = {"i": 0}

    def call():
        state["i"] ^= 1
        return chain(xs[state["i"]])
    return _time_calls(call, TDevice[tdev].synchronize, calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="CPU,OPENCL")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    print(f"{'device':8s} {'mode':10s} " + " ".join(f"K={k:<3d} us " for k in KS) + " per-kernel us")
    for device in args.devices.split(","):
        rows = [("tolk", "graphs", lambda k, d=device: bench_tolk(d, k, True, args.calls)),
                ("tolk", "no-graphs", lambda k, d=device: bench_tolk(d, k, False, args.calls)),
                ("tinygrad", "TinyJit", lambda k, d=device: bench_tinygrad(d, k, args.calls))]
        for who, mode, fn in rows:
            try:
                ts = [fn(k) for k in KS]
            except Exception as e:  # noqa: BLE001 - a device missing here is reported, not fatal
                print(f"{device:8s} {who} {mode}: skipped ({type(e).__name__}: {e})")
                continue
            if any(t is None for t in ts):
                print(f"{device:8s} {who} {mode}: skipped (tinygrad not importable)")
                continue
            per_kernel = (ts[-1] - ts[0]) / (KS[-1] - KS[0])
            print(f"{device:8s} {who + ' ' + mode:18s} " + " ".join(f"{t * 1e6:9.1f}" for t in ts)
                  + f" {per_kernel * 1e6:9.2f}")


if __name__ == "__main__":
    main()
