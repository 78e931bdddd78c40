import gc

import pytest

from tolk_core.errors import ShapeError, TolkError
from tolk_core.ir import Op, UOp, Variable, dtypes
from tolk_core.ir.uop import live_uops


def test_hash_consing_identity():
    a = UOp.const(dtypes.int32, 3)
    assert UOp.const(dtypes.int32, 3) is a
    assert UOp(Op.ADD, dtypes.int32, (a, a)) is UOp(Op.ADD, dtypes.int32, [a, a])
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    assert UOp.const(dtypes.int32, 3) is not UOp.const(dtypes.int64, 3)
    assert a.replace(arg=4) is UOp.const(dtypes.int32, 4)
    assert {a: 1}[UOp.const(dtypes.int32, 3)] == 1


def _grown_graph_size() -> int:
    x = Variable("leak_probe", 0, 10)
    for k in range(100):
        x = x + k * 1000 + 1
    return live_uops()


def test_interning_is_weak():
    # the graph lives in a helper's frame: a frame's locals() snapshot (which pytest's assertion-pass hook
    # takes) would keep a local graph alive after `del`
    gc.collect()
    before = live_uops()
    assert _grown_graph_size() > before
    gc.collect()
    assert live_uops() == before


def test_variable_and_bind():
    n = Variable("n", 1, 1024)
    assert str(n) == "n" and Variable("i", 0, 9).render() == "i" and str(Variable("i", 0, 9)) == "i"
    assert (n.vmin, n.vmax) == (1, 1024)
    b = n.bind(32)
    assert b.unbind() == (n, 32) and b.expr == "n"
    with pytest.raises(TolkError, match="outside"):
        n.bind(0)
    with pytest.raises(TolkError):
        Variable("bad", 3, 2)


def test_operators_fold_constants():
    c = UOp.const(dtypes.index, 7)
    assert (c + 3).arg == 10 and (c // -2).arg == -3 and (c % -2).arg == 1
    assert (UOp.const(dtypes.index, -7) // 2).arg == -3 and (UOp.const(dtypes.index, -7) % 2).arg == -1
    assert (UOp.const(dtypes.int8, 127) + 1).arg == -128
    i = Variable("i", 0, 9)
    assert (i + 0) is i and (i * 1) is i
    assert (i < 3).dtype == dtypes.bool and (i * 4 + 2).render() == "((i*4)+2)"
    assert i.minimum(4).render() == "min(i,4)"


def test_range_analysis():
    i, j = Variable("i", 0, 9), Variable("j", -3, 3)
    assert ((i * 4 + j).vmin, (i * 4 + j).vmax) == (-3, 39)
    assert ((j // 2).vmin, (j // 2).vmax) == (-1, 1)
    assert ((j % 2).vmin, (j % 2).vmax) == (-1, 1)
    assert ((i % 4).vmin, (i % 4).vmax) == (0, 3)
    assert (i < 10).vmin is True and (i < 0).vmax is False
    assert i.maximum(j).vmin == 0 and i.minimum(j).vmax == 3
    assert bool(i < 10) is True
    with pytest.raises(TolkError, match="cannot decide"):
        bool(i < 5)


def test_toposort_order_and_deep_chain():
    i = Variable("i", 0, 9)
    e = (i + 1) * (i + 1)
    t = e.toposort()
    assert t[-1] is e and t.index(i) < t.index(i + 1) and len(t) == len(set(t))
    x = i
    for _ in range(100_000):
        x = UOp(Op.NEG, dtypes.index, (x,))
    t = x.toposort()
    assert len(t) == 100_001 and t[0] is i
    assert x.vmin == -9 or x.vmin == 0  # range analysis is iterative too
    assert x.shape == ()
    del t, x


def test_shapes_and_device():
    b = UOp.new_buffer("CPU", 24, dtypes.float32)
    assert b.shape == (24,) and b.device == "CPU"
    r = UOp(Op.RESHAPE, b.dtype, (b,), (2, 3, 4))
    p = UOp(Op.PERMUTE, b.dtype, (r,), (2, 0, 1))
    assert p.shape == (4, 2, 3) and p.device == "CPU"
    red = UOp(Op.REDUCE_AXIS, b.dtype, (p,), (Op.ADD, (1,)))
    assert red.shape == (4, 1, 3)
    pad = UOp(Op.PAD, b.dtype, (red,), ((1, 0), (0, 2), (0, 0)))
    assert pad.shape == (5, 3, 3)
    assert UOp(Op.ADD, b.dtype, (p, p)).shape == (4, 2, 3)
    with pytest.raises(ShapeError, match="different shapes"):
        _ = UOp(Op.ADD, b.dtype, (p, r)).shape
    with pytest.raises(ShapeError, match=r"\(24,\)"):
        _ = UOp(Op.RESHAPE, b.dtype, (b,), (5, 5)).shape
    n = Variable("n", 1, 10)
    sb = UOp(Op.BUFFER, dtypes.float32, (UOp(Op.UNIQUE, arg=-1), UOp(Op.DEVICE, arg="CPU")), n * 4)
    rs = UOp(Op.RESHAPE, sb.dtype, (sb,), (n, 4))
    assert rs.shape[1] == 4 and str(rs.shape[0]) == "n"
    other = UOp(Op.RESHAPE, sb.dtype, (UOp(Op.RESHAPE, sb.dtype, (rs,), (4 * n,)),), (n, 4))
    assert UOp(Op.ADD, sb.dtype, (rs, other)).shape == (n, 4)  # equal symbolic sizes, built differently
    with pytest.raises(ShapeError, match=r"\(n, 4\) and \(4, n\)"):
        _ = UOp(Op.ADD, sb.dtype, (rs, UOp(Op.PERMUTE, sb.dtype, (rs,), (1, 0)))).shape
    assert UOp.const(dtypes.float32, 1.0).shape == ()


def test_substitute_and_eval():
    i, j = Variable("i", 0, 9), Variable("j", 0, 3)
    e = i * 4 + j
    f = e.substitute({j: UOp.const(dtypes.index, 2)})
    assert f.render() == "((i*4)+2)"
    assert e.eval({"i": 2, "j": 3}) == 11 and (e // -3).eval({"i": 2, "j": 3}) == -3


def test_listing_names_shared_nodes_once():
    i = Variable("i", 0, 9)
    s = i + 1
    e = s * s
    lines = repr(e).splitlines()
    assert len(lines) == 4 and lines[-1].startswith("%3 = MUL") and "(%2, %2)" in lines[-1]
