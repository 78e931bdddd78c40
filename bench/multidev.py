"""Many devices in one program (docs/multi-device.md), on virtual CPU devices, one run:

    python -m bench.multidev [--reps 31] [--steps 30]

- the 4 MiB naive allreduce over 2 devices (`engine.realize.allreduce`), eager and jitted, and a sum over a
  sharded axis jitted (per device a kernel that makes the partial, then the allreduce), each next to one
  `np.copyto` of the same 4 MiB, the calls interleaved (copy, allreduce, ...) so that load from other
  processes hits them alike; medians of wall time and of process CPU time (what the call did, whatever the
  load) and their ratios to the copy's;
- the digits MLP data-parallel SGD step (batch 64) on 1 device (all cores) and on 2 (half the cores each),
  eager and jitted, each in a child process of its own (TOLK_CPU_DEVICES differs); median step time.
Each allreduce row runs with TOLK_DEVICE_THREADS 2 (auto), 1 (each device from its own thread) and 0 (one after
another). The load average is printed with the rows: on a shared machine the ratios are what to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NBYTES = 4 << 20


def _interleaved(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, tuple[float, float]]:
    """Median (wall, process CPU) seconds of each of `fns`, called in turn `reps` times after one warm-up call
    each. CPU time counts what the call did whatever the machine's load (a call preempted by other processes
    waits in wall time only)."""
    for f in fns.values():
        f()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            f()
            times[k].append((time.perf_counter() - t0, time.process_time() - c0))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}


def allreduce_rows(reps: int) -> dict[str, float]:
    """Median ms of np.copyto of 4 MiB, the eager and the jitted 4 MiB allreduce over CPU:0, CPU:1."""
    import tolk_core
    from tolk_core import Tensor
    from tolk_core.counters import GlobalCounters
    from tolk_core.engine import realize as engine
    n = NBYTES // 4
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    dst = np.empty_like(a)
    parts = [Tensor(a, device="CPU:0").realize().uop, Tensor(b, device="CPU:1").realize().uop]
    sharded = Tensor(np.stack([a, b])).shard(("CPU:0", "CPU:1"), axis=0).realize()
    summed = tolk_core.jit(lambda x: x.sum(axis=0).realize())
    jitted = tolk_core.jit(lambda x, y: Tensor(engine.allreduce([x.uop, y.uop], "sum")[1], "CPU:1"))
    ins = [Tensor(p, d) for p, d in zip(parts, ("CPU:0", "CPU:1"), strict=True)]
    got = Tensor(engine.allreduce(parts, "sum")[1], "CPU:1").numpy()
    np.testing.assert_array_equal(got, a + b)
    for _ in range(3):  # warm-up, capture, replay
        np.testing.assert_array_equal(summed(sharded).numpy(), a + b)
        np.testing.assert_array_equal(jitted(*ins).numpy(), a + b)
    before = GlobalCounters.allreduces_direct
    med = _interleaved({"copyto": lambda: np.copyto(dst, a),
                        "allreduce": lambda: engine.allreduce(parts, "sum"),
                        "jitted": lambda: jitted(*ins),
                        "jitted_sum": lambda: summed(sharded)}, reps)
    return {**{k: v[0] * 1e3 for k, v in med.items()}, **{f"{k}_cpu": v[1] * 1e3 for k, v in med.items()},
            "direct": GlobalCounters.allreduces_direct - before}


def step_row(ndev: int, jit: bool, steps: int) -> tuple[float, float]:
    """Median ms (wall, process CPU) of a data-parallel SGD step of the digits MLP (batch 64) over `ndev`
    virtual CPU devices."""
    import tolk_core
    from tolk_core import Tensor
    from tolk_core.demo import load_digits, mlp_sgd
    images, labels = load_digits()
    rng = np.random.default_rng(0)
    devs = tuple(f"CPU:{i}" for i in range(ndev))
    _, mlp_step = mlp_sgd(rng, hidden=128, lr=0.1, devices=devs if ndev > 1 else None)

    def step(x: Tensor, y: Tensor) -> Tensor:
        return mlp_step(x, y).realize()

    run = tolk_core.jit(step) if jit else step
    times = []
    for _ in range(steps):
        idx = rng.integers(0, len(images), 64)
        x, y = Tensor(images[idx]), Tensor(labels[idx])
        if ndev > 1:
            x, y = x.shard(devs, axis=0).realize(), y.shard(devs, axis=0).realize()
        t0, c0 = time.perf_counter(), time.process_time()
        run(x, y).item()
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    return statistics.median(w for w, _ in times[3:]) * 1e3, statistics.median(c for _, c in times[3:]) * 1e3


def _child(args: list[str], threads: str | None = None, reps: int = 31) -> Any:
    """Run one row in a child process (TOLK_CPU_DEVICES=2 unless the row is one device's; TOLK_DEVICE_THREADS
    `threads` when given) and return its JSON result."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])}
    for k in ("TOLK_CPU_DEVICES", "TOLK_DEVICE_THREADS"):
        env.pop(k, None)
    if args[0] == "allreduce" or int(args[1]) > 1:
        env["TOLK_CPU_DEVICES"] = "2"
    if threads is not None:
        env["TOLK_DEVICE_THREADS"] = threads
    out = subprocess.run([sys.executable, "-m", "bench.multidev", "--reps", str(reps), "--child", *args],
                         capture_output=True,
                         text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"bench.multidev child {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


MODES = {"2": "auto", "1": "threads", "0": "one after another"}  # TOLK_DEVICE_THREADS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=31)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--child", nargs="+")
    a = ap.parse_args()
    if a.child:
        kind = a.child[0]
        print(json.dumps(allreduce_rows(a.reps) if kind == "allreduce" else
                         step_row(int(a.child[1]), a.child[2] == "jit", a.steps)))
        return
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    for threads, mode in MODES.items():
        r = _child(["allreduce"], threads, a.reps)
        print(f"DEVICE_THREADS={threads} ({mode}), {r['direct']} calls folded in place:")
        for k, what in (("copyto", "np.copyto 4 MiB"), ("allreduce", "naive allreduce 4 MiB over 2 devices, eager"),
                        ("jitted", "the same allreduce, jitted"),
                        ("jitted_sum", "a sum over a sharded axis of 2 x 4 MiB, jitted")):
            print(f"  {what}: {r[k]:.3f} ms wall ({r[k] / r['copyto']:.1f}x the copy), {r[k + '_cpu']:.3f} ms CPU "
                  f"({r[k + '_cpu'] / r['copyto_cpu']:.1f}x)")
    for how in ("eager", "jit"):
        one = _child(["step", "1", how])
        two = {t: _child(["step", "2", how], t) for t in ("2", "1")}
        print(f"digits MLP data-parallel step, {how}: 1 device {one[0]:.2f} ms ({one[1]:.2f} CPU), 2 devices "
              f"{two['2'][0]:.2f} ms ({two['2'][1]:.2f} CPU, auto), {two['1'][0]:.2f} ms ({two['1'][1]:.2f} CPU, "
              "threads)")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
