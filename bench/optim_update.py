"""CPU time of a model workload's jitted train step, and of its optimizer update alone, with the kernels each
launches (docs/performance.md, "Optimizer updates in few kernels").

    python -m bench.optim_update cnn|gpt [--steps 20] [--updates 100]

Prints one JSON line. Times are `time.process_time` (every thread of the process), medians after 5 warm-up
calls: on a machine other work keeps busy, CPU time moves far less than wall time. The update alone is the
workload's optimizer (Adam for cnn, AdamW for gpt) over its parameters with fixed random gradients, jitted.
Run it once per tree being compared (PYTHONPATH picks the tree), alternating.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np


def _median_cpu_ms(call: Callable[[], object], n: int) -> tuple[float, float]:
    """(median CPU ms per call over `n` calls after 5 warm-up calls, kernels launched per call)."""
    from tolk_core.counters import GlobalCounters
    for _ in range(5):
        call()
    k0, samples = GlobalCounters.kernels_launched, []
    for _ in range(n):
        t0 = time.process_time()
        call()
        samples.append(time.process_time() - t0)
    return sorted(samples)[n // 2] * 1e3, (GlobalCounters.kernels_launched - k0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", choices=("cnn", "gpt"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--updates", type=int, default=100)
    args = ap.parse_args()
    import tolk_core
    from bench import models as M
    from tolk_core import Tensor
    from tolk_core.nn import optim

    job, inputs, _ = M.tolk_setup(args.name, "full", "CPU")
    step = tolk_core.jit(job.step)
    step_ms, step_kernels = _median_cpu_ms(lambda: step(*inputs)[0].numpy(), args.steps)
    params = job.model.parameters()
    rng = np.random.default_rng(0)
    for p in params:
        p.grad = Tensor(rng.standard_normal(p.shape).astype(np.float32) * 1e-3).realize()
    opt = optim.AdamW(params, lr=1e-3) if args.name == "gpt" else optim.Adam(params, lr=1e-3)

    def update(x: Tensor) -> Tensor:
        opt.step()
        return x + 0  # a jitted function returns a tensor

    jitted, x = tolk_core.jit(update), Tensor(np.zeros(1, np.float32)).realize()
    update_ms, update_kernels = _median_cpu_ms(lambda: jitted(x).numpy(), args.updates)
    print(json.dumps({"name": args.name, "step_cpu_ms": round(step_ms, 3), "step_kernels": step_kernels,
                      "update_cpu_ms": round(update_ms, 3), "update_kernels": update_kernels,
                      "parameters": len(params), "elements": int(sum(np.prod(p.shape) for p in params))}))


if __name__ == "__main__":
    main()
