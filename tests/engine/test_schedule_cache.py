"""The schedule cache (engine.schedule) and linear-time kernel boundaries (schedule.rangeify.realize_points)."""
from __future__ import annotations

import numpy as np

from tests.frontend.helpers import close
from tolk_core.counters import GlobalCounters
from tolk_core.frontend.tensor import Tensor
from tolk_core.schedule import rangeify


def _mlp(x, w1, b1, w2):
    return (x @ w1 + b1).relu() @ w2


def test_repeated_realize_skips_scheduling_and_reads_new_inputs():
    rng = np.random.default_rng(0)
    arrays = [[rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16,), (16, 4))]
              for _ in range(3)]
    results = []
    for i, arrs in enumerate(arrays):
        ts = [Tensor(a, device="CPU") for a in arrs]
        before = GlobalCounters.schedule_cache_hits
        out = _mlp(*ts).realize()
        # the first graph of this structure may already be cached by another test; later ones must hit
        assert i == 0 or GlobalCounters.schedule_cache_hits == before + 1
        results.append(out)
    for out, (x, w1, b1, w2) in zip(results, arrays, strict=True):  # fresh output storage per call: no aliasing
        close(out.numpy(), np.maximum(x @ w1 + b1, 0) @ w2)


def test_structurally_different_graphs_schedule_separately():
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device="CPU")
    before = GlobalCounters.schedule_cache_hits
    s0 = (a * 7).sum(axis=0).realize()
    s1 = (a * 7).sum(axis=1).realize()
    assert GlobalCounters.schedule_cache_hits == before  # neither reuses the other's schedule
    close(s0.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).sum(0) * 7)
    close(s1.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).sum(1) * 7)


def _visited(layers: int, monkeypatch) -> int:
    seen = [0]
    body = rangeify._kernel_body

    def counting(root, realized):
        out = body(root, realized)
        seen[0] += len(out)
        return out
    monkeypatch.setattr(rangeify, "_kernel_body", counting)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 4)).astype(np.float32), device="CPU")
    for _ in range(layers):
        x = (x @ Tensor(rng.standard_normal((4, 4)).astype(np.float32), device="CPU")).relu()
    rangeify.realize_points([x.uop])
    monkeypatch.undo()
    return seen[0]


def test_kernel_boundaries_take_linear_work(monkeypatch):
    small, large = _visited(40, monkeypatch), _visited(80, monkeypatch)
    assert large < 2.5 * small, (small, large)
