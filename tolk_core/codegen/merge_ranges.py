"""merge_ranges: two nested output loops that every access walks as one become one loop.

A kernel's output ranges follow the tensor's axes. Where every load and store reads the pair (outer `a` of size A,
inner `b` of size B) only as `a*B + b` times a stride, the two are one contiguous run of A*B elements: a 1 x 1
convolution's output rows and columns, which the matmul plan otherwise tiled a row at a time (a 14 x 14 layer:
rows of 14 columns, one 8-float vector per tile and 12 rows of A broadcast per vector, where 196 columns take
the 2-vector tile; docs/performance.md, "Pretrained models").

The merge substitutes a // B and a % B for the pair and keeps the result only when the simplifier folded every
such division away (`(a//B)*(B*m) + (a%B)*m -> a*m`): a gate on one of the two, or an access with another
stride, leaves one, and the kernel is left as it was.
"""
from __future__ import annotations

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


def merge(ast: UOp, outer: UOp, inner: UOp) -> tuple[UOp, UOp] | None:
    """(`ast` with output ranges `outer` and `inner` (directly nested) as one range, that range), or None when
    an access or a gate reads them otherwise than as one contiguous run, or a size is not a constant."""
    if outer.src[0].op is not Op.CONST or inner.src[0].op is not Op.CONST:
        return None
    size_b = inner.src[0].arg
    whole = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, outer.src[0].arg * size_b),), inner.arg)
    b = UOp.const(dtypes.index, size_b)
    sub = {outer: UOp(Op.IDIV, dtypes.index, (whole, b)), inner: UOp(Op.MOD, dtypes.index, (whole, b))}
    tops = []
    for top in ast.src:
        if top.op is not Op.END:
            return None
        if (outer in top.src[1:]) != (inner in top.src[1:]):
            return None  # a store ended by one of the pair only
        ranges = tuple(whole if r is inner else r for r in top.src[1:] if r is not outer)
        tops.append(UOp(Op.END, top.dtype, (top.src[0].substitute(sub).simplify(),) + ranges, top.arg))
    new = UOp(ast.op, ast.dtype, tuple(tops), ast.arg)
    reads: set[UOp] = set()  # the nodes that depend on the merged range
    for u in new.toposort():
        if u is whole or any(s in reads for s in u.src):
            if u.op in (Op.IDIV, Op.MOD):
                return None
            reads.add(u)
    return new, whole
