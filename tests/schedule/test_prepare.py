"""prepare_rangeify (docs/prepare.md), rule by rule: structure of the normal form, and values against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.helpers import close
from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.errors import BroadcastStoreError, ShapeError, TolkError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.ir.uop import UOp, Variable
from tolk_core.schedule import prepare
from tolk_core.schedule.prepare import (
    contiguous_view,
    expand_bitcast,
    identity_element,
    is_broadcast,
    prepare_rangeify,
    rule_fires,
    storage_base,
    unbind,
)


def _buf(*shape: int, dtype=dtypes.float32) -> UOp:
    n = int(np.prod(shape))
    b = UOp.new_buffer("CPU", n, dtype)
    return b if shape == (n,) else UOp(Op.RESHAPE, dtype, (b,), shape)


def _store(dest: UOp, value: UOp) -> UOp:
    return UOp(Op.SINK, dtypes.void, (UOp(Op.STORE, dtypes.void, (dest, value)),))


def _prepared_store(dest: UOp, value: UOp) -> UOp:
    return prepare_rangeify(_store(dest, value)).src[0]


def _fires(name: str, fn) -> None:
    before = rule_fires[name]
    fn()
    assert rule_fires[name] > before, f"{name} did not fire"


# ---------------------------------------------------------------- step 1: outputs stored in place
def test_output_stores_a_materialised_value_in_place() -> None:
    dest, x = _buf(4, 5), _buf(4, 5)
    value = UOp(Op.CONTIGUOUS, dtypes.float32, (UOp(Op.MUL, dtypes.float32, (x, x)),))
    store = _prepared_store(dest, value)
    assert store.src[1].op is Op.MUL and store.src[0] is dest


def test_contiguous_output_is_one_kernel(device, kernels) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with kernels() as k:
        got = (Tensor(a, device=device) * 2).contiguous().numpy()
    assert k.count == 1
    close(got, a * 2)


# ---------------------------------------------------------------- stages (CONTIGUOUS) and new storage
def test_a_stage_of_storage_or_of_a_copy_is_its_source() -> None:
    b = _buf(2, 3)
    for x in (b, _copy(b, "OPENCL")):
        value = UOp(Op.NEG, dtypes.float32, (UOp(Op.CONTIGUOUS, dtypes.float32, (x,)),))
        dest = UOp(Op.RESHAPE, dtypes.float32, (UOp.new_buffer(x.device, 6, dtypes.float32),), (2, 3))
        assert _prepared_store(dest, value).src[1].src[0] is (b if x is b else x)
    strided = UOp(Op.PERMUTE, dtypes.float32, (b,), (1, 0))  # a view that reorders: stays materialised
    value = UOp(Op.NEG, dtypes.float32, (UOp(Op.CONTIGUOUS, dtypes.float32, (strided,)),))
    assert _prepared_store(_buf(3, 2), value).src[1].src[0].op is Op.CONTIGUOUS


def test_a_stage_of_storage_runs_no_copy_kernel(device, kernels) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(a, device=device).realize()
    with kernels() as k:
        got = (t.contiguous() * 2).numpy()
    assert k.count == 1
    close(got, a * 2)


def test_storage_phase() -> None:
    t = _t().reshape(4, 6)
    assert prepare.storage_phase(t.uop) == 0 and prepare.storage_phase(t[2].uop) == 12
    assert prepare.storage_phase(t[:, 1:3].uop) is None  # not a run
    assert prepare.storage_phase((t + 1)[1].uop) is None  # a run of a computed value, not of storage
    b = UOp.new_buffer("CPU", 8, dtypes.float32)
    after = UOp(Op.AFTER, dtypes.float32, (b, UOp(Op.STORE, dtypes.void, (b, UOp.const(dtypes.float32, 0.0)))))
    assert prepare.storage_phase(UOp(Op.SHRINK, dtypes.float32, (after,), ((3, 8),))) == 3  # a state of storage


def test_reads_storage_written() -> None:
    x, y = _t(), _t()
    read = (x.reshape(4, 6).T + y.reshape(6, 4)).uop
    assert prepare.reads_storage_written(read, (x[2:4].uop,))
    assert prepare.reads_storage_written(read, (UOp(Op.BITCAST, dtypes.int32, (y.uop,)),))
    assert not prepare.reads_storage_written(read, (_t().uop,))


# ---------------------------------------------------------------- step 3 rules
def test_detach_and_contiguous_backward_are_their_source() -> None:
    x = _buf(3)
    for op in (Op.DETACH, Op.CONTIGUOUS_BACKWARD):
        value = UOp(Op.NEG, dtypes.float32, (UOp(op, dtypes.float32, (x,)),))
        assert _prepared_store(_buf(3), value).src[1].src[0] is x


def test_detach_values_unchanged(device) -> None:
    a = np.linspace(-1, 1, 10, dtype=np.float32)
    t = Tensor(a, device=device)
    out = Tensor(UOp(Op.DETACH, dtypes.float32, (t.uop,)), device) + 1
    close(out.numpy(), a + 1)


def test_sink_sources_lose_movements_and_noops() -> None:
    b = UOp.new_buffer("CPU", 6, dtypes.float32)
    sink = UOp(Op.SINK, dtypes.void, (UOp(Op.RESHAPE, dtypes.float32, (b,), (2, 3)), UOp(Op.NOOP)))
    assert prepare_rangeify(sink).src == (b,)


def test_store_of_reshape_into_reshape_stores_the_sources() -> None:
    d, v = UOp.new_buffer("CPU", 6, dtypes.float32), UOp.new_buffer("CPU", 6, dtypes.float32)
    reshaped = [UOp(Op.RESHAPE, dtypes.float32, (b,), (2, 3)) for b in (d, v)]
    store = _prepared_store(*reshaped)
    assert store.src == (d, v)


def test_self_store_is_dropped() -> None:
    d = _buf(6)
    assert prepare_rangeify(_store(d, d)).src == ()  # dropped to a NOOP, and NOOPs leave the sink


def test_self_store_runs_no_kernel(device, kernels) -> None:
    t = Tensor(np.arange(5, dtype=np.float32), device=device).realize()
    with kernels() as k:
        t.assign(t)
    assert k.count == 0
    close(t.numpy(), np.arange(5, dtype=np.float32))


def test_store_into_bitcast_stores_the_bits() -> None:
    d = UOp.new_buffer("CPU", 4, dtypes.int32)
    v = _buf(4)
    store = _prepared_store(UOp(Op.BITCAST, dtypes.float32, (d,)), v)
    assert store.src[0] is d and store.src[1].op is Op.BITCAST and store.src[1].dtype == dtypes.int32


def test_store_through_padded_view_is_gated(device) -> None:
    a = np.zeros((4, 4), np.float32)
    t = Tensor(a, device=device).realize()
    t[::3, 1::2] = 7.0  # strided slices are pads, reshapes and shrinks of the storage
    a[::3, 1::2] = 7.0
    close(t.numpy(), a)


@pytest.mark.parametrize("hazard", ["transpose", "flip", "shift", "reduce"])
def test_store_hazards_materialise_first(device, hazard) -> None:
    a = np.arange(36, dtype=np.float32).reshape(6, 6)
    t = Tensor(a.copy(), device=device).realize()
    if hazard == "transpose":
        t.assign(t.T + 1)
        want = a.T + 1
    elif hazard == "flip":
        t.assign(t.flip(0))
        want = np.flip(a, 0)
    elif hazard == "shift":
        t[1:].assign(t[:-1])
        want = a.copy()
        want[1:] = a[:-1]
    else:
        t.assign(t - t.sum(axis=0, keepdim=True))
        want = a - a.sum(0, keepdims=True)
    close(t.numpy(), want)


def test_store_hazard_rule_fires_structurally() -> None:
    b = UOp.new_buffer("CPU", 9, dtypes.float32)
    dest = UOp(Op.RESHAPE, dtypes.float32, (b,), (3, 3))
    store = _prepared_store(dest, UOp(Op.PERMUTE, dtypes.float32, (dest,), (1, 0)))
    assert store.src[1].op is Op.CONTIGUOUS
    same_view = _prepared_store(dest, UOp(Op.NEG, dtypes.float32, (dest,)))
    assert same_view.src[1].op is Op.NEG  # elementwise on the destination's own view is no hazard


# ---------------------------------------------------------------- the broadcast-store refusal
def _expanded(*shape_in: int, shape_out: tuple) -> UOp:
    return UOp(Op.EXPAND, dtypes.float32, (_buf(*shape_in),), shape_out)


@pytest.mark.parametrize("make", [
    lambda: _expanded(1, 5, shape_out=(4, 5)),
    lambda: UOp(Op.SHRINK, dtypes.float32, (_expanded(1, 5, shape_out=(4, 5)),), ((1, 2), (0, 5))),  # one row of it
    lambda: UOp(Op.PERMUTE, dtypes.float32, (_expanded(1, 5, shape_out=(4, 5)),), (1, 0)),
    lambda: UOp(Op.BITCAST, dtypes.int32, (_expanded(1, 5, shape_out=(4, 5)),)),
    lambda: UOp(Op.DETACH, dtypes.float32, (_expanded(1, 5, shape_out=(4, 5)),)),
    lambda: _expanded(1, 3, shape_out=(Variable("n", 2, 8).bind(3), 3)),
])
def test_store_into_a_broadcast_is_refused(make) -> None:
    dest = make()
    with pytest.raises(BroadcastStoreError, match="cannot store into a broadcast: EXPAND .* stretches an axis of "
                                                  "one element to more") as e:
        prepare_rangeify(_store(dest, UOp(Op.NEG, dest.dtype, (dest,))))
    assert isinstance(e.value, TolkError) and isinstance(e.value, ValueError)


def test_expand_that_adds_ones_or_empties_is_accepted() -> None:
    assert not is_broadcast(_expanded(1, 5, shape_out=(1, 5)))
    assert not is_broadcast(_expanded(1, 5, shape_out=(0, 5)))
    assert is_broadcast(_expanded(1, 5, shape_out=(2, 5)))


def test_frontend_broadcast_store_message(device) -> None:
    t = Tensor(np.ones((1, 5), np.float32), device=device).realize()
    with pytest.raises(BroadcastStoreError, match=r"EXPAND \(1, 5\) -> \(4, 5\) stretches an axis"):
        t.expand(4, 5).assign(Tensor(np.zeros((4, 5), np.float32), device=device))


# ---------------------------------------------------------------- split_reduceop
def test_split_reduceop_sum_of_2_24(device, kernels) -> None:
    a = np.random.default_rng(0).random(1 << 24, dtype=np.float32)
    t = Tensor(a, device=device).realize()
    with kernels() as k:
        got = t.sum().item()
    assert k.count == 2
    assert got == pytest.approx(float(a.sum(dtype=np.float64)), rel=1e-5)


def test_split_reduceop_first_stage_size_is_capped() -> None:
    x = _buf(1 << 24)
    red = UOp(Op.REDUCE_AXIS, dtypes.float32, (x,), (Op.ADD, (0,)))
    out = _prepared_store(_buf(1), red).src[1]
    firsts = [u for u in out.toposort() if u.op is Op.CONTIGUOUS]
    assert len(firsts) == 1 and int(np.prod(firsts[0].shape)) == 256  # largest divisor <= 256 within 2^22
    with config.override(REDUCEOP_SPLIT_SIZE=6):  # cap 2^6 = 64 first-stage outputs
        out = _prepared_store(_buf(1), red).src[1]
    assert [int(np.prod(u.shape)) for u in out.toposort() if u.op is Op.CONTIGUOUS] == [64]


def test_split_reduceop_not_along_a_broadcast_axis_nor_under_threshold() -> None:
    wide = UOp(Op.EXPAND, dtypes.float32, (_buf(1, 1 << 15),), (1 << 10, 1 << 15))
    red = UOp(Op.REDUCE_AXIS, dtypes.float32, (wide,), (Op.ADD, (0,)))
    assert not any(u.op is Op.CONTIGUOUS for u in _prepared_store(_buf(1, 1 << 15), red).toposort())
    small = UOp(Op.REDUCE_AXIS, dtypes.float32, (_buf(1 << 14),), (Op.ADD, (0,)))
    assert not any(u.op is Op.CONTIGUOUS for u in _prepared_store(_buf(1), small).toposort())
    with config.override(SPLIT_REDUCEOP=0):
        big = UOp(Op.REDUCE_AXIS, dtypes.float32, (_buf(1 << 24),), (Op.ADD, (0,)))
        assert not any(u.op is Op.CONTIGUOUS for u in _prepared_store(_buf(1), big).toposort())


def test_split_reduceop_values_max_and_axis(device) -> None:
    a = np.random.default_rng(1).standard_normal((4, 1 << 17)).astype(np.float32)
    t = Tensor(a, device=device)
    close(t.max(axis=1).numpy(), a.max(1))
    close(t.sum(axis=1).numpy(), a.sum(1, dtype=np.float64).astype(np.float32), rtol=1e-4, atol=1e-2)


# ---------------------------------------------------------------- empty axes
def test_empty_reduction_is_the_identity() -> None:
    for op in (Op.ADD, Op.MUL, Op.MAX):
        red = UOp(Op.REDUCE_AXIS, dtypes.float32, (_buf(0, 3),), (op, (0,)))
        folded = _prepared_store(_buf(1, 3), red).src[1]
        const = [u for u in folded.toposort() if u.op is Op.CONST]
        assert folded.op is Op.EXPAND and const[0].arg == identity_element(op, dtypes.float32)


def test_other_empty_values_are_zero(device) -> None:
    empty = UOp(Op.ADD, dtypes.float32, (_buf(0, 3), _buf(0, 3)))
    assert _prepared_store(_buf(0, 3), empty).src[1].op is Op.EXPAND
    out = Tensor(np.zeros((0, 3), np.float32), device=device) + 1
    assert out.numpy().shape == (0, 3)


def test_identity_elements() -> None:
    assert identity_element(Op.ADD, dtypes.int32) == 0 and identity_element(Op.MUL, dtypes.float32) == 1.0
    assert identity_element(Op.MAX, dtypes.int8) == -128 and identity_element(Op.MAX, dtypes.float16) == -np.inf
    with pytest.raises(ValueError, match="no identity"):
        identity_element(Op.SUB, dtypes.int32)


# ---------------------------------------------------------------- expand_bitcast
@pytest.mark.parametrize("src,dst", [(dtypes.uint8, dtypes.int32), (dtypes.int16, dtypes.int64),
                                     (dtypes.int32, dtypes.uint8), (dtypes.int64, dtypes.int16)])
def test_expand_bitcast_structure(src, dst) -> None:
    n = 8
    x = UOp.new_buffer("CPU", n, src)
    out = expand_bitcast(UOp(Op.BITCAST, dst, (x,)))
    assert out is not None and out.shape == (n * src.itemsize // dst.itemsize,) and out.dtype == dst
    shifts = {u.op for u in out.toposort()} & {Op.SHL, Op.SHR}
    assert shifts == ({Op.SHL} if dst.itemsize > src.itemsize else {Op.SHR})


def test_prepare_expands_size_changing_bitcasts() -> None:
    x = UOp.new_buffer("CPU", 8, dtypes.uint8)
    value = _prepared_store(UOp.new_buffer("CPU", 2, dtypes.int32), UOp(Op.BITCAST, dtypes.int32, (x,))).src[1]
    assert all(u.dtype.itemsize == u.src[0].dtype.itemsize for u in value.toposort() if u.op is Op.BITCAST)


def test_expand_bitcast_is_none_for_equal_sizes() -> None:
    assert expand_bitcast(UOp(Op.BITCAST, dtypes.int32, (UOp.new_buffer("CPU", 4, dtypes.float32),))) is None


# ---------------------------------------------------------------- contiguous_view
def _t(n: int = 24) -> Tensor:
    return Tensor(np.arange(n, dtype=np.float32))


def _cv(t: Tensor):
    r = contiguous_view(t.uop)
    return None if r is None else (r[0].op.name, r[1])


CONTIGUOUS_VIEWS = [
    ("the storage itself", lambda: _t(), ("BUFFER", 0)),
    ("a reshape", lambda: _t().reshape(4, 6), ("BUFFER", 0)),
    ("reshape of a reshape", lambda: _t().reshape(4, 6).reshape(2, 12), ("BUFFER", 0)),
    ("rows 1..2", lambda: _t().reshape(4, 6)[1:3], ("BUFFER", 6)),
    ("one row", lambda: _t().reshape(4, 6)[2], ("BUFFER", 12)),
    ("a tail", lambda: _t()[5:], ("BUFFER", 5)),
    ("a middle run", lambda: _t()[3:9].reshape(2, 3), ("BUFFER", 3)),
    ("permute of size-1 axes", lambda: _t().reshape(1, 24, 1).permute(2, 1, 0), ("BUFFER", 0)),
    ("one plane of 3-D", lambda: _t().reshape(2, 3, 4)[1], ("BUFFER", 12)),
    ("columns skip", lambda: _t().reshape(4, 6)[:, 1:3], None),
    ("a transpose reorders", lambda: _t().reshape(4, 6).T, None),
    ("a flip reorders", lambda: _t().flip(0), None),
    ("padding", lambda: _t().pad(((1, 0),)), None),
    ("a step skips", lambda: _t()[::2], None),
    ("an expand repeats", lambda: _t()[:1].expand(5), None),
    ("empty", lambda: _t()[3:3], None),
    # Three runs whose index only comes out as `range + offset` once the simplifier recombines the divisions
    # and remainders the reshapes introduce; a weaker simplifier answers None. These rows pin the runs down.
    ("27 elements (divisions recombined)", lambda: _t(27).reshape(3, 3, 3)[:2].reshape(18)[6:9], ("BUFFER", 6)),
    ("flips that cancel across a reshape (divisions recombined)",
     lambda: _t().flip(0).reshape(4, 6).flip((0, 1)), ("BUFFER", 0)),
    ("a read within one copy of an expanded value (divisions recombined)",
     lambda: _t(6).reshape(1, 6).expand(2, 6)[1], ("BUFFER", 0)),
    ("two copies of an expanded value repeat", lambda: _t(6).reshape(1, 6).expand(2, 6), None),
    # bitcasts: equal sizes are looked through; other sizes where the run starts and ends on whole elements
    ("an equal-size bitcast", lambda: _t().bitcast(dtypes.int32).reshape(4, 6)[1], ("BUFFER", 6)),
    ("bytes of whole elements", lambda: _t().bitcast(dtypes.uint8)[8:16], ("BUFFER", 2)),
    ("halves of whole elements, reshaped", lambda: _t().bitcast(dtypes.int16).reshape(4, 12)[1], ("BUFFER", 6)),
    ("bytes that split elements", lambda: _t().bitcast(dtypes.uint8)[6:10], ("BITCAST", 6)),
    ("wide elements of narrow storage", lambda: Tensor(np.arange(32, dtype=np.uint8)).bitcast(dtypes.int32)[2:4],
     ("BUFFER", 8)),
    ("a bitcast of a run of a bitcast", lambda: _t()[2:6].bitcast(dtypes.uint8)[4:8].bitcast(dtypes.float32),
     ("BUFFER", 3)),
]


@pytest.mark.parametrize("case", CONTIGUOUS_VIEWS, ids=[c[0] for c in CONTIGUOUS_VIEWS])
def test_contiguous_view_table(case) -> None:
    _, make, want = case
    assert _cv(make()) == want


def test_contiguous_view_symbolic_offset() -> None:
    i = Variable("i", 0, 3).bind(2)
    view = _t().reshape(4, 6).shrink(((i, i + 1), (0, 6)))
    base, offset = contiguous_view(view.uop)
    assert base.op is Op.BUFFER and offset.render() == "(i*6)" and offset.eval({"i": 2}) == 12


def test_contiguous_view_of_a_computed_value() -> None:
    v = (_t() + 1).reshape(2, 12)[1]
    base, offset = contiguous_view(v.uop)
    assert base.op is Op.ADD and offset == 12


def test_storage_base() -> None:
    t = _t().reshape(4, 6).T.flip(0)
    assert storage_base(t.uop).op is Op.BUFFER


# ---------------------------------------------------------------- unbind
def test_unbind_moves_bound_values_to_var_vals() -> None:
    n = Variable("n", 1, 24)
    sink = UOp(Op.SINK, dtypes.void, (_t().shrink(((0, n.bind(5)),)).uop,))
    out, var_vals = unbind(sink)
    assert var_vals == {"n": 5} and not any(u.op is Op.BIND for u in out.toposort())
    assert n in out.src[0].arg[0]  # the SHRINK's argument holds the Variable itself


def test_unbind_refuses_two_values() -> None:
    n = Variable("n", 1, 24)
    sink = UOp(Op.SINK, dtypes.void, (n.bind(2), n.bind(3)))
    with pytest.raises(ShapeError, match="'n' is bound to both 2 and 3"):
        unbind(sink)


# ---------------------------------------------------------------- copies
def _copy(x: UOp, device: str) -> UOp:
    return UOp(Op.COPY, x.dtype, (x, UOp(Op.DEVICE, dtypes.void, (), device)))


def test_copy_to_the_value_s_own_device_is_the_value() -> None:
    x = _buf(4)
    assert _prepared_store(_buf(4), UOp(Op.NEG, dtypes.float32, (_copy(x, "CPU"),))).src[1].src[0] is x
    scalar = UOp(Op.RESHAPE, dtypes.float32, (_copy(UOp.const(dtypes.float32, 2.0), "OPENCL"),), (1,))
    assert _prepared_store(_buf(1), scalar).src[1].src[0].op is Op.CONST  # a constant is on every device


def test_copies_across_devices_are_lazy_and_fuse(kernels) -> None:
    from tests.conftest import _available
    ok, why = _available("OPENCL")
    if not ok:
        pytest.skip(why)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    moved = (Tensor(a, device="CPU") * 2).to("OPENCL")
    with kernels() as k:
        out = (moved + 1).sum(axis=1)
    assert k.count == 0 and out.device.startswith("OPENCL")  # nothing ran yet
    with kernels() as k:
        got = out.numpy()
    assert k.count == 2  # a*2 on CPU, then one fused kernel on OPENCL reading the copied bytes
    close(got, (a * 2 + 1).sum(1))
    round_trip = Tensor(a, device="OPENCL").to("CPU").to("OPENCL").to("CPU") + 1
    close(round_trip.numpy(), a + 1)


def test_a_cross_device_copy_inside_a_capture_is_replayed_with_each_calls_data() -> None:
    """A copy to another device inside a jitted function is recorded by the capture and performed by every
    replay (docs/jit.md), so each call sees its own input, not the captured call's."""
    import tolk_core
    from tests.conftest import _available
    ok, why = _available("OPENCL")
    if not ok:
        pytest.skip(why)

    @tolk_core.jit
    def f(x: Tensor) -> Tensor:
        return x.to("OPENCL") * 2

    for i in range(4):  # eager, capture, then replays
        x = Tensor(np.full(4, i, np.float32), device="CPU").realize()
        close(f(x).numpy(), np.full(4, 2 * i, np.float32))


# ---------------------------------------------------------------- pm_mops (over the INDEX form)
def _i(v: int) -> UOp:
    return UOp.const(dtypes.index, v)


def _index(x: UOp, *idxs: UOp) -> UOp:
    return UOp(Op.INDEX, x.dtype, (x, *idxs))


def _mops(u: UOp) -> UOp:
    return graph_rewrite(UOp(Op.SINK, dtypes.void, (u,)), prepare.pm_mops).src[0]


def test_pm_mops_index_of_a_movement_indexes_its_source() -> None:
    b = UOp.new_buffer("CPU", 12, dtypes.float32)
    view = UOp(Op.PERMUTE, dtypes.float32, (UOp(Op.RESHAPE, dtypes.float32, (b,), (3, 4)),), (1, 0))
    before = rule_fires["index_of_movement"]
    out = _mops(_index(view, _i(2), _i(1)))  # element [2, 1] of the transpose is b[1*4 + 2]
    assert out is _index(b, _i(6)) and rule_fires["index_of_movement"] == before + 2
    # rangeify's lowerer indexes movements through the same rule
    _fires("index_of_movement", lambda: (Tensor(np.ones((2, 3), np.float32), device="CPU").T + 1).realize())
    padded = _mops(_index(UOp(Op.PAD, dtypes.float32, (b,), ((1, 1),)), _i(0)))  # a padded read: a selection of 0
    assert padded.op is Op.WHERE and padded.src[2].arg == 0 and padded.src[1].arg == "gated"


def test_pm_mops_a_gather_is_left_whole() -> None:
    b = UOp(Op.RESHAPE, dtypes.float32, (UOp.new_buffer("CPU", 12, dtypes.float32),), (3, 4))
    by_value = UOp.new_buffer("CPU", 5, dtypes.index)  # an index with axes
    idx = _index(UOp(Op.PERMUTE, dtypes.float32, (b,), (1, 0)), by_value, _i(0))
    assert _mops(idx) is idx


def test_pm_mops_reshape_with_fewer_indices() -> None:
    x = UOp(Op.RESHAPE, dtypes.float32, (UOp.new_buffer("CPU", 24, dtypes.float32),), (6, 4))
    r = UOp(Op.RESHAPE, dtypes.float32, (x,), (2, 3, 4))  # trailing axis 4 left alone
    before = rule_fires["index_reshape_fewer_indices"]
    assert _mops(_index(r, _i(1), _i(2))) is _index(x, _i(5))  # row [1, 2] of (2, 3) rows is row 5 of 6
    assert rule_fires["index_reshape_fewer_indices"] == before + 1
    other = UOp(Op.RESHAPE, dtypes.float32, (x,), (3, 8))  # trailing axis changed: left alone
    assert _mops(_index(other, _i(1))).src[0] is other


def test_pm_mops_store_through_a_selection_is_gated() -> None:
    b = UOp.new_buffer("CPU", 8, dtypes.float32)
    r = UOp(Op.RANGE, dtypes.index, (_i(8),), (0, AxisType.LOOP))
    c1, c2 = r.alu(Op.CMPLT, _i(5)), _i(2).alu(Op.CMPLT, r)
    sel = UOp(Op.WHERE, dtypes.float32, (c1, _index(b, r), UOp.const(dtypes.float32, 0)))
    v = UOp.const(dtypes.float32, 1.0)
    store = _mops(UOp(Op.STORE, dtypes.void, (sel, v)))
    assert store.src[0] is UOp(Op.INDEX, dtypes.float32, (b, r, c1), "gated") and store.src[1] is v
    twice = UOp(Op.WHERE, dtypes.float32, (c2, sel, UOp.const(dtypes.float32, 0)))
    store = _mops(UOp(Op.STORE, dtypes.void, (twice, v)))
    assert store.src[0].arg == "gated" and store.src[0].src[-1] is c2.alu(Op.AND, c1)  # gated on both


def test_pm_mops_movements_of_storage_after_effects() -> None:
    b = UOp.new_buffer("CPU", 6, dtypes.float32)
    effect = UOp(Op.STORE, dtypes.void, (b, UOp(Op.NEG, dtypes.float32, (b,))))
    after = UOp(Op.AFTER, dtypes.float32, (b, effect))
    out = _mops(UOp(Op.RESHAPE, dtypes.float32, (after,), (2, 3)))
    assert out.op is Op.AFTER and out.src[0] is UOp(Op.RESHAPE, dtypes.float32, (b,), (2, 3)) and out.src[1] is effect
    idx = _mops(_index(after, _i(4)))
    assert idx.op is Op.AFTER and idx.src[0] is _index(b, _i(4))


def test_pm_mops_end_of_a_movement() -> None:
    b = UOp.new_buffer("CPU", 6, dtypes.float32)
    r = UOp(Op.RANGE, dtypes.index, (_i(6),), (0, AxisType.LOOP))
    end = UOp(Op.END, dtypes.void, (UOp(Op.RESHAPE, dtypes.float32, (b,), (2, 3)), r))
    assert _mops(end) is UOp(Op.END, dtypes.void, (b, r))


# ---------------------------------------------------------------- step 2
def test_an_inline_call_is_its_body() -> None:
    x = _buf(6)
    param = UOp(Op.PARAM, dtypes.float32, (), (0, (6,)))
    call = UOp(Op.CALL, dtypes.float32, (UOp(Op.NEG, dtypes.float32, (param,)), x), prepare.InlineCall("neg"))
    assert _prepared_store(_buf(6), call).src[1] is UOp(Op.NEG, dtypes.float32, (x,))


def test_a_disk_copy_reads_a_run(tmp_path) -> None:
    from tolk_core.engine.target import reading, target_for
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(16)))
    disk = Tensor.empty(16, dtype=dtypes.uint8, device=f"DISK:{path}")
    sink = _store(_buf(2, 1), _copy(disk[4:12].bitcast(dtypes.float32).reshape(2, 1).uop, "CPU"))
    value = prepare_rangeify(sink, reading(target_for("CPU"), sink.toposort())).src[0].src[1]
    # the reshape moved past the copy (and the store of a reshape into a reshape then stored the sources)
    assert value.op is Op.COPY and prepare.disk_run(value.src[0])[1:] == (4, 8, dtypes.float32)


# ---------------------------------------------------------------- store rules: across devices, bit runs, repeats
def _fired(name: str, before: int) -> bool:
    return rule_fires[name] > before


def _plain_store(dest: UOp, value: UOp) -> UOp:
    return UOp(Op.STORE, dtypes.void, (dest, value))


def _prepared(*stores: UOp) -> UOp:
    return prepare_rangeify(UOp(Op.SINK, dtypes.void, stores))


def test_a_store_across_devices_copies_its_materialised_value() -> None:
    dest = UOp.new_buffer("CPU", 4, dtypes.float32)
    src = UOp.new_buffer("OPENCL", 4, dtypes.float32)
    before = rule_fires["store_across_devices"]
    sink = prepare.pm_before_copies.rewrite(_plain_store(dest, UOp(Op.NEG, dtypes.float32, (src,))))
    assert _fired("store_across_devices", before)
    copy = sink.src[1]
    assert copy.op is Op.COPY and copy.src[1].arg == "CPU" and copy.src[0].op is Op.CONTIGUOUS
    assert copy.src[0].device == "OPENCL"  # materialised on its own device
    stored = prepare.pm_before_copies.rewrite(_plain_store(dest, src))
    assert stored.src[1].src[0] is src  # storage is in storage already: copied as it is
    assert prepare.pm_before_copies.rewrite(_plain_store(dest, UOp.const(dtypes.float32, 1.0))) is None  # no device


def test_a_bit_run_store_stores_the_value_s_bits_into_the_run() -> None:
    buf = UOp.new_buffer("CPU", 4, dtypes.float32)
    dest = UOp(Op.SHRINK, dtypes.uint8, (UOp(Op.BITCAST, dtypes.uint8, (buf,)),), ((4, 12),))  # bytes 4..12
    value = UOp.new_buffer("CPU", 8, dtypes.uint8)
    before = rule_fires["store_bit_run"]
    store = prepare.store_bit_run(store=_plain_store(dest, value), dest=dest, value=value)
    assert store.src[0] is UOp(Op.SHRINK, dtypes.float32, (buf,), ((1, 3),))  # elements 1 and 2 of the storage
    assert store.src[1].op is Op.BITCAST and store.src[1].dtype == dtypes.float32 and store.src[1].src[0] is value
    out = _prepared(_plain_store(dest, value)).src[0]
    assert _fired("store_bit_run", before) and out.src[0].src[0] is buf
    assert not any(u.op is Op.BITCAST and u.dtype.itemsize != u.src[0].dtype.itemsize for u in out.toposort())


def test_a_repeated_store_stays_a_state_of_its_own() -> None:
    buf = UOp.new_buffer("CPU", 4, dtypes.float32)
    v = UOp(Op.NEG, dtypes.float32, (buf,))
    first = _plain_store(buf, v)
    state = UOp(Op.AFTER, dtypes.float32, (buf, first))
    before = rule_fires["repeated_store"]
    again = prepare.repeated_store(store=_plain_store(state, v), dest=state, value=v)
    assert again.src[0] is state and again.src[1].op is Op.CONTIGUOUS and again.src[1].src[0] is v
    out = _prepared(_plain_store(state, v)).src[0]
    assert _fired("repeated_store", before)
    # the first store has run (resolve_returned_after): the second stays, storing v from a stage of its own
    assert out.src[0] is buf and out.src[1].op is Op.CONTIGUOUS and out.src[1].src[0] is v
    other = UOp(Op.ADD, dtypes.float32, (buf, buf))
    assert prepare.repeated_store(store=_plain_store(state, other), dest=state, value=other) is None


def test_resolve_returned_after() -> None:
    buf = UOp.new_buffer("CPU", 6, dtypes.float32)
    view = UOp(Op.RESHAPE, dtypes.float32, (buf,), (2, 3))
    after = UOp(Op.AFTER, dtypes.float32, (view, _plain_store(view, UOp(Op.NEG, dtypes.float32, (view,)))))
    assert prepare.resolve_returned_after(after) is view
    elsewhere = UOp(Op.AFTER, dtypes.float32, (view, _plain_store(UOp.new_buffer("CPU", 6, dtypes.float32), buf)))
    assert prepare.resolve_returned_after(elsewhere) is None  # not a store into the output
    before = rule_fires["resolve_returned_after"]
    flat = UOp(Op.RESHAPE, dtypes.float32, (after,), (6,))
    out = _prepared(_plain_store(UOp.new_buffer("CPU", 6, dtypes.float32), flat))
    assert _fired("resolve_returned_after", before) and not any(u.op is Op.AFTER for u in out.toposort())


def test_a_reduction_of_a_broadcast_reduces_one_copy() -> None:
    # (4, 3, 5): the value is broadcast along axis 1, which the sum over axis 2 keeps: one copy is summed and
    # the result broadcast, instead of summing the same five elements three times
    a = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    t = Tensor(a, device="CPU")
    value = (t.reshape(4, 1, 5).expand(4, 3, 5) * 2).sum(axis=2)
    before = rule_fires["reduce_of_broadcast"]
    flat = UOp(Op.RESHAPE, value.dtype, (value.uop,), (12,))
    out = _prepared(_plain_store(UOp.new_buffer("CPU", 12, dtypes.float32), flat))
    assert _fired("reduce_of_broadcast", before)
    reduces = [u for u in out.toposort() if u.op is Op.REDUCE_AXIS]
    assert reduces and all(u.src[0].shape[1] == 1 for u in reduces)  # the reduction reads one copy
    np.testing.assert_allclose(value.numpy(), np.broadcast_to((a * 2).sum(1, keepdims=True), (4, 3)), rtol=1e-6)


def test_a_permuted_reduction_read_by_a_matmul_is_stored_permuted(device, kernels) -> None:
    # attention's output projection: P @ V (heads, seq, head size) read back as (seq, heads x head size)
    rng = np.random.default_rng(5)
    p, v, w = (rng.standard_normal(s).astype(np.float32) for s in ((3, 8, 5), (3, 5, 4), (12, 6)))
    ctx = Tensor(p, device=device) @ Tensor(v, device=device)
    before = rule_fires["store_permuted_reduction"]
    with kernels() as k:
        got = (ctx.transpose(0, 1).reshape(8, 12) @ Tensor(w, device=device)).numpy()
    assert _fired("store_permuted_reduction", before) and k.count == 2  # stored once, in the order read
    np.testing.assert_allclose(got, (p @ v).transpose(1, 0, 2).reshape(8, 12) @ w, rtol=1e-5, atol=1e-5)


def test_a_permutation_moving_the_innermost_axis_keeps_the_reduction_as_computed() -> None:
    x = UOp(Op.RESHAPE, dtypes.float32, (UOp(Op.REDUCE_AXIS, dtypes.float32, (_buf(6, 4, 3, 5),), (Op.ADD, (0,))),),
            (4, 3, 5))
    moved = UOp(Op.RESHAPE, dtypes.float32, (UOp(Op.PERMUTE, dtypes.float32, (x,), (0, 2, 1)),), (4, 5, 3, 1))
    assert prepare.store_permuted_reduction(UOp(Op.EXPAND, dtypes.float32, (moved,), (4, 5, 3, 2))) is None
    kept = UOp(Op.PERMUTE, dtypes.float32, (x,), (1, 0, 2))  # the innermost axis stays: stored in this order
    wide = UOp(Op.EXPAND, dtypes.float32, (UOp(Op.RESHAPE, dtypes.float32, (kept,), (3, 1, 4, 5)),), (3, 2, 4, 5))
    out = prepare.store_permuted_reduction(wide)
    assert out is not None and out.src[0].src[0].op is Op.CONTIGUOUS and out.src[0].src[0].src[0] is kept


# ---------------------------------------------------------------- every rule fired
def test_every_rule_fired_in_this_module() -> None:
    matchers = (prepare.pm_prepare, prepare.pm_outputs_in_place, prepare.pm_inline_calls, prepare.pm_disk_copies,
                prepare.pm_mops, prepare.pm_stage, prepare.pm_returned_after, prepare.pm_bit_run_stores,
                prepare.pm_before_copies)
    names = {r.name for pm in matchers for r in pm.rules} | {"split_reduceop"}
    # refuse_broadcast_store raises instead of rewriting; it is covered by the refusal tests above
    missing = {n for n in names - {"refuse_broadcast_store"} if rule_fires[n] == 0}
    assert not missing, f"rules that never fired: {sorted(missing)}"
    assert GlobalCounters.kernels_launched > 0
