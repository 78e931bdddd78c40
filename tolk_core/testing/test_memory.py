"""Tier memory: allocation, copies in and out of exactly the buffer's size, views, reuse, no leaks."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tolk_core.ir.dtype import dtypes
from tolk_core.runtime import Buffer
from tolk_core.testing.checks import require

pytestmark = pytest.mark.memory
U8 = dtypes.uint8


def _pattern(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + n).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("nbytes", [1, 3, 64, 4099, 1 << 20])
def test_copyin_copyout_roundtrip(tolk_device, nbytes):
    sent = _pattern(nbytes)
    buf = Buffer(tolk_device.name, nbytes, U8).copyin(sent.data)
    out = np.full(nbytes + 16, 0xA5, np.uint8)  # a guard zone after the destination
    tolk_device.allocator.copyout(out[:nbytes].data, buf.handle)
    bad = np.flatnonzero(out[:nbytes] != sent)
    require(bad.size == 0, "Allocator.copyout",
            lambda: f"bytes read back differ from those copied in (first at byte {bad[0]} of {nbytes}); copyout "
                    "must fill exactly the destination's nbytes")
    require((out[nbytes:] == 0xA5).all(), "Allocator.copyout",
            f"wrote past the end of a {nbytes}-byte destination")


def test_zero_size_buffer(tolk_device):
    buf = Buffer(tolk_device.name, 0, U8).allocate()
    buf.copyin(b"")
    buf.copyout(bytearray())


def test_buffers_do_not_alias(tolk_device):
    bufs = [Buffer(tolk_device.name, 1000, U8).copyin(_pattern(1000, i).data) for i in range(4)]
    for i, b in enumerate(bufs):
        out = np.empty(1000, np.uint8)
        b.copyout(out.data)
        require(np.array_equal(out, _pattern(1000, i)), "Allocator._alloc",
                f"buffer {i} of 4 live buffers reads back another buffer's bytes: allocations must not overlap")


def test_views_share_storage(tolk_device):
    base = Buffer(tolk_device.name, 4096, U8).copyin(_pattern(4096).data)
    try:
        view = base.view(1024, U8, 2048).allocate()
    except NotImplementedError:
        pytest.skip(f"{tolk_device.name} does not support buffer views (Allocator.offset)")
    out = np.empty(1024, np.uint8)
    view.copyout(out.data)
    require(np.array_equal(out, _pattern(4096)[2048:3072]), "Allocator.offset",
            "a view at byte 2048 does not read its base's bytes 2048..3071")
    view.copyin(np.zeros(1024, np.uint8).data)
    whole = np.empty(4096, np.uint8)
    base.copyout(whole.data)
    want = _pattern(4096)
    want[2048:3072] = 0
    require(np.array_equal(whole, want), "Allocator.offset",
            "writing through a view must change exactly the viewed bytes of its base")


def test_freed_memory_is_reused_and_released(tolk_device, monkeypatch):
    alloc = tolk_device.allocator
    live: dict[int, int] = {}
    real_alloc, real_free = alloc._alloc, alloc._free

    def counting_alloc(nbytes):
        h = real_alloc(nbytes)
        live[id(h)] = nbytes
        return h

    def counting_free(h, nbytes):
        live.pop(id(h), None)
        real_free(h, nbytes)
    monkeypatch.setattr(alloc, "_alloc", counting_alloc)
    monkeypatch.setattr(alloc, "_free", counting_free)
    for _ in range(20):
        Buffer(tolk_device.name, 12345, U8).allocate()
        gc.collect()
    require(len(live) <= 1, "Allocator.free",
            f"20 short-lived buffers of one size left {len(live)} allocations: freed handles must be reused")
    alloc.free_cache()
    require(not live, "Allocator._free", f"{len(live)} allocations outlived free_cache(): memory leaks")
