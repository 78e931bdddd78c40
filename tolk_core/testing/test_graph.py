"""Tier graph: a device's Graph (from its GraphSpec, possibly another distribution's) replays a batch of launches
exactly as launching them one by one would, bit for bit, and rebinds buffers with ``update``."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.ir.uop import Variable
from tolk_core.testing import kernels
from tolk_core.testing.checks import require

pytestmark = [pytest.mark.graph, pytest.mark.requires("graph")]


def _program(dev):
    """A 3+-kernel program whose kernels depend on each other (a dropped or reordered launch shows)."""
    return kernels.build(lambda a, b: ((a @ b).relu().sum(axis=1) + a.max(axis=1)).softmax(),
                         ((24, 16), "float32"), ((16, 8), "float32"), device=dev.name)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((24, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)]


def _sequential(dev, built, arrays):
    bound = kernels.bind(dev, built, arrays)
    kernels.launch_all(bound)
    dev.synchronize()
    return bound.result()


def test_replay_equals_sequential_launches(tolk_device):
    built = _program(tolk_device)
    want = _sequential(tolk_device, built, _inputs(0))
    bound = kernels.bind(tolk_device, built, _inputs(0))
    graph = tolk_device.graph(tolk_device, bound.launches)
    graph()
    tolk_device.synchronize()
    got = bound.result()
    require(got.tobytes() == want.tobytes(), "Graph.__call__",
            f"replaying {len(bound.launches)} launches differs from launching them one by one "
            f"(max error {np.abs(got - want).max():.3g}): every launch must run, in order")
    graph()  # a second replay recomputes the same values
    tolk_device.synchronize()
    require(bound.result().tobytes() == want.tobytes(), "Graph.__call__", "a second replay gave other results")


def test_submitted_replays_read_their_own_bindings(tolk_device):
    """`submit()` (what an eager realize calls) may finish after it returns: two replays submitted back to back,
    the graph rebound to other buffers between them (`rebind`), each compute on the buffers bound when it was
    submitted, and a read of their outputs (a copy out) waits for them."""
    built = _program(tolk_device)
    first, second = kernels.bind(tolk_device, built, _inputs(3)), kernels.bind(tolk_device, built, _inputs(4))
    graph = tolk_device.graph(tolk_device, first.launches)
    graph()
    graph.rebind([b for ln in first.launches for b in ln.bufs])
    graph.submit()
    graph.rebind([b for ln in second.launches for b in ln.bufs])
    graph.submit()
    for bound, seed in ((first, 3), (second, 4)):
        want = _sequential(tolk_device, built, _inputs(seed))
        require(bound.result().tobytes() == want.tobytes(), "Graph.submit",
                "a submitted replay must compute on the buffers bound when it was submitted, and reading its "
                "output must wait for it")


def test_update_rebinds_inputs(tolk_device):
    built = _program(tolk_device)
    first, second = kernels.bind(tolk_device, built, _inputs(1)), kernels.bind(tolk_device, built, _inputs(2))
    graph = tolk_device.graph(tolk_device, first.launches)
    graph()
    for i, ln in enumerate(second.launches):
        graph.update(i, bufs=ln.bufs, vals=ln.vals)
    graph()
    tolk_device.synchronize()
    want = _sequential(tolk_device, built, _inputs(2))
    require(second.result().tobytes() == want.tobytes(), "Graph.update",
            "after update(i, bufs=...) a replay must compute on the new buffers")


def test_update_rebinds_values(tolk_device):
    x = np.random.default_rng(5).standard_normal((64, 12)).astype(np.float32)
    n = Variable("n", 1, 64)
    built = kernels.build(lambda a: (a.shrink(((0, n.bind(40)), None)) + 1).max(axis=0), ((64, 12), "float32"),
                          device=tolk_device.name)
    bound = kernels.bind(tolk_device, built, [x])
    graph = tolk_device.graph(tolk_device, bound.launches)
    for value in (40, 3, 64):
        for i, ln in enumerate(bound.launches):
            graph.update(i, vals=[value] * len(ln.vals))
        graph()
        tolk_device.synchronize()
        require(bound.result().tobytes() == (x[:value] + 1).max(0).tobytes(), "Graph.update",
                f"after update(i, vals=[{value}]) a replay must use the new value")


def test_update_checks_arity(tolk_device):
    built = _program(tolk_device)
    bound = kernels.bind(tolk_device, built, _inputs(3))
    graph = tolk_device.graph(tolk_device, bound.launches)
    with pytest.raises(ValueError):
        graph.update(0, bufs=bound.launches[0].bufs + bound.launches[0].bufs)
    with pytest.raises(ValueError):
        graph.update(0, vals=[*bound.launches[0].vals, 1])


def test_empty_graph(tolk_device, tolk_record):
    graph = tolk_device.graph(tolk_device, [])
    t = graph(wait=True)
    if tolk_record.spec.capabilities.timing:
        require(isinstance(t, float), "Graph.__call__", f"wait=True must return seconds, got {t!r}")
