"""Tier stress (opt-in, --tolk-stress): many launches, many allocations."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tolk_core.ir.dtype import dtypes
from tolk_core.runtime import Buffer
from tolk_core.testing import kernels
from tolk_core.testing.checks import require

pytestmark = pytest.mark.stress


def test_many_launches(tolk_device):
    k = kernels.build(lambda a: a + 1, ((1000,), "float32"), device=tolk_device.name)
    bound = kernels.bind(tolk_device, k, [np.zeros(1000, np.float32)])
    ln = bound.launches[0]
    out = bound.bufs[k.output].handle
    ln.program(*ln.bufs, global_size=ln.global_size, local_size=ln.local_size)  # out = in + 1
    for _ in range(999):  # out = out + 1: each launch depends on the one before
        ln.program(out, out, global_size=ln.global_size, local_size=ln.local_size)
    tolk_device.synchronize()
    require(np.array_equal(bound.result(), np.full(1000, 1000, np.float32)), "Program.__call__",
            "1000 dependent launches in a row lost or reordered some")


def test_memory_pressure(tolk_device):
    for i in range(200):
        b = Buffer(tolk_device.name, 1 << 20, dtypes.uint8).allocate()
        b.copyin(np.full(1 << 20, i % 256, np.uint8).data)
        del b
        if i % 50 == 0:
            gc.collect()
    tolk_device.allocator.free_cache()
