"""The JIT's Graph batches over several devices (docs/jit.md, graph batching): each device's kernels batch into
its own Graph; a copy closes the open batches unless the destination's Graph takes copies
(`GraphSpec.supports_copy`)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tolk_core
from tests.conftest import has_opencl
from tolk_core import Tensor, config
from tolk_core.counters import GlobalCounters
from tolk_core.engine.compile import arg_device
from tolk_core.ir.ops import Op


def _batches(linear) -> list[tuple[str, list[Op]]]:
    """(device, the ops of its calls) of each graph batch of a captured LINEAR."""
    out = []
    for c in linear.src:
        if c.src[0].op is Op.CUSTOM_FUNCTION:
            calls = c.src[0].src[0].src
            out.append((arg_device(calls[0].src[1]), [k.src[0].op for k in calls]))
    return out


def _chain(x: Tensor) -> Tensor:
    for i in range(4):
        x = (x * 1.5 + i).realize()  # a kernel each
    return x


def test_every_device_batches_its_kernels(cpus4):
    devs = cpus4[:2]
    jitted = tolk_core.jit(lambda x: _chain(x).realize())
    before = GlobalCounters.graph_replays
    for i in range(4):
        x = np.random.default_rng(i).random((4, 8), dtype=np.float32)
        out = jitted(Tensor(x).shard(devs, axis=0).realize())
        np.testing.assert_allclose(out.numpy(), _chain(Tensor(x)).numpy(), rtol=1e-6)
    batches = _batches(jitted.captured.linear)
    assert sorted(d for d, _ in batches) == sorted(devs)  # not only the first device's kernels
    assert all(ops == [Op.PROGRAM] * 4 for _, ops in batches)
    assert GlobalCounters.graph_replays - before == 2 * 3  # both batches, at the capture call and two replays


def _gather_then_compute(x: Tensor) -> Tensor:
    return (_chain(x).to("CPU:1") * 2).contiguous().realize()


def test_a_copy_closes_the_batches(cpus4):
    jitted = tolk_core.jit(_gather_then_compute)
    x = np.random.default_rng(0).random((4, 8), dtype=np.float32)
    for _ in range(3):
        out = jitted(Tensor(x, device="CPU").realize())
    np.testing.assert_allclose(out.numpy(), _chain(Tensor(x)).numpy() * 2, rtol=1e-6)
    assert all(Op.COPY not in ops for _, ops in _batches(jitted.captured.linear))


def test_a_graph_that_takes_copies_batches_them(cpus4, monkeypatch):
    from tolk_core.plugins import Device
    from tolk_core.runtime import Graph
    dev = Device["CPU:1"]
    spec = dataclasses.replace(dev._graph_spec, graph=Graph, supports_copy=True)  # the base Graph performs copies
    monkeypatch.setattr(dev, "_graph_spec", spec)
    assert dev.graph_takes_copies
    jitted = tolk_core.jit(_gather_then_compute)
    with config.override(JIT_BATCH_SIZE=0):
        for i in range(3):
            x = np.random.default_rng(i).random((4, 8), dtype=np.float32)
            out = jitted(Tensor(x, device="CPU").realize())
            np.testing.assert_allclose(out.numpy(), _chain(Tensor(x)).numpy() * 2, rtol=1e-6)
    on_cpu1 = [ops for d, ops in _batches(jitted.captured.linear) if d == "CPU:1"]
    assert on_cpu1 and on_cpu1[0][0] is Op.COPY and Op.PROGRAM in on_cpu1[0]


@pytest.mark.parametrize("supports_copy", [False, True])
def test_graph_spec_flag_defaults_to_closing_batches(supports_copy):
    from tolk_core.plugins.specs import GraphSpec
    spec = GraphSpec(device="X", graph="m:G", supports_copy=supports_copy)
    assert GraphSpec(device="X", graph="m:G").supports_copy is False
    assert spec.supports_copy is supports_copy


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
def test_cpu_and_opencl_each_batch_their_kernels():
    devs = ("CPU", "OPENCL")
    jitted = tolk_core.jit(lambda x: _chain(x).realize())
    with config.override(DEVICE_THREADS=1):  # the OpenCL steps from their own thread too
        for i in range(3):
            x = np.random.default_rng(i).random((4, 8), dtype=np.float32)
            out = jitted(Tensor(x).shard(devs, axis=0).realize())
            np.testing.assert_allclose(out.numpy(), _chain(Tensor(x)).numpy(), rtol=1e-6)
    assert sorted(d for d, _ in _batches(jitted.captured.linear)) == ["CPU", "OPENCL:0"]
