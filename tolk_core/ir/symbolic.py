"""The symbolic simplifier (filled in by the "IR symbolic" commit)."""
from __future__ import annotations

from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.pattern import PatternMatcher, UPat
from tolk_core.ir.uop import UOp


def _fold_consts(x: UOp) -> UOp | None:
    if x.dtype.count == 1 and all(s.op is Op.CONST for s in x.src):
        return x.src[0].alu(x.op, *x.src[1:])
    return None


symbolic = PatternMatcher([(UPat(GroupOp.ALU, name="x"), _fold_consts)])
