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


def test_repeated_assigns_reuse_the_store_schedule_with_their_own_buffers():
    """An assign of a graph equal to an earlier one up to its buffers (an optimizer's update each step) hits
    the cache and stores into this call's destination, reading this call's inputs."""
    rng = np.random.default_rng(1)
    want, got = [], []
    for _ in range(3):
        p0, g0 = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
        p, g = Tensor(p0, device="CPU"), Tensor(g0, device="CPU")
        for step in range(3):
            before = GlobalCounters.schedule_cache_hits
            p.assign(p - 0.5 * g)
            if step:  # the first store of this structure may already be cached by another call
                assert GlobalCounters.schedule_cache_hits == before + 1
        want.append(p0 - 3 * 0.5 * g0)
        got.append(p)
    for w, t in zip(want, got, strict=True):
        close(t.numpy(), w)


def test_a_store_that_reads_its_own_destination_does_not_share_a_schedule_with_one_that_does_not():
    """Which buffers alias is part of the key: `a.assign(a.flip(0))` must copy `a` out first (the store would
    overwrite what it still reads), `a.assign(b.flip(0))` need not; neither reuses the other's plan."""
    x = np.arange(6, dtype=np.float32)
    a, b = Tensor(x.copy(), device="CPU"), Tensor(x * 10, device="CPU")
    c, d = Tensor(x.copy(), device="CPU"), Tensor(x * 10, device="CPU")
    a.assign(b.flip(0))
    before = GlobalCounters.schedule_cache_hits
    c.assign(c.flip(0))
    assert GlobalCounters.schedule_cache_hits == before
    d.assign(d.flip(0))  # the aliased form again, other buffers: a hit
    assert GlobalCounters.schedule_cache_hits == before + 1
    close(a.numpy(), (x * 10)[::-1])
    close(c.numpy(), x[::-1])
    close(d.numpy(), (x * 10)[::-1])


# ---------------------------------------------------------------------------------------------- the survey
def _by_walks(sink, device):
    """What `survey` reports, worked out by separate plain walks over the graph (the reference)."""
    from tolk_core.ir.ops import Op
    nodes = sink.toposort()
    inputs = [u for u in nodes if u.op is Op.BUFFER]
    reads = {u for u in nodes if any(s.op is Op.BUFFER for s in u.toposort())}
    crosses = any(u.op is Op.COPY or (u.op is Op.BUFFER and u.src[1].arg != device) for u in nodes)
    return inputs, reads, crosses


def test_the_survey_agrees_with_separate_walks():
    """One walk gives a realize its graph's inputs, its storage reads and whether it crosses devices: equal to
    separate walks, on graphs reading storage and constants, on two devices, and over a bound Variable."""
    from tolk_core.engine.schedule import structure, survey
    from tolk_core.ir.dtype import dtypes
    from tolk_core.ir.ops import Op
    from tolk_core.ir.uop import UOp, Variable
    a, b = Tensor(np.arange(6, dtype=np.float32)).realize(), Tensor(np.ones(6, np.float32)).realize()
    n = Variable("n", 1, 6)
    graphs = {
        "storage and constants": [(a * 2 + b).sum(), Tensor.full((3,), 2.0) + 1],
        "another device": [a + Tensor(np.ones(6, np.float32), device="OPENCL").realize().to("CPU")],
        "a bound variable": [a.shrink(((0, n.bind(4)),)) * 3],
    }
    for what, values in graphs.items():
        sink = UOp(Op.SINK, dtypes.void, tuple(t.uop for t in values))
        seen = survey(sink, "CPU")
        inputs, reads, crosses = _by_walks(sink, "CPU")
        assert seen.nodes == sink.toposort() and seen.inputs == inputs and seen.reads == reads, what
        assert seen.crosses == crosses and seen.crosses == (what == "another device"), what
        assert seen.binds == (what == "a bound variable"), what
        assert seen.positions == {u: i for i, u in enumerate(seen.nodes)} and seen.shape == structure(sink), what
