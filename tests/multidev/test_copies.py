"""Copies between devices (docs/plugins.md, copies between devices): the destination device's own copy
(`Allocator.copy_from_peer`) when its backend offers one, else host memory to host memory, else through the
host; each way counted."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import has_opencl
from tolk_core import Tensor
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers
from tolk_core.ir.dtype import dtypes


def test_a_backend_hook_is_used_before_the_host(cpus4, monkeypatch):
    from tolk_cpu.runtime import CPUAllocator
    seen = []

    def copy_from_peer(self, dest, src_alloc, src, nbytes):
        seen.append(nbytes)
        dest.mv[:nbytes] = src.mv[:nbytes]
        return True

    monkeypatch.setattr(CPUAllocator, "copy_from_peer", copy_from_peer)
    x = np.arange(100, dtype=np.float32) - 50
    before = GlobalCounters.snapshot()
    out = (Tensor(x, device="CPU:3") * 2).to("CPU:1").numpy()
    after = GlobalCounters.snapshot()
    np.testing.assert_array_equal(out, x * 2)
    assert seen == [400]
    assert after["copies_device"] == before["copies_device"] + 1
    assert after["copies_direct"] == before["copies_direct"]


def test_host_memory_devices_copy_directly(cpus4):
    x = np.arange(10, dtype=np.int64)
    before = GlobalCounters.snapshot()
    out = Tensor(x, device="CPU:2").to("CPU").numpy()
    np.testing.assert_array_equal(out, x)
    assert GlobalCounters.copies_direct == before["copies_direct"] + 1
    assert GlobalCounters.copies_device == before["copies_device"]


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
def test_opencl_buffers_of_one_context_copy_on_the_device():
    x = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    src = buffers.from_numpy(x, dtypes.float32, "OPENCL")
    dest = buffers.new_buffer("OPENCL", x.size, dtypes.float32)
    before = GlobalCounters.copies_device
    assert buffers.copy_buffer(dest, src) == "device"
    assert GlobalCounters.copies_device == before + 1
    np.testing.assert_array_equal(buffers.to_numpy(dest, x.shape, dtypes.float32), x)


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
def test_cpu_and_opencl_copy_through_the_host_without_staging():
    x = np.random.default_rng(3).standard_normal((7, 5)).astype(np.float32)
    before = GlobalCounters.snapshot()
    there = (Tensor(x, device="CPU") + 1).to("OPENCL")
    back = (there * 3).to("CPU").numpy()
    np.testing.assert_allclose(back, (x + 1) * 3, rtol=1e-6)
    assert GlobalCounters.copies_device == before["copies_device"]  # no device copies between these two
    for a, b in (("CPU", "OPENCL"), ("OPENCL", "CPU")):  # read out of, or into, the CPU's memory as it is
        src = buffers.from_numpy(x.reshape(-1), dtypes.float32, a)
        dest = buffers.new_buffer(b, x.size, dtypes.float32)
        assert buffers.copy_buffer(dest, src) == "host"
        np.testing.assert_array_equal(buffers.to_numpy(dest, x.shape, dtypes.float32), x)
