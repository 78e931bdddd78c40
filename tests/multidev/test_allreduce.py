"""The allreduce over virtual CPU devices: naive and ring give the same values as numpy's fold of the
partials, for float and int, sum / max / min / mean; the graph's reductions over a sharded axis use it."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import Tensor, config
from tolk_core.engine import collective
from tolk_core.engine import realize as engine

NUMPY = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}
COPIES = ("copies_direct", "copies_device", "bytes_copied")  # every way a copy between devices is counted


def _run(devs, arrays, op, how):
    partials = [Tensor(a, device=d).uop for a, d in zip(arrays, devs, strict=True)]
    outs = engine.allreduce(partials, op, how)
    assert [o.device for o in outs] == list(devs)
    return [Tensor(o, d).numpy() for o, d in zip(outs, devs, strict=True)]


@pytest.mark.parametrize("ndev", [2, 3, 4])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("shape", [(10,), (5, 7)], ids=["10", "5x7"])
def test_naive_equals_ring_equals_numpy_float(cpus4, ndev, op, shape):
    rng = np.random.default_rng(ndev)
    devs = cpus4[:ndev]
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in devs]
    want = NUMPY[op](np.stack(arrays), axis=0)
    naive, ring = _run(devs, arrays, op, "naive"), _run(devs, arrays, op, "ring")
    for got in naive + ring:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got in naive[1:]:  # every device folded in the same order: the same bits everywhere
        np.testing.assert_array_equal(got, naive[0])
    for got in ring[1:]:  # each chunk is folded once and passed round
        np.testing.assert_array_equal(got, ring[0])


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_naive_equals_ring_equals_numpy_int(cpus4, op):
    rng = np.random.default_rng(3)
    arrays = [rng.integers(-1000, 1000, (6, 5)).astype(np.int32) for _ in cpus4]
    stacked = np.stack(arrays)
    # an integer mean divides as C does (toward zero), in the integer type
    want = np.trunc(stacked.sum(0) / 4).astype(np.int32) if op == "mean" else NUMPY[op](stacked, axis=0)
    for how in ("naive", "ring"):
        for got in _run(cpus4, arrays, op, how):
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want)


def test_algorithm_by_size_and_device_count():
    with config.override(RING_ALLREDUCE_THRESHOLD=1000):
        assert collective.algorithm(4, 1001) == "ring"
        assert collective.algorithm(4, 1000) == "naive"
        assert collective.algorithm(2, 10 ** 6) == "naive"  # a ring of two is the naive exchange


def test_sharded_sum_takes_the_ring_past_the_threshold(cpus4, capsys):
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    t = Tensor(x).shard(cpus4, axis=0)
    with config.override(RING_ALLREDUCE_THRESHOLD=16, DEBUG=2):
        ring = t.sum(axis=0).numpy()
    assert "allreduce ring ADD float32(1, 64) over 4 devices" in capsys.readouterr().out
    with config.override(RING_ALLREDUCE_THRESHOLD=10 ** 6, DEBUG=2):
        naive = t.sum(axis=0).numpy()
    assert "allreduce naive ADD" in capsys.readouterr().out
    np.testing.assert_allclose(ring, x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(naive, ring, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ndev,size", [(3, 10), (2, 1 << 18)], ids=["3dev-10", "2dev-1MiB"])
def test_host_memory_devices_fold_in_place(cpus4, monkeypatch, ndev, size):
    # virtual CPU devices read each other's memory: the naive fold copies no partial, and every device holds
    # the bits of the fold in device order, the same as the fold over copies gives
    from tolk_core.counters import GlobalCounters
    from tolk_core.engine import concurrent
    rng = np.random.default_rng(5)
    devs = cpus4[:ndev]
    arrays = [rng.standard_normal(size).astype(np.float32) for _ in devs]
    want = arrays[0].copy()
    for a in arrays[1:]:
        want = want + a  # float32, in device order
    before = GlobalCounters.snapshot()
    with config.override(DEVICE_THREADS=1):
        direct = _run(devs, arrays, "sum", "naive")
    after = GlobalCounters.snapshot()
    assert after["allreduces_direct"] == before["allreduces_direct"] + 1
    for k in ("copies_direct", "copies_device"):  # one kernel per device stores its folded chunk into every
        assert after[k] == before[k], k           # result: nothing is copied between devices
    assert after["kernels_compiled"] - before["kernels_compiled"] <= len({-(-size // ndev), size % -(-size // ndev)})
    for got in direct:
        np.testing.assert_array_equal(got, want)
    again = _run(devs, arrays, "sum", "naive")  # planned: no schedule, no compile
    np.testing.assert_array_equal(again[-1], want)
    assert GlobalCounters.schedules == after["schedules"]
    assert GlobalCounters.kernels_compiled == after["kernels_compiled"]
    after = GlobalCounters.snapshot()
    if size * 4 >= 1 << 20:  # a large fold runs each device's chunk from its own thread
        assert sorted(d for d, _, _ in concurrent.spans()) == sorted(devs)
    from tolk_cpu.runtime import CPUAllocator
    monkeypatch.setattr(CPUAllocator, "reads_peer", lambda self, other: False)
    copied = _run(devs, arrays, "sum", "naive")
    assert GlobalCounters.allreduces_direct == after["allreduces_direct"]  # the fold over copies
    for got in copied:
        np.testing.assert_array_equal(got, want)


REDUCE = {"sum": Tensor.sum, "max": Tensor.max, "min": Tensor.min, "mean": Tensor.mean}


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["float", "int"])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("rows,cols", [(8, 12), (10, 7)], ids=["even", "uneven"])
def test_jitted_allreduce_folds_in_place(cpus4, rows, cols, op, dtype):
    # a reduction over the sharded axis, jitted: the replay folds the partials where they lie as eager does
    # (no copy of any kind), and every call equals numpy's reduction of that call's data. "uneven": 10 rows
    # over 4 devices (3, 3, 3, 1) and 7 columns, which the fold's chunks (2, 2, 2, 1) do not divide evenly
    import tolk_core
    from tolk_core.counters import GlobalCounters
    from tolk_core.ir.ops import Op
    rng = np.random.default_rng(rows + cols)
    reduce = tolk_core.jit(lambda x: REDUCE[op](x, axis=0).realize())
    for call in range(4):  # warm-up, capture, two replays
        data = (rng.standard_normal((rows, cols)) * 100).astype(dtype)
        x = Tensor(data).shard(cpus4, axis=0).realize()
        before = GlobalCounters.snapshot()
        out = reduce(x)
        after = GlobalCounters.snapshot()
        want = NUMPY[op](data.astype(np.float64), axis=0)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-3)
        if call >= 2:  # a replay: one fold in place, nothing copied, nothing scheduled or compiled
            assert after["allreduces_direct"] == before["allreduces_direct"] + 1
            for k in (*COPIES, "schedules", "kernels_compiled"):
                assert after[k] == before[k], k
    captured = reduce.captured
    assert captured is not None
    bodies = [c.src[0] for c in captured.linear.src]
    assert [b.arg[0] for b in bodies if b.op is Op.COPY] == ["fold"]  # the one COPY call is the fold
