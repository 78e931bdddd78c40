"""Replay does no work besides launching: over 100 replays no graph rewrite, no allocation, no compile, no
schedule, and no new UOp is built."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.pattern import rewrite_stats
from tolk_core.ir.uop import UOp
from tolk_core.runtime import Allocator


@pytest.mark.parametrize("jit_mode", [1, 2], ids=["graphs", "no-graphs"])
def test_hundred_replays_do_no_work(device, jit_mode, monkeypatch) -> None:
    rng = np.random.default_rng(0)
    w = Tensor(rng.random((16, 16), dtype=np.float32), device=device)

    @tolk_core.jit
    def step(x: Tensor) -> Tensor:
        return ((x @ w).relu() @ w).softmax(axis=1)

    xs = [Tensor(rng.random((4, 16), dtype=np.float32), device=device) for _ in range(3)]
    allocs: list[int] = []
    real_alloc = Allocator.alloc
    monkeypatch.setattr(Allocator, "alloc", lambda self, n: allocs.append(n) or real_alloc(self, n))
    built: list[tuple] = []
    real_new = UOp.__new__
    with config.override(JIT=jit_mode):
        step(xs[0]), step(xs[1])
        before = (GlobalCounters.compiles, GlobalCounters.disk_cache_hits, GlobalCounters.schedules,
                  rewrite_stats.calls, len(allocs))
        launched = GlobalCounters.kernels_launched
        monkeypatch.setattr(UOp, "__new__", lambda cls, *a, **k: built.append(a) or real_new(cls, *a, **k))
        for i in range(100):
            out = step(xs[i % 3])
        monkeypatch.setattr(UOp, "__new__", real_new)
    assert (GlobalCounters.compiles, GlobalCounters.disk_cache_hits, GlobalCounters.schedules,
            rewrite_stats.calls, len(allocs)) == before
    assert built == [], f"replay built {len(built)} UOps"
    assert (GlobalCounters.kernels_launched - launched) % 100 == 0 and GlobalCounters.kernels_launched > launched
    x = xs[99 % 3].numpy()
    h = np.maximum(x @ w.numpy(), 0) @ w.numpy()
    e = np.exp(h - h.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
