"""Sharded tensors on four virtual CPU devices, each op against numpy, even and uneven splits: a sharded value
is one MULTI node whose ops are pushed into the shards when realized (docs/multi-device.md)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import has_opencl
from tolk_core import Tensor, config
from tolk_core.counters import GlobalCounters
from tolk_core.errors import DeviceMismatchError, DeviceUnavailableError, ShardingError
from tolk_core.ir.ops import Op

RNG = np.random.default_rng(7)
ROWS = [8, 10]  # even over 2 and 4 devices, and uneven (4 devices: 3, 3, 3, 1)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(params=[2, 4], ids=["2dev", "4dev"])
def devs(request, cpus4):
    return cpus4[:request.param]


def test_device_is_a_tuple_and_shards_hold_their_parts(devs):
    x = data(10, 3)
    t = Tensor(x).shard(devs, axis=0).realize()
    assert t.device == devs and t.is_sharded and t.shape == (10, 3)
    assert t.uop.op is Op.MULTI
    step = -(-10 // len(devs))
    for i, s in enumerate(t.uop.src):
        assert s.device == devs[i]
        np.testing.assert_array_equal(Tensor(s, devs[i]).numpy(), x[i * step:(i + 1) * step])


@pytest.mark.parametrize("rows", ROWS)
def test_elementwise_on_sharded_and_replicated(devs, rows):
    x, y, b = data(rows, 5), data(rows, 5), data(5)
    tx, ty, tb = Tensor(x).shard(devs, axis=0), Tensor(y).shard(devs, axis=0), Tensor(b).to(devs)
    out = ((tx * ty + tb).relu() - 2).exp()
    assert out.device == devs
    np.testing.assert_allclose(out.numpy(), np.exp(np.maximum(x * y + b, 0) - 2), rtol=1e-6)


@pytest.mark.parametrize("rows", ROWS)
def test_movements_keeping_the_sharded_axis(devs, rows):
    x = data(rows, 4, 3)
    t = Tensor(x).shard(devs, axis=0)
    np.testing.assert_array_equal(t.permute(2, 0, 1).numpy(), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.reshape(rows, 12).numpy(), x.reshape(rows, 12))
    np.testing.assert_array_equal(t.reshape(rows, 4, 1, 3).expand(rows, 4, 2, 3).numpy(),
                                  np.broadcast_to(x.reshape(rows, 4, 1, 3), (rows, 4, 2, 3)))
    np.testing.assert_array_equal(t.pad(((0, 0), (1, 2), (0, 0))).numpy(), np.pad(x, ((0, 0), (1, 2), (0, 0))))
    np.testing.assert_array_equal(t[:, 1:3].numpy(), x[:, 1:3])
    np.testing.assert_array_equal(t.flip(2).numpy(), x[:, :, ::-1])


@pytest.mark.parametrize("rows", ROWS)
def test_movements_cutting_the_sharded_axis_allgather(devs, rows, capsys):
    x = data(rows, 4)
    t = Tensor(x).shard(devs, axis=0)
    with config.override(DEBUG=1):
        out = t[1:-1].numpy()
    np.testing.assert_array_equal(out, x[1:-1])
    assert "multi: allgather" in capsys.readouterr().out
    np.testing.assert_array_equal(t.flip(0).numpy(), x[::-1])
    np.testing.assert_array_equal(t.reshape(rows * 4).numpy(), x.reshape(-1))


@pytest.mark.parametrize("rows", ROWS)
def test_reductions_over_and_beside_the_sharded_axis(devs, rows):
    x = data(rows, 6)
    t = Tensor(x).shard(devs, axis=0)
    np.testing.assert_allclose(t.sum(axis=0).numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.sum(axis=1).numpy(), x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.sum().numpy(), x.sum(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(t.max(axis=0).numpy(), x.max(0))
    np.testing.assert_array_equal(t.min().numpy(), x.min())
    np.testing.assert_allclose(t.mean(axis=0).numpy(), x.mean(0), rtol=1e-5, atol=1e-6)
    r = t.sum(axis=0)
    assert r.device == devs and r.realize().uop.arg[1] is None  # replicated on every device


@pytest.mark.parametrize("rows", ROWS)
def test_matmul_batch_sharded_weight_replicated(devs, rows):
    x, w = data(rows, 6), data(6, 3)
    out = Tensor(x).shard(devs, axis=0) @ Tensor(w).to(devs)
    np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", ROWS)
def test_matmul_contraction_sharded_is_partial_products_and_allreduce(devs, k):
    x, w = data(5, k), data(k, 3)
    before = GlobalCounters.allreduces
    out = Tensor(x).shard(devs, axis=1) @ Tensor(w).shard(devs, axis=0)
    np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-5, atol=1e-5)
    assert GlobalCounters.allreduces == before + 1


def test_mismatched_shardings_are_resharded(devs, capsys):
    x, y = data(8, 8), data(8, 8)
    a, b = Tensor(x).shard(devs, axis=0), Tensor(y).shard(devs, axis=1)
    with config.override(DEBUG=1):
        out = (a + b).numpy()
    np.testing.assert_array_equal(out, x + y)
    assert "multi: allgather" in capsys.readouterr().out


def test_gather_to_one_device_and_shard_like(devs):
    x = data(10, 2)
    t = Tensor(x).shard(devs, axis=0)
    g = (t * 2).to(devs[-1])
    assert g.device == devs[-1] and not g.is_sharded
    np.testing.assert_array_equal(g.numpy(), x * 2)
    y = Tensor(data(10, 2)).shard_like(t * 3)
    assert y.device == devs
    np.testing.assert_array_equal((t + y).numpy(), x + y.numpy())


def test_shard_of_an_unplaced_tensor_shards_it(devs):
    t = Tensor.arange(12).reshape(12, 1).shard(devs, axis=0)
    assert t.device == devs and t.uop.op is Op.MULTI and len(t.uop.src) == len(devs)
    np.testing.assert_array_equal(t.numpy().ravel(), np.arange(12))
    np.testing.assert_array_equal((t.sum(axis=0)).numpy(), [66])


@pytest.mark.parametrize("start,stop,step", [(0, 10, 1), (-7, 20, 3), (5, -6, -2)])
def test_integer_arange_on_devices_is_computed_on_each(devs, start, stop, step):
    # an integer arange over a device tuple is replicated with no storage: each device computes its own, so a
    # program using it (one_hot's class grid) copies nothing between devices
    labels = Tensor(np.array([1, 0, 3, 2, 2, 1, 0, 3, 9, 4], np.int32)).shard(devs, axis=0).realize()
    before = GlobalCounters.snapshot()
    t = Tensor.arange(start, stop, step, dtype="int32", device=devs)
    assert t.device == devs and t.uop.op is Op.MULTI and t.uop.arg[1] is None
    hits = (labels.reshape(10, 1) == t.reshape(1, -1)).cast("int32").sum(axis=1)
    want = (np.array([1, 0, 3, 2, 2, 1, 0, 3, 9, 4])[:, None] == np.arange(start, stop, step)[None]).sum(1)
    got = hits.realize()
    assert GlobalCounters.copies_direct == before["copies_direct"]
    np.testing.assert_array_equal(got.numpy(), want)
    for i, d in enumerate(devs):  # every replica holds the values
        np.testing.assert_array_equal(Tensor(t.realize().uop.src[i], d).numpy(), np.arange(start, stop, step))


def test_reading_a_replicated_tensor_gathers_nothing(devs):
    # numpy() of a replicated value reads its first device's replica as it is: no schedule, no copy
    x = data(10, 3)
    t = (Tensor(x).to(devs) * 2).realize()
    before = GlobalCounters.snapshot()
    np.testing.assert_array_equal(t.numpy(), x * 2)
    assert GlobalCounters.schedules == before["schedules"]
    assert GlobalCounters.copies_direct == before["copies_direct"]


def test_replicated_tensor_and_integer_ops(devs):
    x = np.arange(30, dtype=np.int32).reshape(10, 3)
    t = Tensor(x).to(devs)
    assert t.device == devs
    np.testing.assert_array_equal((t * 3 - 1).numpy(), x * 3 - 1)
    s = Tensor(x).shard(devs, axis=0)
    np.testing.assert_array_equal(s.sum(axis=0).numpy(), x.sum(0))
    np.testing.assert_array_equal(s.max(axis=0).numpy(), x.max(0))


def test_assign_into_a_sharded_tensor(devs):
    x, y = data(10, 4), data(10, 4)
    t = Tensor(x).shard(devs, axis=0).contiguous().realize()
    t.assign(t * 2 + Tensor(y).shard(devs, axis=0))
    np.testing.assert_allclose(t.numpy(), x * 2 + y, rtol=1e-6)
    r = Tensor(x[0]).to(devs).contiguous().realize()
    r.assign(r - 1)
    np.testing.assert_allclose(r.numpy(), x[0] - 1, rtol=1e-6)


def test_assign_together_over_sharded_tensors(devs):
    # independent sharded and replicated targets: one schedule per device stores them all, each equal to
    # numpy; a value that reads another target's storage is assigned one by one, in order
    from tolk_core.frontend.tensor import assign_together
    x, w, g = data(10, 4), data(4), data(10, 4)
    for _ in range(2):  # the first round plans the allreduce's fold (it schedules too)
        t = Tensor(x).shard(devs, axis=0).contiguous().realize()
        r = Tensor(w).to(devs).contiguous().realize()
        grad = Tensor(g).shard(devs, axis=0).realize()
        before = GlobalCounters.schedules
        assign_together([(t, t - grad * 0.5), (r, r + grad.sum(axis=0))])  # a sum over the sharded axis: an allreduce
    # per device one schedule of the allreduce's partial, one of both stores (one by one: a schedule per store)
    assert GlobalCounters.schedules - before == 2 * len(devs)
    np.testing.assert_allclose(t.numpy(), x - g * 0.5, rtol=1e-6)
    np.testing.assert_allclose(r.numpy(), w + g.sum(0), rtol=1e-5, atol=1e-5)
    assign_together([(r, r * 2), (t, t + r.reshape(1, 4))])  # t's value reads r, stored first
    np.testing.assert_allclose(t.numpy(), x - g * 0.5 + 2 * (w + g.sum(0)), rtol=1e-5, atol=1e-5)


def test_kernels_compiled_once_per_shape_and_renderer(cpus4):
    x = np.abs(data(16, 8))
    t = Tensor(x).shard(cpus4, axis=0).realize()
    before = GlobalCounters.snapshot()
    out = (t * 1.4375 + 0.3125).sqrt().realize()  # every shard (4, 8): one kernel, compiled once for the 4 devices
    after = GlobalCounters.snapshot()
    np.testing.assert_allclose(out.numpy(), np.sqrt(x * 1.4375 + 0.3125), rtol=1e-6)
    assert after["kernels_launched"] - before["kernels_launched"] == 4
    assert after["kernels_compiled"] - before["kernels_compiled"] == 1
    assert after["programs_shared"] - before["programs_shared"] == 3


def test_errors_name_the_problem(cpus4):
    t = Tensor(data(3, 4))
    with pytest.raises(DeviceUnavailableError, match="CPU:7"):
        t.shard(("CPU:0", "CPU:7"), axis=0)
    with pytest.raises(ShardingError, match="axis 2"):
        t.shard(cpus4[:2], axis=2)
    with pytest.raises(ShardingError, match="size 3 cannot be split into 4 shards"):
        t.shard(cpus4, axis=0)
    with pytest.raises(ShardingError, match="sharded already"):
        t.shard(cpus4[:2], axis=1).shard(cpus4[:2], axis=0)
    with pytest.raises(DeviceMismatchError):
        _ = t.shard(cpus4[:2], axis=1) + Tensor(data(3, 4)).shard(cpus4[2:], axis=1)


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
@pytest.mark.parametrize("rows", ROWS)
def test_cpu_and_opencl_pair(rows):
    devs = ("CPU", "OPENCL")
    x, w = data(rows, 6), data(6, 3)
    t = Tensor(x).shard(devs, axis=0)
    assert t.device == ("CPU", "OPENCL:0")
    np.testing.assert_allclose((t @ Tensor(w).to(devs)).numpy(), x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.sum(axis=0).numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
    a, b = Tensor(x.T.copy()).shard(devs, axis=1), Tensor(x).shard(devs, axis=0)
    np.testing.assert_allclose((a @ b).numpy(), x.T @ x, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
@pytest.mark.parametrize("rows", ROWS)
def test_cpu_and_opencl_pair_each_op(rows, capsys):
    # the ops of the other tests on a CPU + OPENCL pair: elementwise with a replicated operand, a movement
    # keeping the sharded axis, one cutting it (allgathered), reductions beside and over it (an allreduce
    # that copies: OpenCL memory is not the host's), each against numpy
    devs = ("CPU", "OPENCL")
    x, r = data(rows, 6), data(1, 6)
    t, rep = Tensor(x).shard(devs, axis=0), Tensor(r).to(devs)
    np.testing.assert_allclose((t * rep - 1.5).numpy(), x * r - 1.5, rtol=1e-6)
    np.testing.assert_array_equal(t.permute(1, 0).numpy(), x.T)
    with config.override(DEBUG=1):
        np.testing.assert_array_equal(t.reshape(rows * 6).numpy(), x.reshape(-1))
    assert "multi: allgather" in capsys.readouterr().out
    np.testing.assert_allclose(t.max(axis=1).numpy(), x.max(1), rtol=1e-6)
    np.testing.assert_allclose(t.max(axis=0).numpy(), x.max(0), rtol=1e-6)
    np.testing.assert_allclose(t.mean(axis=0).numpy(), x.mean(0), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
def test_kernels_compiled_once_per_renderer_over_cpu_and_opencl(cpus4):
    # three shards of one shape: the two CPU devices share one program, OpenCL compiles its own
    devs = ("CPU", "CPU:1", "OPENCL")
    x = np.abs(data(12, 8))
    t = Tensor(x).shard(devs, axis=0).realize()
    before = GlobalCounters.snapshot()
    out = (t * 1.3125 + 0.4375).sqrt().realize()
    after = GlobalCounters.snapshot()
    np.testing.assert_allclose(out.numpy(), np.sqrt(x * 1.3125 + 0.4375), rtol=1e-6)
    assert after["kernels_launched"] - before["kernels_launched"] == 3
    assert after["kernels_compiled"] - before["kernels_compiled"] == 2
    assert after["programs_shared"] - before["programs_shared"] == 1


def test_safe_save_writes_the_whole_tensor(cpus4, tmp_path):
    from tolk_core.nn.state import safe_load, safe_save
    x = data(10, 3)
    path = tmp_path / "sharded.safetensors"
    safe_save({"sharded": Tensor(x).shard(cpus4[:3], axis=0), "replicated": Tensor(x).to(cpus4[:2])}, str(path))
    loaded = safe_load(str(path))
    np.testing.assert_array_equal(loaded["sharded"].numpy(), x)
    np.testing.assert_array_equal(loaded["replicated"].numpy(), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.bool_])
def test_gather_is_bit_exact(devs, dtype):
    # -0.0 and a NaN with a payload survive the gather bit for bit (a gather that pads and adds would read 0.0)
    x = RNG.standard_normal((10, 3)).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        x[0, 0], x[9, 2], x[4, 1] = -0.0, -0.0, np.nan
        bits = x.view(f"u{x.itemsize}")
        bits[5, 1] = bits[4, 1] | 1  # a NaN with another payload
    got = Tensor(x).shard(devs, axis=0).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))
    moved = Tensor(x).shard(devs, axis=0).to(devs[-1]).numpy()
    np.testing.assert_array_equal(moved.view(np.uint8), x.view(np.uint8))


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
def test_cpu_and_opencl_gather_is_bit_exact():
    x = data(6, 2)
    x[0, 0], x[5, 1] = -0.0, -0.0
    got = Tensor(x).shard(("CPU", "OPENCL"), axis=0).numpy()
    np.testing.assert_array_equal(got.view(np.uint32), x.view(np.uint32))


@pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL device")
def test_cpu_and_opencl_launch_from_their_own_threads():
    devs = ("CPU", "OPENCL")
    x, w = data(10, 6), data(6, 3)
    t, wr = Tensor(x).shard(devs, axis=0).realize(), Tensor(w).to(devs).realize()  # shards stored: no copy
    before = GlobalCounters.concurrent_runs
    with config.override(DEVICE_THREADS=1):
        got = ((t @ wr).relu() * 2).numpy()
        assert GlobalCounters.concurrent_runs > before
        total = t.sum(axis=0).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w, 0) * 2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, x.sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", ROWS)
def test_activations_of_sharded_values(devs, rows):
    """A sharded value's sigmoid and tanh are their formulas pushed into the shards (the sharding pass maps the
    IR's own ops); one device keeps them as composite nodes. Both give the same bits, and torch's values."""
    x = data(rows, 5) * 4
    x[0, :4] = [np.inf, -np.inf, -0.0, 1e-4]
    t = Tensor(x).shard(devs, axis=0)
    for name, ref in (("sigmoid", lambda v: 1 / (1 + np.exp(-v.astype(np.float64)))), ("tanh", np.tanh)):
        got = getattr(t, name)().numpy()
        np.testing.assert_array_equal(got, getattr(Tensor(x), name)().numpy())
        np.testing.assert_allclose(got, ref(x), rtol=2e-6, atol=1e-7)


def test_activation_gradients_of_sharded_values(devs):
    """The formula path of a sharded value carries the composite's gradient: tanh' = 1 - y^2 and
    sigmoid' = y (1 - y), against numpy, shard by shard."""
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(8, 3)
    s = 1 / (1 + np.exp(-x.astype(np.float64)))
    for name, want in (("tanh", 1 - np.tanh(x.astype(np.float64)) ** 2), ("sigmoid", s * (1 - s))):
        t = Tensor(x).shard(devs, axis=0).requires_grad_()
        getattr(t, name)().sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-6)
