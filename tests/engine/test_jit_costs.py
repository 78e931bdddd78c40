"""What a jitted step costs next to its eager step (docs/jit.md): capturing compiles no kernel the warm-up
compiled (only a Graph capability's own driver, where the device has one), and a replay launches no more
kernels and copies no more bytes than the eager call."""
from __future__ import annotations

import numpy as np

import tolk_core
from tolk_core.counters import GlobalCounters as G
from tolk_core.engine import compile as compile_mod
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device


def _mlp(x, w1, b1, w2, b2):
    return ((x @ w1 + b1).relu() @ w2 + b2).softmax()


def _inputs(device: str) -> list[Tensor]:
    r = np.random.default_rng(0)
    return [Tensor(r.standard_normal(s).astype(np.float32), device=device).realize()
            for s in ((16, 48), (48, 32), (32,), (32, 10), (10,))]


def _cost(call) -> dict[str, int]:
    before = G.snapshot()
    call()
    return {k: G.snapshot()[k] - before[k] for k in ("kernels_compiled", "compiles", "kernels_launched",
                                                     "bytes_copied")}


def test_capture_compiles_no_kernel_the_warm_up_compiled(device, monkeypatch) -> None:
    ts = _inputs(device)
    f = tolk_core.jit(_mlp)
    compiler = Device[ts[0].device].compiler
    modules: list[str] = []
    real = compiler.compile_cached
    monkeypatch.setattr(compiler, "compile_cached", lambda src: (modules.append(src), real(src))[1])
    warm = _cost(lambda: f(*ts).numpy())
    names = {ks.name for _, ks in compile_mod._programs.values()}
    modules.clear()
    capture = _cost(lambda: f(*ts).numpy())
    assert not [n for m in modules for n in names if f"{n}(" in m]  # no kernel of the warm-up compiled again
    replay = _cost(lambda: f(*ts).numpy())
    assert warm["kernels_launched"] > 1
    assert capture["kernels_compiled"] == 0 and replay["kernels_compiled"] == 0
    assert capture["compiles"] <= 1  # at most a Graph's driver (CPU), never the kernels again
    assert replay["compiles"] == 0


def test_a_replay_launches_and_copies_no_more_than_the_eager_step(device) -> None:
    ts = _inputs(device)
    f = tolk_core.jit(_mlp)
    eager = _cost(lambda: _mlp(*ts).numpy())
    for _ in range(2):
        f(*ts).numpy()
    replay = _cost(lambda: f(*ts).numpy())
    assert replay["kernels_launched"] <= eager["kernels_launched"]
    assert replay["bytes_copied"] <= eager["bytes_copied"]
    np.testing.assert_allclose(f(*ts).numpy(), _mlp(*ts).numpy(), rtol=1e-5, atol=1e-6)
