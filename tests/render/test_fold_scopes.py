"""The C-style renderer's accumulator folds per loop opening: one reduction range may be opened by two loop
nests (the pieces of a row split at its borders, codegen/borders.py, each compute their own reductions over the
same ranges), and each opening folds into its own accumulators. A map keyed by the range alone gave the first
loop the second nest's accumulators, not declared yet (a KeyError while rendering a GRU cell's gradient)."""
from __future__ import annotations

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.uop import UOp
from tolk_core.render.cstyle import _innermost_folds


def _range(rid: int, size: int, kind: AxisType) -> UOp:
    return UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (rid, kind))


def _reg(tag: float) -> UOp:
    return UOp(Op.DEFINE_REG, dtypes.float32, (), tag)


def _fold(reg: UOp, value: float) -> UOp:
    return UOp(Op.ASSIGN, dtypes.float32, (reg, UOp.const(dtypes.float32, value)), Op.ADD)


def test_each_opening_of_a_shared_reduction_range_folds_its_own_accumulators() -> None:
    outer_a, outer_b = _range(1, 4, AxisType.LOOP), _range(2, 3, AxisType.LOOP)
    red = _range(3, 5, AxisType.REDUCE)  # opened once in each nest
    acc_a, acc_b = _reg(1.0), _reg(2.0)
    fold_a, fold_b = _fold(acc_a, 1.0), _fold(acc_b, 2.0)
    end = lambda r: UOp(Op.END, dtypes.void, (r,))  # noqa: E731
    lin = [outer_a, acc_a, red, fold_a, end(red), end(outer_a),
           outer_b, acc_b, red, fold_b, end(red), end(outer_b)]
    folds = _innermost_folds(lin)
    assert folds[red] == [[(Op.ADD, acc_a)], [(Op.ADD, acc_b)]]  # in the order the nests open it
    assert folds[outer_a] == [[]] and folds[outer_b] == [[]]  # loops with a loop inside fold nothing


def test_a_loop_with_a_loop_inside_keeps_no_folds_of_its_own() -> None:
    outer, inner = _range(1, 4, AxisType.REDUCE), _range(2, 3, AxisType.REDUCE)
    acc = _reg(1.0)
    end = lambda r: UOp(Op.END, dtypes.void, (r,))  # noqa: E731
    lin = [acc, outer, _fold(acc, 1.0), inner, _fold(acc, 2.0), end(inner), end(outer)]
    folds = _innermost_folds(lin)
    assert folds[outer] == [[]]
    assert folds[inner] == [[(Op.ADD, acc)]]
