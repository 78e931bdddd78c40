"""The spec validator accepts well-formed graphs and names the offending node of malformed ones."""
import pytest

from tolk_core import config
from tolk_core.errors import SpecError, StageSpecError
from tolk_core.ir import AddrSpace, AxisType, Op, UOp, Variable, dtypes
from tolk_core.ir.calls import Composite, InlineCall
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
    i = Variable("i", 0, 9)
    cases = [(_tensor_graph()[2], "tensor"), (_kernel_graph(), "kernel"), (_program_graph(), "program"),
             (UOp(Op.SINK, dtypes.void, (i.bind(3), i * 4 + 1)), "tensor")]
    for graph, stage in cases:
        assert validate(graph, stage) is None, stage  # raises SpecError on a violation


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


def _range(n: int, axis: int, kind) -> UOp:
    return UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (axis, kind))


def _kernel_over(r: UOp) -> UOp:
    p0 = UOp(Op.PARAM, dtypes.float32.ptr(16), (), 0)
    st = UOp(Op.STORE, dtypes.void, (UOp(Op.INDEX, p0.dtype, (p0, r)), UOp.const(dtypes.float32, 1.0)))
    return UOp(Op.SINK, dtypes.void, (UOp(Op.END, dtypes.void, (st, r)),))


def test_kernel_ranges_carry_axis_types() -> None:
    for kind in AxisType:
        if kind not in (AxisType.PROBE, AxisType.VIEW):
            validate(_kernel_over(_range(16, 1, kind)), "kernel")
    # (axis numbers no other test uses: a node equal to one alive elsewhere would be that node)
    with pytest.raises(SpecError, match="RANGE kind 'loop' is not an AxisType member"):
        validate(_kernel_over(_range(16, 9871, "loop")), "kernel")
    with pytest.raises(SpecError, match=r"RANGE arg must be \(axis number, AxisType\), is 9872"):
        validate(_kernel_over(UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, 16),), 9872)), "kernel")
    with pytest.raises(SpecError, match="RANGE of kind PROBE is built only for analysis"):
        validate(_kernel_over(_range(16, 2, AxisType.PROBE)), "kernel")


def _store(dest: UOp, value: UOp) -> UOp:
    return UOp(Op.STORE, dtypes.void, (dest, value))


def test_prepared_stage() -> None:
    b = UOp.new_buffer("CPU", 12, dtypes.float32)
    dest = UOp(Op.RESHAPE, b.dtype, (b,), (3, 4))
    value = UOp(Op.EXPAND, b.dtype, (UOp(Op.RESHAPE, b.dtype, (UOp.const(b.dtype, 2.0),), (1, 1)),), (3, 4))
    validate(UOp(Op.SINK, dtypes.void, (_store(dest, value), b)), "prepared")
    with pytest.raises(SpecError, match=r"prepared spec: STORE destination ADD views ADD, not storage"):
        validate(UOp(Op.SINK, dtypes.void, (_store(b + b, b),)), "prepared")
    with pytest.raises(SpecError, match="DETACH is not allowed in a prepared graph"):
        validate(UOp(Op.SINK, dtypes.void, (_store(dest, UOp(Op.DETACH, b.dtype, (value,))),)), "prepared")
    with pytest.raises(SpecError, match="NOOP in the SINK"):
        validate(UOp(Op.SINK, dtypes.void, (UOp(Op.NOOP),)), "prepared")
    param = UOp(Op.PARAM, dtypes.float32, (), (0, (12,)))
    call = UOp(Op.CALL, dtypes.float32, (UOp(Op.NEG, dtypes.float32, (param,)), b), InlineCall("neg"))
    with pytest.raises(SpecError, match="inline call 'neg' left in the graph"):
        validate(UOp(Op.SINK, dtypes.void, (_store(b, call),)), "prepared")
    neg = Composite("neg", lambda x: UOp(Op.NEG, x.dtype, (x,)), lambda y, g: UOp(Op.NEG, g.dtype, (g,)))
    with pytest.raises(SpecError, match="composite 'neg' left in the graph"):
        validate(UOp(Op.SINK, dtypes.void, (_store(b, UOp(Op.CALL, dtypes.float32, (b,), neg)),)), "prepared")


def test_linear_stage() -> None:
    out, inp = UOp.new_buffer("CPU", 16, dtypes.float32), UOp.new_buffer("CPU", 16, dtypes.float32)
    kernel = _kernel_graph()
    validate(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (kernel, out, inp)),)), "linear")
    with pytest.raises(SpecError, match=r"linear spec: the kernel reads PARAM slots \[0, 1\], the call passes 1"):
        validate(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (kernel, out)),)), "linear")
    ints = UOp.new_buffer("CPU", 16, dtypes.int32)
    with pytest.raises(SpecError, match="argument 1 is BUFFER of dtypes.int32, the kernel's PARAM 1 points to"):
        validate(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (kernel, out, ints)),)), "linear")
    bad = _kernel_over(_range(16, 9873, "reduce"))
    with pytest.raises(SpecError, match="linear spec: RANGE kind 'reduce' is not an AxisType member"):
        validate(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (bad, out)),)), "linear")


def test_linearized_stage() -> None:
    from tolk_core.codegen.linearize import linearize
    program = linearize(_kernel_graph())
    validate(program, "linearized")
    r = next(u for u in program if u.op is Op.RANGE)
    with pytest.raises(SpecError, match=r"1 loop\(s\) never closed"):
        validate(program[:-1], "linearized")
    with pytest.raises(SpecError, match="END must close the innermost open loop"):
        validate([*program, UOp(Op.END, dtypes.void, (r,))], "linearized")
    store = next(u for u in program if u.op is Op.STORE)
    with pytest.raises(SpecError, match="STORE reads a RANGE that is not computed before it"):
        validate([u for u in program if u.op is not Op.STORE] + [store], "linearized")  # after its loop closed
    with pytest.raises(SpecError, match="at instruction 0: STORE"):
        validate([store, *(u for u in program if u is not store)], "linearized")  # before its loop and value


def test_check_names_the_pass_that_made_the_graph() -> None:
    bad = _kernel_over(_range(16, 9874, "lane"))
    with pytest.raises(StageSpecError, match="^my pass produced a bad kernel graph: kernel spec: RANGE kind") as e:
        check(bad, "kernel", "my pass")
    assert (e.value.producer, e.value.stage) == ("my pass", "kernel") and e.value.node.op is Op.RANGE
    with config.override(SPEC=0):
        assert check(bad, "kernel", "my pass") is bad
