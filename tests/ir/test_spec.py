"""The spec validator accepts well-formed graphs and names the offending node of malformed ones."""
import pytest

from tolk_core import config
from tolk_core.errors import SpecError
from tolk_core.ir import AddrSpace, AxisType, Op, UOp, Variable, dtypes
from tolk_core.ir.spec import check, validate


def _tensor_graph():
    b = UOp.new_buffer("CPU", 12, dtypes.float32)
    r = UOp(Op.RESHAPE, b.dtype, (b,), (3, 4))
    one = UOp(Op.EXPAND, b.dtype, (UOp(Op.RESHAPE, b.dtype, (UOp.const(dtypes.float32, 1.0),), (1, 1)),), (3, 4))
    s = UOp(Op.REDUCE_AXIS, b.dtype, (r + one,), (Op.ADD, (1,)))
    return b, r, UOp(Op.SINK, dtypes.void, (s,))


def _kernel_graph(value_dtype=dtypes.float32):
    p0 = UOp(Op.PARAM, dtypes.float32.ptr(16), (), 0)
    p1 = UOp(Op.PARAM, dtypes.float32.ptr(16), (), 1)
    r = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, 16),), (0, AxisType.LOOP))
    ld = UOp(Op.LOAD, dtypes.float32, (UOp(Op.INDEX, p1.dtype, (p1, r)),))
    val = ld + UOp.const(dtypes.float32, 1.0) if value_dtype == dtypes.float32 else ld.cast(value_dtype)
    st = UOp(Op.STORE, dtypes.void, (UOp(Op.INDEX, p0.dtype, (p0, r)), val))
    return UOp(Op.SINK, dtypes.void, (UOp(Op.END, dtypes.void, (st, r)),))


def _program_graph(offset=0):
    b = UOp.new_buffer("CPU", 16, dtypes.float32)
    prog = UOp(Op.PROGRAM, dtypes.void, (_kernel_graph(),), ("kernel_0", "src"))
    sl = UOp(Op.SLICE, dtypes.float32, (b,), (offset, 8))
    call = UOp(Op.CALL, dtypes.void, (prog, b, sl))
    return UOp(Op.LINEAR, dtypes.void, (call,))


def test_well_formed_graphs_pass():
    validate(_tensor_graph()[2], "tensor")
    validate(_kernel_graph(), "kernel")
    validate(_program_graph(), "program")
    i = Variable("i", 0, 9)
    validate(UOp(Op.SINK, dtypes.void, (i.bind(3), i * 4 + 1)), "tensor")


def test_tensor_stage_rejects():
    b, r, sink = _tensor_graph()
    bad = UOp(Op.SINK, dtypes.void, (UOp(Op.ADD, b.dtype, (b, r)),))
    with pytest.raises(SpecError, match=r"tensor spec: bad shape.*\n  at node %\d+: ADD"):
        validate(bad, "tensor")
    with pytest.raises(SpecError, match="RANGE is not allowed in a tensor graph"):
        validate(UOp(Op.SINK, dtypes.void, (UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), 0),)), "tensor")
    with pytest.raises(SpecError, match=r"source dtype dtypes.int32 differs .*\n  at node %2: ADD"):
        validate(UOp(Op.ADD, dtypes.float32, (UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.int32, 1))), "tensor")
    with pytest.raises(SpecError, match="CONST value 1.5 does not fit dtypes.int32"):
        validate(UOp(Op.CONST, dtypes.int32, (), 1.5), "tensor")
    with pytest.raises(SpecError, match="REDUCE_AXIS arg"):
        validate(UOp(Op.REDUCE_AXIS, b.dtype, (r,), (Op.SUB, (0,))), "tensor")
    with pytest.raises(SpecError, match=r"BIND value 12 outside \[0, 9\]"):
        v = Variable("i", 0, 9)
        validate(UOp(Op.BIND, v.dtype, (v, UOp.const(v.dtype, 12))), "tensor")


def test_kernel_stage_rejects():
    want = r"STORE of dtypes.int32 into a pointer to dtypes.float32\n  at node %\d+: STORE"
    with pytest.raises(SpecError, match=want):
        validate(_kernel_graph(dtypes.int32), "kernel")
    with pytest.raises(SpecError, match="RESHAPE is not allowed in a kernel graph"):
        validate(UOp(Op.RESHAPE, dtypes.float32, (UOp.const(dtypes.float32, 1.0),), (1,)), "kernel")
    with pytest.raises(SpecError, match="BUFFER is not allowed in a kernel graph"):
        validate(_tensor_graph()[0], "kernel")
    with pytest.raises(SpecError, match="DEFINE_LOCAL must have a LOCAL pointer"):
        validate(UOp(Op.DEFINE_LOCAL, dtypes.float32.ptr(4, AddrSpace.REG), (), 0), "kernel")
    with pytest.raises(SpecError, match="INDEX needs a pointer"):
        validate(UOp(Op.INDEX, dtypes.float32, (UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.index, 0))),
                 "kernel")


def test_program_stage_rejects():
    with pytest.raises(SpecError, match=r"SLICE arg must be concrete .*\n  at node %\d+: SLICE"):
        validate(_program_graph(offset=Variable("o", 0, 4)), "program")
    with pytest.raises(SpecError, match="LINEAR sources must all be CALLs"):
        validate(UOp(Op.LINEAR, dtypes.void, (UOp.const(dtypes.int32, 1),)), "program")
    with pytest.raises(SpecError, match="RANGE is not allowed in a program graph"):
        validate(UOp(Op.LINEAR, dtypes.void, (UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), 0),)),
                 "program")


def test_check_follows_setting():
    bad = UOp(Op.CONST, dtypes.int32, (), 1.5)
    with config.override(SPEC=0):
        assert check(bad, "tensor") is bad
    with pytest.raises(SpecError):
        check(bad, "tensor")  # the test suite runs with SPEC=1
    with pytest.raises(SpecError, match="unknown stage"):
        validate(bad, "bogus")
