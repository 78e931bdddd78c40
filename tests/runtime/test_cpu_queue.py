"""The CPU device's launch queue (tolk_cpu/queue.py): batches of single-threaded kernels run on a native thread
while Python goes on. Whatever the host does meanwhile must see the values of launches run in program order:
numpy's values step after step, reads and copies after queued writes, storage dropped or handed out again
while a batch that uses it is queued, memory shared with numpy, a fork, and the queue's own order and
capacity."""
from __future__ import annotations

import gc
import os
import select
import warnings

import numpy as np
import pytest
from tolk_cpu import queue as cpu_queue
from tolk_cpu.helpers import HelperThreads

import tolk_core
from tolk_core import config
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device


def _chain(t: Tensor) -> Tensor:
    """Four kernels a step (each `.contiguous()` stores), so a repeated realize replays through the Graph."""
    a = (t * 1.5).contiguous()
    b = (a + 1.0).contiguous()
    c = (b * b).contiguous().sqrt()
    return (c - 0.25 * t).contiguous()


def _chain_np(x: np.ndarray) -> np.ndarray:
    a = (x * np.float32(1.5)).astype(np.float32)
    b = a + np.float32(1)
    c = np.sqrt(b * b)
    return c - np.float32(0.25) * x


def _queued_batches() -> int:
    q = Device["CPU"].queue()
    assert q is not None
    return q._last


def test_a_loop_of_stores_matches_numpy_and_is_queued() -> None:
    """Each step reads what the step before stored: a batch run out of order, or a read before its writer ran,
    gives other numbers."""
    rng = np.random.default_rng(0)
    xn = rng.uniform(0.5, 1.5, 4096).astype(np.float32)
    with config.override(CPU_ASYNC=1):
        t = Tensor(xn.copy(), device="CPU").contiguous().realize()
        before = _queued_batches()
        for _ in range(30):
            t.assign(_chain(t))
            xn = _chain_np(xn)
        assert _queued_batches() > before  # the replays went to the queue
        np.testing.assert_allclose(t.numpy(), xn, rtol=1e-5)


def test_queued_and_direct_launches_give_the_same_bits() -> None:
    rng = np.random.default_rng(1)
    xn = rng.standard_normal(1000).astype(np.float32)
    outs = []
    for queued in (1, 0):
        with config.override(CPU_ASYNC=queued):
            t = Tensor(xn.copy(), device="CPU").contiguous().realize()
            for _ in range(12):
                t.assign(_chain(t) * 0.5)
            outs.append(t.numpy())
    np.testing.assert_array_equal(outs[0], outs[1])


def test_host_reads_and_copies_wait_for_queued_writes() -> None:
    """Reads right after queued replays (no synchronize): numpy(), a host value, a copy to a new tensor. The
    kernels pass over 2 MiB each, single-threaded (under PARALLEL_MIN_WORK: queued), and each read follows a
    run of replays pushed back to back (numpy's reference is computed after the read): the queue is behind
    when the read comes."""
    x0 = np.linspace(0.5, 2.0, 1 << 19, dtype=np.float32)
    with config.override(CPU_ASYNC=1):
        t = Tensor(x0.copy(), device="CPU").contiguous().realize()

        def steps(n: int) -> None:
            for _ in range(n):
                t.assign(_chain(t))

        def reference(n: int) -> np.ndarray:
            x = x0
            for _ in range(n):
                x = _chain_np(x)
            return x
        steps(8)
        got = t.numpy()
        np.testing.assert_allclose(got, reference(8), rtol=1e-5)
        steps(8)
        first = float(t[5].item())
        np.testing.assert_allclose(first, reference(16)[5], rtol=1e-5)
        steps(8)
        copied = t.to("CPU").contiguous().realize().numpy()
        np.testing.assert_allclose(copied, reference(24), rtol=1e-5)


def test_storage_dropped_while_queued_keeps_its_values() -> None:
    """The values queued replays return are read after their inputs were dropped and new tensors (which may get
    the freed memory back) were written: each replay computed from its input's old contents."""
    rng = np.random.default_rng(2)
    inputs = [rng.uniform(0.5, 1.5, 1 << 17).astype(np.float32) for _ in range(8)]
    with config.override(CPU_ASYNC=1):
        results = []
        for i, xn in enumerate(inputs):
            x = Tensor(xn, device="CPU").contiguous().realize()
            results.append(_chain(x).realize())
            del x
            gc.collect()
            overwrite = Tensor(np.full(1 << 17, -7.0 - i, np.float32), device="CPU").contiguous().realize()
            del overwrite
        for got, xn in zip(results, inputs, strict=True):
            np.testing.assert_allclose(got.numpy(), _chain_np(xn), rtol=1e-5)


def test_memory_shared_with_numpy_is_never_queued() -> None:
    """docs/interop.md: a value realized before a write made through a shared numpy array holds the values from
    before the write. Kernels touching shared memory run where they are asked for."""
    with config.override(CPU_ASYNC=1):
        a = np.linspace(0.5, 1.5, 4096, dtype=np.float32)
        t = Tensor.from_dlpack(a)
        for _ in range(3):
            _chain(t).realize()
        before = _queued_batches()
        out = _chain(t).realize()
        a[:] = 100.0  # a write through numpy right after the realize
        np.testing.assert_allclose(out.numpy(), _chain_np(np.linspace(0.5, 1.5, 4096, dtype=np.float32)), rtol=1e-5)
        assert _queued_batches() == before


def test_jitted_calls_after_queued_replays_read_their_results() -> None:
    """A JIT's replay runs on the calling thread (a call, not a submit): it waits for the eager replays queued
    before it, whose stores it reads, and the eager replays after it read what it returned."""
    x0 = np.linspace(0.5, 1.5, 1 << 17, dtype=np.float32)
    with config.override(CPU_ASYNC=1):
        t = Tensor(x0.copy(), device="CPU").contiguous().realize()
        step = tolk_core.jit(lambda x: (_chain(x) * 0.5).contiguous())
        x = x0
        pushed = _queued_batches()
        for _ in range(6):
            t.assign(_chain(t))
            t.assign(step(t))
            x = _chain_np(_chain_np(x)) * np.float32(0.5)
        assert _queued_batches() > pushed
        np.testing.assert_allclose(t.numpy(), x, rtol=1e-5)


def test_more_batches_than_the_queue_holds() -> None:
    """Pushes beyond CAPACITY wait for the oldest; nothing is lost or reordered."""
    xn = np.full(64, 0.75, np.float32)
    with config.override(CPU_ASYNC=1):
        t = Tensor(xn.copy(), device="CPU").contiguous().realize()
        for _ in range(cpu_queue.CAPACITY * 3):
            t.assign(_chain(t) * 0.5)
            xn = _chain_np(xn) * np.float32(0.5)
        Device["CPU"].synchronize()
        q = Device["CPU"].queue()
        assert q is not None and not q.busy
        np.testing.assert_allclose(t.numpy(), xn, rtol=1e-5)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
@pytest.mark.timeout(60)
def test_a_forked_child_makes_its_own_queue() -> None:
    """A child forked after queued work (its parent's worker thread does not exist there) computes with a queue
    of its own instead of waiting for one that never runs."""
    xn = np.linspace(0.5, 1.5, 512, dtype=np.float32)
    with config.override(CPU_ASYNC=1):
        t = Tensor(xn.copy(), device="CPU").contiguous().realize()
        for _ in range(4):
            t.assign(_chain(t))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: queue more work, report the values
            try:
                for _ in range(4):
                    t.assign(_chain(t))
                os.write(write, t.numpy().tobytes())
            finally:
                os._exit(0)
        os.close(write)
        ready, _, _ = select.select([read], [], [], 50)
        data = os.read(read, xn.nbytes * 2) if ready else b""
        os.close(read)
        os.waitpid(pid, 0)
    for _ in range(8):
        xn = _chain_np(xn)
    assert data, "the child did not answer: it waited for its parent's queue"
    np.testing.assert_allclose(np.frombuffer(data, np.float32), xn, rtol=1e-5)


def test_a_queue_that_cannot_be_made_is_warned_once_and_launches_run_here(monkeypatch) -> None:
    """A queue whose thread or C cannot be made: one RuntimeWarning naming why, then no queue (the device launches
    on the calling thread, as with CPU_ASYNC=0), and no second try."""
    class Broken:
        def __init__(self, device) -> None:
            raise OSError("no threads here")
    monkeypatch.setattr(cpu_queue, "CPUQueue", Broken)
    monkeypatch.setattr(cpu_queue, "_queues", HelperThreads("the CPU launch queue", "run here", cpu_queue.drain))
    with config.override(CPU_ASYNC=1):
        with pytest.warns(RuntimeWarning, match="no threads here"):
            assert cpu_queue.queue_for(Device["CPU"]) is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cpu_queue.queue_for(Device["CPU"]) is None
