"""Movement maths on (possibly symbolic) shapes.

`movement_shape` gives the output shape of a movement op and validates its argument.
`apply_movement_op` maps index expressions of the OUTPUT axes back to index expressions of the INPUT axes,
with a validity condition (PAD positions outside the source are invalid). This is what pm_mops and
rangeify use to push movements into indexing.
"""
from __future__ import annotations

from typing import Any

from tolk_core.errors import ShapeError
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, prod, resolve, sint, ssimplify, sym_eq


def _fmt(x: Any) -> str:
    """A shape or movement argument as text, symbolic sizes by name."""
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(_fmt(e) for e in x) + ("," if len(x) == 1 else "") + ")"
    return str(x) if isinstance(x, UOp) else repr(x)


def _nonneg(x: sint) -> bool:
    """x >= 0 provably (symbolic sizes are simplified, then decided by range)."""
    return x >= 0 if not isinstance(x, UOp) else resolve(x.simplify() >= 0, False)


def movement_shape(op: Op, in_shape: tuple[sint, ...], arg: Any) -> tuple[sint, ...]:
    """The shape `op` with `arg` gives from `in_shape`; raises ShapeError naming both shapes when the
    argument does not fit."""
    n = len(in_shape)
    if op is Op.RESHAPE:
        new = tuple(arg)
        if any(not _nonneg(s) for s in new):
            raise ShapeError(f"reshape {_fmt(in_shape)} -> {_fmt(new)}: sizes must be non-negative")
        if not sym_eq(prod(in_shape), prod(new)):
            raise ShapeError(f"reshape {_fmt(in_shape)} -> {_fmt(new)}: element counts {prod(in_shape)} and "
                             f"{prod(new)} differ")
        return new
    if op is Op.PERMUTE:
        if sorted(arg) != list(range(n)):
            raise ShapeError(f"permute of shape {_fmt(in_shape)}: order {_fmt(arg)} is not a permutation of "
                             f"range({n})")
        return tuple(in_shape[i] for i in arg)
    if op is Op.EXPAND:
        new = tuple(arg)
        if len(new) != n or any(not (sym_eq(s, t) or sym_eq(s, 1)) for s, t in zip(in_shape, new, strict=True)):
            raise ShapeError(f"expand {_fmt(in_shape)} -> {_fmt(new)}: only size-1 axes can grow, ranks must match")
        return new
    if op is Op.PAD:
        if len(arg) != n or any(not (_nonneg(b) and _nonneg(a)) for b, a in arg):
            raise ShapeError(f"pad of shape {_fmt(in_shape)} with {_fmt(arg)}: need one non-negative "
                             "(before, after) per axis")
        return tuple(ssimplify(s + b + a) if isinstance(s, UOp) or isinstance(b, UOp) or isinstance(a, UOp)
                     else s + b + a for s, (b, a) in zip(in_shape, arg, strict=True))
    if op is Op.SHRINK:
        if len(arg) != n or any(not (_nonneg(st) and _nonneg(e - st) and _nonneg(s - e))
                                for s, (st, e) in zip(in_shape, arg, strict=True)):
            raise ShapeError(f"shrink of shape {_fmt(in_shape)} with {_fmt(arg)}: need 0 <= start <= end <= size "
                             "per axis")
        return tuple(ssimplify(e - st) for st, e in arg)
    if op is Op.FLIP:
        if len(arg) != n or any(not isinstance(f, bool) for f in arg):
            raise ShapeError(f"flip of shape {_fmt(in_shape)}: need one bool per axis, got {_fmt(arg)}")
        return tuple(in_shape)
    raise ShapeError(f"{op.name} is not a movement op")


def _idx(x: sint) -> UOp:
    return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)


def apply_movement_op(op: Op, in_shape: tuple[sint, ...], arg: Any,
                      idxs: tuple[UOp, ...]) -> tuple[tuple[UOp, ...], UOp | None]:
    """Index expressions of the input axes of movement `op` given index expressions `idxs` of its output
    axes, and the condition under which the output position reads the input (None: always). The results
    are simplified."""
    out_shape = movement_shape(op, in_shape, arg)
    if len(idxs) != len(out_shape):
        raise ShapeError(f"{op.name}: {len(idxs)} indices for output shape {_fmt(out_shape)}")
    valid: UOp | None = None
    if op is Op.RESHAPE:
        flat: UOp = _idx(0)
        for i, s in zip(idxs, out_shape, strict=True):
            flat = flat * s + i
        res: list[UOp] = []
        stride: sint = 1
        for ax in range(len(in_shape) - 1, -1, -1):
            s = in_shape[ax]
            # the outermost axis needs no modulo: a valid flat index is below the total size
            res.append(_idx(0) if sym_eq(s, 1) else (flat // stride) if ax == 0 else (flat // stride) % s)
            stride = stride * s
        ret = tuple(reversed(res))
    elif op is Op.PERMUTE:
        inv = [0] * len(arg)
        for o, a in enumerate(arg):
            inv[a] = o
        ret = tuple(idxs[inv[k]] for k in range(len(arg)))
    elif op is Op.EXPAND:
        ret = tuple(_idx(0) if sym_eq(s, 1) and not sym_eq(t, 1) else i
                    for i, s, t in zip(idxs, in_shape, out_shape, strict=True))
    elif op is Op.PAD:
        res = []
        for i, s, (b, a) in zip(idxs, in_shape, arg, strict=True):
            conds = []
            if not sym_eq(b, 0):
                conds.append(i >= b)
            if not sym_eq(a, 0):
                conds.append(i < _idx(b) + s)
            for c in conds:
                valid = c if valid is None else valid & c
            res.append(i - b)
        ret = tuple(res)
    elif op is Op.SHRINK:
        ret = tuple(i + st for i, (st, _e) in zip(idxs, arg, strict=True))
    elif op is Op.FLIP:
        ret = tuple((_idx(s) - 1) - i if f else i for i, s, f in zip(idxs, in_shape, arg, strict=True))
    else:
        raise ShapeError(f"{op.name} is not a movement op")
    ret = tuple(r.simplify() for r in ret)
    if valid is not None:
        valid = valid.simplify()
        if valid.op is Op.CONST and valid.arg is True:
            valid = None
    return ret, valid
