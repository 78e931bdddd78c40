"""float32 matmul against numpy's BLAS (OpenBLAS), each in its own process, in interleaved calls.

Sizes: N (N x N times N x N), MxKxN, or MxKxNt for `x @ W.T` with W stored N x K (nn.Linear's layout).

`python -m bench.matmul_blas [--sizes 256,512,1024,2048] [--threads 1,2] [--calls 15]` starts, for each thread
count, a Tolk child and a numpy child (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set to it; numpy's without
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which make OpenBLAS pick a slower kernel on these machines), then asks them
in turn for one call each, `--calls` times per size (Tolk, numpy, numpy, Tolk, Tolk, ...: a change of the machine's
load lands on both, and neither always follows the other), each timed call after `--settle` seconds of sleep and one
untimed call of the same side (the per-call records are the second call's). The sleep is there because OpenBLAS's
threads spin for a while after each call (~0.1 s): a Tolk call made right after a two-thread numpy call found a core
taken by a spinning thread and ran at one thread's speed (N = 1024: 0.48 of OpenBLAS, where the same kernel alone in
a quiet process ran at 159 GFLOP/s, 0.89); after the sleep both engines start from idle peers' threads, and the
untimed call brings their own caches and clocks back from the sleep, as in a program of their own that calls them in
a loop. Each row prints GFLOP/s of the median call and Tolk's median time over numpy's as x BLAS (numpy's time over
Tolk's: above 1, Tolk is faster): by the call's wall time (Tolk: `(a @ b).realize()`, scheduling and launch
included, outside the profiler, which turns the schedule cache off) and by Tolk's kernel time (`tolk_core.profile()`,
the launches only, of a third call right after), with the load average; and the ratio
of CPU time per call (the process's, all its threads: the work done, which the other load on a shared machine
disturbs less than the wall time; OpenBLAS's threads spin while they wait, Tolk's sleep). Tolk's result is checked
against numpy's first.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.rounds import Child, serve


def shape(size: str) -> tuple[int, int, int, bool]:
    """(M, K, N, B stored transposed) of a size: "N" (N x N times N x N), "MxKxN" (A @ B) or "MxKxNt" (x @ W.T
    with W stored N x K, as nn.Linear keeps it)."""
    t = size.endswith("t")
    dims = [int(v) for v in size.rstrip("t").split("x")]
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) < 1:
        raise SystemExit(f"bad size {size!r}: give N, MxKxN or MxKxNt (B stored transposed)")
    return dims[0], dims[1], dims[2], t


def _inputs(size: str) -> tuple[np.ndarray, np.ndarray, bool]:
    m, k, n, t = shape(size)
    rng = np.random.default_rng(m * 7 + k * 3 + n)
    return (rng.standard_normal((m, k), dtype=np.float32),
            rng.standard_normal((n, k) if t else (k, n), dtype=np.float32), t)


def _tolk_timer(size: str) -> Callable[[int, float, float], dict[str, Any]]:
    import tolk_core
    from tolk_core import Tensor
    a, b, t = _inputs(size)
    ta, tb = Tensor(a).realize(), Tensor(b).realize()
    if t:
        tb = tb.T
    got = (ta @ tb).numpy()
    if not np.allclose(got, a @ (b.T if t else b), rtol=1e-3, atol=1e-3 * np.sqrt(a.shape[1])):
        raise SystemExit(f"Tolk's {size} matmul differs from numpy's")

    def timer(reps: int, min_s: float, budget_s: float) -> dict[str, Any]:
        times, cpu = [], []
        for _ in range(reps):
            c0, t0 = time.process_time(), time.perf_counter()
            (ta @ tb).realize()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        # the kernel time from one more call, under the profiler (which schedules every call anew: a launch per
        # kernel, as it reports; the timed calls above take the schedule cache's path, as a program does)
        with tolk_core.profile() as prof:
            (ta @ tb).realize()
        return {"times": times, "per_step": {"kernel_s": sum(r.total_s for r in prof.rows), "cpu_s": cpu[-1]}}
    return timer


def _numpy_timer(size: str) -> Callable[[int, float, float], dict[str, Any]]:
    a, b, t = _inputs(size)
    if t:
        b = b.T  # a view, as torch's F.linear hands BLAS the weight transposed
    a @ b

    def timer(reps: int, min_s: float, budget_s: float) -> dict[str, Any]:
        times, cpu = [], []
        for _ in range(reps):
            c0, t0 = time.process_time(), time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        return {"times": times, "per_step": {"kernel_s": times[-1], "cpu_s": cpu[-1]}}
    return timer


def child(side: str, sizes: list[str]) -> None:
    make = _tolk_timer if side == "tolk" else _numpy_timer
    timers = {n: make(n) for n in sizes}
    blas = ""
    if side == "numpy":
        try:
            from threadpoolctl import threadpool_info  # what bench/peer_child.py records too
            blas = ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
                             for i in threadpool_info() if i.get("user_api") == "blas")
        except ImportError:
            blas = "unknown (threadpoolctl not installed)"
    serve({"side": side, "blas": blas}, timers, lambda: {})


def _rows(threads: int, sizes: list[str], calls: int, settle: float) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env = {**base, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
    arg = ",".join(map(str, sizes))
    kids = {s: Child("bench.matmul_blas", [s, arg], env, os.getcwd(), 900) for s in ("tolk", "numpy")}
    try:
        for side, k in kids.items():
            if blas := k.read()["ready"].get("blas"):
                print(f"{side} ({threads} threads): {blas}", file=sys.stderr, flush=True)
        out = []
        for n in sizes:
            got: dict[str, list[float]] = {"tolk": [], "numpy": [], "kernel": [], "tolk_cpu": [], "numpy_cpu": []}
            for i in range(calls):
                for side, k in (list(kids.items()) if i % 2 == 0 else list(kids.items())[::-1]):
                    time.sleep(settle)  # the other process's threads go idle first (module docstring)
                    rec = k.ask(f"time {n} 2 0 0")  # the first call warms this side up; the second is timed
                    got[side].append(rec["times"][-1])
                    got[side + "_cpu"].append(rec["per_step"]["cpu_s"])
                    if side == "tolk":
                        got["kernel"].append(rec["per_step"]["kernel_s"])
            t, b, kern, tc, bc = (statistics.median(got[x]) for x in ("tolk", "numpy", "kernel", "tolk_cpu",
                                                                       "numpy_cpu"))
            m, kk, nn, _ = shape(n)
            gf = 2.0 * m * kk * nn / 1e9
            out.append(f"| {n} | {threads} | {gf / t:.1f} | {gf / kern:.1f} | {gf / b:.1f} | {b / t:.2f} | "
                       f"{b / kern:.2f} | {bc / tc:.2f} | {os.getloadavg()[0]:.1f} |")
            print(out[-1], flush=True)
        return out
    finally:
        for k in kids.values():
            k.close()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        child(argv[1], argv[2].split(","))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256,512,1024,2048",
                   help="N (square), MxKxN (A @ B) or MxKxNt (x @ W.T, W stored N x K), comma-separated")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--calls", type=int, default=15)
    p.add_argument("--settle", type=float, default=0.3, help="seconds of sleep before each call (0: none)")
    args = p.parse_args(argv)
    sizes = args.sizes.split(",")
    for size in sizes:
        shape(size)  # a bad size stops here, not in a child
    print("| N | threads | Tolk call GFLOP/s | Tolk kernel GFLOP/s | OpenBLAS GFLOP/s | x BLAS (call) | "
          "x BLAS (kernel) | x BLAS (CPU time) | load |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    for threads in (int(x) for x in args.threads.split(",")):
        _rows(threads, sizes, args.calls, args.settle)


if __name__ == "__main__":
    main()
