"""How fast a matmul's threads come back after an idle spell: a float32 N x N matmul (Tolk jitted, or numpy's
BLAS), 30 back-to-back calls ("hot"), then rounds of a sleep and six calls, GFLOP/s of each call's median.

    python -m bench.matmul_wake {tolk,numpy} [N] [--rounds 15] [--sleep 0.3]

Run it with the settings to compare (`OMP_NUM_THREADS`, `TOLK_CPU_SPIN_COUNT`, `OMP_WAIT_POLICY`):
docs/performance.md, "Threads that sleep".
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("side", choices=("tolk", "numpy"))
    ap.add_argument("n", type=int, nargs="?", default=512)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--sleep", type=float, default=0.3)
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    if args.side == "tolk":
        import tolk_core
        from tolk_core import Tensor
        ta, tb = Tensor(a).realize(), Tensor(b).realize()
        jitted = tolk_core.jit(lambda x, y: (x @ y).realize())
        np.testing.assert_allclose(jitted(ta, tb).numpy(), a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(n))
        call = lambda: jitted(ta, tb)  # noqa: E731
    else:
        call = lambda: a @ b  # noqa: E731
    for _ in range(5):
        call()
    hot = []
    for _ in range(30):
        t0 = time.perf_counter()
        call()
        hot.append(time.perf_counter() - t0)
    after: list[list[float]] = [[] for _ in range(6)]
    for _ in range(args.rounds):
        time.sleep(args.sleep)
        for times in after:
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    rate = lambda t: 2 * n ** 3 / t / 1e9  # noqa: E731
    print(f"{args.side} N={n}: hot {rate(statistics.median(hot)):.0f} GFLOP/s; calls 1-6 after a {args.sleep} s "
          "sleep: " + " ".join(f"{rate(statistics.median(t)):.0f}" for t in after))


if __name__ == "__main__":
    main()
