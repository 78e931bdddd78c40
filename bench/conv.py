"""conv2d forward and backward against torch at the model suite's layer shapes.

`python -m bench.conv [--device CPU] [--reps 15] [--only NAME]` times, for each shape, Tolk's jitted
forward (`x.conv2d(w, padding=...)`), its input gradient and its weight gradient (each its own jitted
function, so each row is the kernels of that one quantity) and torch's same three, in interleaved calls
(Tolk, torch, Tolk, ...), and prints GFLOP/s of the median call (2 * N * Cout * Cin/groups * kh * kw * Ho * Wo
flops for each of the three) and x torch (torch's median time over Tolk's: above 1, Tolk is faster).
Tolk's results are checked against torch's first.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# name: (N, Cin, H, W, Cout, k, stride, padding)
SHAPES: dict[str, tuple[int, int, int, int, int, int, int, int]] = {
    "resnet 16x16x32x32 16->16 3x3 p1": (16, 16, 32, 32, 16, 3, 1, 1),
    "resnet stem 16x3x32x32 3->16 3x3 p1": (16, 3, 32, 32, 16, 3, 1, 1),
    "cnn conv1 64x1x8x8 1->16 3x3 p1": (64, 1, 8, 8, 16, 3, 1, 1),
    "cnn conv2 64x16x4x4 16->32 3x3 p1": (64, 16, 4, 4, 32, 3, 1, 1),
    "prepadded 8x32x34x34 32->64 3x3 p0": (8, 32, 34, 34, 64, 3, 1, 0),
    "resnet50 s2 2x128x56x56 128->128 3x3 p1": (2, 128, 56, 56, 128, 3, 2, 1),  # by phases
    "resnet50 stem 2x3x112x112 3->64 7x7 s2 p3": (2, 3, 112, 112, 64, 7, 2, 3),
}


def _flops(n: int, cin: int, h: int, w: int, cout: int, k: int, s: int, p: int) -> float:
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return 2.0 * n * cout * cin * k * k * ho * wo


def _tolk_fns(shape: tuple[int, ...], device: str, rng: np.random.Generator) -> dict[str, Callable[[], Any]]:
    import tolk_core
    from tolk_core import Tensor
    n, cin, h, w, cout, k, s, p = shape
    xs = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    ws = rng.standard_normal((cout, cin, k, k)).astype(np.float32) * 0.1
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    gs = rng.standard_normal((n, cout, ho, wo)).astype(np.float32)
    x, wt, g = (Tensor(a, device=device).realize() for a in (xs, ws, gs))
    xg, wg = (Tensor(a, device=device).realize().requires_grad_() for a in (xs, ws))

    def fwd(x: Tensor, wt: Tensor) -> Tensor:
        return x.conv2d(wt, stride=s, padding=p).realize()

    def grads(x: Tensor, wt: Tensor, g: Tensor, which: str) -> Tensor:
        t = x if which == "dx" else wt
        t.grad = None
        (x.conv2d(wt, stride=s, padding=p) * g).sum().backward()
        assert t.grad is not None
        return t.grad.realize()

    from tolk_core.plugins import Device
    dev = Device[x.device]

    def synced(f: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        def call() -> Any:
            out = f(*args)
            dev.synchronize()  # launches may be asynchronous (OpenCL): time until the result exists
            return out
        return call
    jf = tolk_core.jit(fwd)
    jdx = tolk_core.jit(lambda x, wt, g: grads(x, wt, g, "dx"))
    jdw = tolk_core.jit(lambda x, wt, g: grads(x, wt, g, "dw"))
    return {"fwd": synced(jf, x, wt), "dx": synced(jdx, xg, wt, g), "dw": synced(jdw, x, wg, g),
            "_inputs": (xs, ws, gs)}  # type: ignore[dict-item]


def _torch_fns(shape: tuple[int, ...], inputs: tuple[np.ndarray, ...]) -> dict[str, Callable[[], Any]]:
    import torch
    n, cin, h, w, cout, k, s, p = shape
    xs, ws, gs = (torch.from_numpy(a) for a in inputs)
    conv = torch.nn.functional.conv2d

    def dx() -> Any:
        xx = xs.clone().requires_grad_(True)
        (conv(xx, ws, stride=s, padding=p) * gs).sum().backward()
        return xx.grad

    def dw() -> Any:
        ww = ws.clone().requires_grad_(True)
        (conv(xs, ww, stride=s, padding=p) * gs).sum().backward()
        return ww.grad
    return {"fwd": lambda: conv(xs, ws, stride=s, padding=p), "dx": dx, "dw": dw}


def _median_interleaved(a: Callable[[], Any], b: Callable[[], Any], reps: int,
                        clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(reps):
        for f, ts in ((a, ta), (b, tb)):
            st = clock()
            f()
            ts.append(clock() - st)
    return statistics.median(ta), statistics.median(tb)


def run(device: str, reps: int, only: str | None, cpu_time: bool = False) -> None:
    import os
    # torch's OpenMP threads spin by default and then wait for a descheduled teammate on a shared machine;
    # Tolk's CPU device runs its threads passive (docs/performance.md, "Threads"): the same for both
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    rng = np.random.default_rng(0)
    print("| shape | pass | Tolk GFLOP/s | torch GFLOP/s | Tolk ms | torch ms | x torch |\n"
          "|---|---|---|---|---|---|---|")
    for name, shape in SHAPES.items():
        if only and only not in name:
            continue
        tf = _tolk_fns(shape, device, rng)
        pf = _torch_fns(shape, tf.pop("_inputs"))  # type: ignore[arg-type]
        flops = _flops(*shape)
        for key in ("fwd", "dx", "dw"):
            for _ in range(3):  # warm-up and capture
                got = tf[key]()
            want = pf[key]().detach().numpy()
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
            t_tolk, t_torch = _median_interleaved(tf[key], pf[key], reps,
                                                  time.process_time if cpu_time else time.perf_counter)
            print(f"| {name} | {key} | {flops / t_tolk / 1e9:.1f} | {flops / t_torch / 1e9:.1f} | "
                  f"{t_tolk * 1e3:.3f} | {t_torch * 1e3:.3f} | {t_torch / t_tolk:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--only", default=None)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time each call by the process's CPU time (with OMP_NUM_THREADS=1: the time the call "
                         "computed, not the time other work on the machine held the core)")
    args = ap.parse_args()
    run(args.device, args.reps, args.only, args.cpu_time)


if __name__ == "__main__":
    main()
