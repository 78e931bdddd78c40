"""Attention forward + backward against torch's scaled_dot_product_attention, by CPU time.

`python -m bench.attention [--shapes B,H,T,D ...] [--calls N] [--mode sdpa|written]` (docs/performance.md,
"Attention"): for each shape, causal and not, Tolk's jitted step (the gradients of q, k and v of a sum loss,
read back as numpy) and torch's (`F.scaled_dot_product_attention`, then `.sum().backward()`) are called in
turn, N times each, in one process, and each call is timed by `time.process_time` (CPU time: on a machine
shared with other work the wall time mostly measures the waiting). The row prints the medians and torch's over
Tolk's (> 1: Tolk is faster), and the largest normwise relative difference of the three gradients. Run it with
OMP_NUM_THREADS set: torch gets as many threads, and the CPU time of both counts every thread.
"""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

import tolk_core
from tolk_core import Tensor

SHAPES = ("8,8,256,64", "2,4,128,64", "1,12,128,32", "32,12,128,32")  # the model suite's, MiniLM's batch 1, 32


def _tolk_step(mode: str, causal: bool) -> Callable[[Tensor, Tensor, Tensor], list[Tensor]]:
    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if mode == "sdpa":
            return q.scaled_dot_product_attention(k, v, is_causal=causal)
        s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        if causal:
            s = Tensor.full((q.shape[-2], k.shape[-2]), True, tolk_core.dtypes.bool).tril().where(s, float("-inf"))
        return s.softmax(-1) @ v

    @tolk_core.jit
    def step(q: Tensor, k: Tensor, v: Tensor) -> list[Tensor]:
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        attend(*leaves).sum().backward()
        return [x.grad for x in leaves if x.grad is not None]
    return step


def _row(shape: tuple[int, ...], causal: bool, mode: str, calls: int) -> str:
    import torch
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    step, ours = _tolk_step(mode, causal), [Tensor(a) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]

    def tolk_call() -> list[np.ndarray]:
        return [g.numpy() for g in step(*ours)]

    def torch_call() -> list[np.ndarray]:
        for t in theirs:
            t.grad = None
        torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=causal).sum().backward()
        return [t.grad.numpy() for t in theirs if t.grad is not None]
    for _ in range(3):  # warm-up and the JIT's capture
        got, want = tolk_call(), torch_call()
    err = max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)) for g, w in zip(got, want, strict=True))
    times: dict[str, list[float]] = {"tolk": [], "torch": []}
    for _ in range(calls):
        for name, fn in (("tolk", tolk_call), ("torch", torch_call)):
            t0 = time.process_time()
            fn()
            times[name].append(time.process_time() - t0)
    a, b = (float(np.median(times[n])) * 1e3 for n in ("tolk", "torch"))
    return (f"{'x'.join(map(str, shape)):>14} causal={int(causal)} {mode}: Tolk {a:8.2f} ms  torch sdpa {b:8.2f} ms"
            f"  torch/Tolk {b / a:5.2f}  max rel err {err:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), help="B,H,T,D (q, k and v all B x H x T x D)")
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--mode", choices=("sdpa", "written"), default="sdpa",
                    help="Tolk's scaled_dot_product_attention, or softmax(q k^T / sqrt(d)) v written out")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for s in args.shapes:
        for causal in (True, False):
            print(_row(tuple(int(x) for x in s.split(",")), causal, args.mode, args.calls), flush=True)


if __name__ == "__main__":
    main()
