"""The IR's shared vocabulary: reduction identities, the walk from a view to its storage, range kinds, call args."""
from __future__ import annotations

import math
import pickle

import pytest

from tolk_core.ir import calls
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import AxisType, GroupOp, Op, exec_alu, identity_element
from tolk_core.ir.uop import UOp
from tolk_core.schedule import prepare

_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.float16,
           dtypes.float32, dtypes.float64]


def _samples(dt) -> list:
    if dt == dtypes.bool:
        return [False, True]
    if dtypes.is_float(dt):
        return [-math.inf, -3.5, -0.0, 0.0, 1.0, 2.5, 6e4, math.inf]
    return [dtypes.min(dt), -7 if dt.kind == "i" else 0, 1, 5, dtypes.max(dt)]


@pytest.mark.parametrize("op", [Op.ADD, Op.MUL, Op.MAX], ids=lambda o: o.name)
@pytest.mark.parametrize("dt", _DTYPES, ids=lambda d: d.name)
def test_identity_element_leaves_every_value_unchanged(op, dt) -> None:
    x = identity_element(op, dt)
    for y in _samples(dt):
        got = exec_alu(op, dt, (x, y))
        assert got == y and type(got) is type(y), (op, dt, x, y, got)  # (0.0 + -0.0 is 0.0: equal, as zeros)


def test_identity_element_of_vectors_and_of_other_ops() -> None:
    assert identity_element(Op.MAX, dtypes.float32.vec(4)) == -math.inf
    assert identity_element(Op.MUL, dtypes.int32.vec(2)) == 1 and identity_element(Op.ADD, dtypes.bool) is False
    with pytest.raises(ValueError, match="SUB has no identity element"):
        identity_element(Op.SUB, dtypes.int32)
    assert prepare.identity_element is identity_element


def test_storage_base_walks_each_set_of_view_ops() -> None:
    b = UOp.new_buffer("CPU", 12, dtypes.float32)
    state = UOp(Op.AFTER, b.dtype, (b, UOp(Op.STORE, dtypes.void, (b, UOp.const(b.dtype, 0.0)))))
    bits = UOp(Op.BITCAST, dtypes.int32, (UOp(Op.RESHAPE, b.dtype, (state,), (3, 4)),))
    top = UOp(Op.PERMUTE, dtypes.int32, (UOp(Op.SHRINK, dtypes.int32, (bits,), ((0, 2), (0, 4))),), (1, 0))
    assert top.storage_base(GroupOp.Movement) is bits
    assert top.storage_base() is state and prepare.storage_base(top) is state  # movements and bitcasts
    assert top.storage_base(GroupOp.ViewOfState) is b
    chain, base = top.view_chain(GroupOp.ViewOfState)
    assert [u.op for u in chain] == [Op.PERMUTE, Op.SHRINK, Op.BITCAST, Op.RESHAPE, Op.AFTER] and base is b
    assert b.storage_base() is b and b.view_chain() == ([], b)


def test_axis_types_print_the_same_in_every_process_and_are_not_strings() -> None:
    assert repr((0, AxisType.LOOP)) == "(0, AxisType.LOOP)"
    assert pickle.loads(pickle.dumps(AxisType.REDUCE)) is AxisType.REDUCE
    assert all(m != m.value for m in AxisType)  # a string kind never passes for a member
    r = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, 8),), (5310, AxisType.LOOP))
    assert UOp(Op.RANGE, dtypes.index, r.src, (5310, "loop")) is not r and r.render() == "ridx5310"


def test_call_args_live_in_the_ir() -> None:
    assert prepare.InlineCall is calls.InlineCall and prepare.KernelCode is calls.KernelCode
    body = UOp(Op.NEG, dtypes.float32, (UOp(Op.PARAM, dtypes.float32, (), (0, ())),))
    call = UOp(Op.CALL, dtypes.float32, (body, UOp.const(dtypes.float32, 1.0)), calls.InlineCall("neg"))
    code = UOp(Op.CALL, dtypes.void, (UOp(Op.SINK, dtypes.void, (), calls.KernelCode("k", "k", (True,))),
                                      UOp.new_buffer("CPU", 4, dtypes.float32)))
    assert calls.is_inline_call(call) and not calls.is_code_call(call)
    assert calls.is_code_call(code) and not calls.is_inline_call(code)
