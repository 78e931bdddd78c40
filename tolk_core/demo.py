"""`tolk demo`: the main job.

- `train_main` (`tolk demo`): trains a small classifier on scikit-learn's 8x8 digits (shipped in the package)
  with a jitted training step where `tolk_core.jit` exists, and reports device, held-out accuracy, steps/s and
  kernels per step for the eager and the jitted step.
- `run` (`tolk demo --infer`): an MLP forward (784-256-10, batch 64) and one attention head (q, k, v of shape
  (1, 128, 64)) on the chosen device, each checked against numpy, with kernel counts and time per call."""
from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tolk_core
from tolk_core.counters import GlobalCounters
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import F, Linear, Module
from tolk_core.nn import manual_seed as nn_seed
from tolk_core.nn.optim import Adam, Optimizer


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


# ---------------------------------------------------------------- training demo (`tolk demo`)
_DIGITS = Path(__file__).parent / "data" / "digits.npz"


class DemoDataError(RuntimeError):
    """The digits data is neither shipped in the package nor loadable from scikit-learn."""


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits: (1797, 64) float32 pixels scaled to [0, 1] and (1797,) int32 labels.

    Read from the copy shipped in the package (made once from `sklearn.datasets.load_digits`); where the
    package was installed without it, scikit-learn (the `tolk-core[demo]` extra) provides it."""
    if _DIGITS.exists():
        with np.load(_DIGITS) as d:
            images, labels = d["images"], d["labels"]
    else:
        try:
            from sklearn.datasets import load_digits as sk_load_digits
        except ImportError as e:
            raise DemoDataError(f"the digits data is missing ({_DIGITS}) and scikit-learn is not installed: "
                                "install the demo extra, pip install 'tolk-core[demo]'") from e
        d = sk_load_digits()
        images, labels = d.images, d.target
    return (images.reshape(len(images), 64) / 16).astype(np.float32), labels.astype(np.int32)


def split_digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(train x, train y, test x, test y): a fixed shuffled split of the digits."""
    x, y = load_digits()
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


class DigitsNet(Module):
    """The demo's classifier: 64 pixels -> 128 hidden (ReLU) -> 10 classes."""

    def __init__(self, device: str | None = None, hidden: int = 128):
        self.l1 = Linear(64, hidden, device=device)
        self.l2 = Linear(hidden, 10, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def make_step(model: Module, opt: Optimizer) -> Callable[[Tensor, Tensor], Tensor]:
    """One training step on a batch: forward, backward, optimizer update; returns the (realized) loss."""
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)  # the loss is computed with the gradients, before the parameters change
        return loss
    return step


def mlp_sgd(rng: np.random.Generator, hidden: int = 32, lr: float = 0.2, momentum: float = 0.9,
            devices: tuple[str, ...] | None = None) -> tuple[list[Tensor], Callable[[Tensor, Tensor], Tensor]]:
    """A 64-`hidden`-10 ReLU MLP for the digits, its weights and biases drawn from `rng` (uniform in +-0.2, so
    every process seeded alike draws the same), replicated over `devices` when given (data-parallel: the
    batch sharded over the same tuple), and its SGD-with-momentum train step (forward, cross-entropy,
    backward, update; returns the loss). The multi-device and multi-process runs and their tests use it."""
    from tolk_core.nn.optim import SGD
    params = [Tensor(rng.uniform(-0.2, 0.2, s).astype(np.float32)).requires_grad_()
              for s in [(hidden, 64), (hidden,), (10, hidden), (10,)]]
    for p in params if devices else []:
        p.to_(devices)
    w1, b1, w2, b2 = params
    opt = SGD(params, lr=lr, momentum=momentum)

    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = F.cross_entropy((x @ w1.T + b1).relu() @ w2.T + b2, y)
        opt.zero_grad()
        loss.backward()
        opt.step(loss)
        return loss
    return params, step


def accuracy(model: Module, x: np.ndarray, y: np.ndarray, device: str | None = None) -> float:
    model.eval()
    pred = model(Tensor(x, device=device)).numpy().argmax(axis=1)
    model.train()
    return float((pred == y).mean())


def _progress(done: int, total: int, loss: float, phase: str) -> None:
    """A progress bar on stderr: redrawn in place on a terminal, else a line per tenth of the run."""
    tty = sys.stderr.isatty()
    if not tty and done != total and done % max(total // 10, 1):
        return
    width = 30
    filled = width * done // total
    start, end = "\r" if tty else "", "" if tty and done != total else "\n"
    sys.stderr.write(f"{start}  [{'#' * filled}{'.' * (width - filled)}] {done:4d}/{total} steps  loss {loss:.4f}  "
                     f"({phase}){end}")
    sys.stderr.flush()


def train(device: str | None = None, steps: int | None = None, quick: bool = False, use_jit: bool = True,
          batch: int = 128, lr: float = 5e-3, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Train DigitsNet with Adam on the digits and return a report dict (also printed by `train_main`).

    The first 10 steps run the step function eagerly (timed after the first, which compiles: the eager rate),
    the rest run it through `tolk_core.jit` where that exists (its first two calls warm up and capture, the
    replays are timed); without a JIT every step is eager. Both phases train the same model, so held-out
    accuracy reflects the whole run."""
    steps = steps if steps is not None else (60 if quick else 200)
    xtr, ytr, xte, yte = split_digits()
    nn_seed(seed)
    model = DigitsNet(device)
    opt = Adam(model.parameters(), lr=lr)
    step = make_step(model, opt)
    jit = getattr(tolk_core, "jit", None) if use_jit else None
    jitted = jit(step) if jit is not None else None
    eager_steps = min(steps, 10 if jitted is not None else steps)
    rng = np.random.default_rng(seed)
    stats: dict[str, list[float]] = {"eager": [0.0, 0, 0], "jit": [0.0, 0, 0]}  # seconds, steps, kernels
    loss = float("nan")
    for i in range(steps):
        idx = rng.integers(0, len(xtr), batch)
        x, y = Tensor(xtr[idx], device=device), Tensor(ytr[idx], device=device)
        phase = "eager" if i < eager_steps or jitted is None else "jit"
        fn = jitted if phase == "jit" and jitted is not None else step
        k0, t0 = GlobalCounters.kernels_launched, time.perf_counter()
        loss = fn(x, y).item()
        if (phase == "eager" and i > 0) or i >= eager_steps + 2:  # compiling calls are not timed
            s = stats[phase]
            s[0] += time.perf_counter() - t0
            s[1] += 1
            s[2] += GlobalCounters.kernels_launched - k0
        if progress:
            _progress(i + 1, steps, loss, phase)
    report: dict[str, Any] = {"device": x.device, "steps": steps, "final_loss": loss,
                              "accuracy": accuracy(model, xte, yte, device), "test_size": len(yte)}
    for phase, (secs, n, kernels) in stats.items():
        if n:
            report[phase] = {"steps_per_s": n / secs, "kernels_per_step": kernels / n, "timed_steps": n}
    return report


def train_main(device: str | None = None, steps: int | None = None, quick: bool = False, use_jit: bool = True,
               infer: bool = False) -> int:
    """`tolk demo`: train, print the report, return an exit code (0 when held-out accuracy is >= 95%, or the
    run completed in --quick mode)."""
    if infer:
        return run(device)
    try:
        split_digits()
    except DemoDataError as e:
        print(f"tolk demo: {e}", file=sys.stderr)
        return 2
    st = time.perf_counter()
    print("tolk demo: training a 64-128-10 classifier on scikit-learn's 8x8 digits (1797 images)")
    r = train(device, steps, quick, use_jit)
    total = time.perf_counter() - st
    print(f"  device            {r['device']}")
    print(f"  held-out accuracy {r['accuracy'] * 100:.1f}% of {r['test_size']} images after {r['steps']} steps "
          f"(final loss {r['final_loss']:.4f})")
    for phase in ("eager", "jit"):
        if (p := r.get(phase)) is not None:
            print(f"  {phase:5s} step        {p['steps_per_s']:8.1f} steps/s  {p['kernels_per_step']:5.1f} "
                  f"kernels/step  ({p['timed_steps']} timed steps)")
    if "jit" in r and "eager" in r:
        print(f"  jit speedup       {r['jit']['steps_per_s'] / r['eager']['steps_per_s']:.1f}x")
    elif "jit" not in r:
        print("  jit               not available in this build (tolk_core.jit): eager steps only")
    print(f"  total time        {total:.1f} s")
    ok = quick or r["accuracy"] >= 0.95
    if not ok:
        print("  FAIL: held-out accuracy below 95%")
    return 0 if ok else 1
