"""Spec validators: what a well-formed graph of each stage looks like.

`validate(sink, stage)` checks every node of the graph under `sink` for `stage` in {"tensor", "kernel",
"program"} and raises SpecError naming the offending node (its number and line in the listing).
`check(sink, stage)` does the same only when the SPEC setting is >= 1 (passes call this; tests set SPEC).

Bodies of calls are opaque to the stage of their caller: the first source of CALL (the callee) and the
sources of PROGRAM are validated at their own stage, not the caller's.
"""
from __future__ import annotations

from collections.abc import Callable

from tolk_core import config
from tolk_core.errors import ShapeError, SpecError
from tolk_core.ir.dtype import AddrSpace, PtrDType, dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp, listing

_TENSOR_ONLY = GroupOp.Movement | {Op.REDUCE_AXIS, Op.COPY, Op.STAGE, Op.ALLOC, Op.CONTIGUOUS, Op.DETACH,
                                   Op.CONTIGUOUS_BACKWARD, Op.ASSIGN}
_PROGRAM_ONLY = frozenset({Op.PROGRAM, Op.LINEAR, Op.SLICE})
_KERNEL_ONLY = frozenset({Op.RANGE, Op.END, Op.INDEX, Op.LOAD, Op.IF, Op.ENDIF, Op.BARRIER, Op.DEFINE_LOCAL,
                          Op.DEFINE_REG, Op.SPECIAL, Op.VECTORIZE, Op.GEP})
ALLOWED = {
    "tensor": frozenset(Op) - _KERNEL_ONLY - _PROGRAM_ONLY,
    "kernel": frozenset(Op) - _TENSOR_ONLY - _PROGRAM_ONLY - {Op.BUFFER, Op.CALL},
    "program": GroupOp.Program,
}
_ARITY = {**{o: 1 for o in GroupOp.Unary}, **{o: 2 for o in GroupOp.Binary}, **{o: 3 for o in GroupOp.Ternary}}


def _nodes(sink: UOp) -> list[UOp]:
    """The nodes of this stage under sink, sources first, not entering call bodies."""
    order: list[UOp] = []
    seen = {sink}
    stack: list[tuple[UOp, int]] = [(sink, 0)]
    while stack:
        u, i = stack[-1]
        srcs = () if u.op is Op.PROGRAM else u.src[1:] if u.op is Op.CALL else u.src
        if i < len(srcs):
            stack[-1] = (u, i + 1)
            if (s := srcs[i]) not in seen:
                seen.add(s)
                stack.append((s, 0))
        else:
            stack.pop()
            order.append(u)
    return order


def _check_alu(u: UOp) -> str | None:
    if len(u.src) != _ARITY[u.op]:
        return f"{u.op.name} takes {_ARITY[u.op]} sources, has {len(u.src)}"
    if u.op is Op.WHERE:
        c, a, b = u.src
        if c.dtype.scalar() != dtypes.bool:
            return f"WHERE condition must be bool, is {c.dtype!r}"
        if not (a.dtype == b.dtype == u.dtype):
            return f"WHERE branches {a.dtype!r}/{b.dtype!r} must both be {u.dtype!r}"
        return None
    if u.op in GroupOp.Comparison:
        if u.dtype.scalar() != dtypes.bool:
            return f"comparison must give bool, gives {u.dtype!r}"
        if u.src[0].dtype != u.src[1].dtype:
            return f"compares {u.src[0].dtype!r} with {u.src[1].dtype!r}"
        return None
    for s in u.src:
        if s.dtype != u.dtype and not (u.op in (Op.SHL, Op.SHR) and s is u.src[1] and dtypes.is_int(s.dtype)):
            return f"source dtype {s.dtype!r} differs from result dtype {u.dtype!r}"
    if u.op in (Op.IDIV, Op.MOD) and u.dtype.kind not in ("i", "u"):
        return f"{u.op.name} needs an integer dtype, has {u.dtype!r}"
    return None


def _check_common(u: UOp) -> str | None:
    op = u.op
    if op in GroupOp.ALU:
        return _check_alu(u)
    if op is Op.CONST:
        kind, v = u.dtype.kind, u.arg
        ok = (kind == "b" and isinstance(v, bool)) or (kind in "iu" and type(v) is int) or \
            (kind == "f" and type(v) is float)
        if not ok:
            return f"CONST value {v!r} does not fit {u.dtype!r}"
        if any(s.op is not Op.DEVICE for s in u.src):
            return "CONST may only have a DEVICE source"
        return None
    if op is Op.DEFINE_VAR:
        a = u.arg
        if not (isinstance(a, tuple) and len(a) == 3 and isinstance(a[0], str) and a[1] <= a[2]):
            return f"DEFINE_VAR arg must be (name, min, max) with min <= max, is {a!r}"
        if not dtypes.is_int(u.dtype) or u.src:
            return "DEFINE_VAR must be an integer without sources"
        return None
    if op is Op.BIND:
        if len(u.src) != 2 or u.src[0].op is not Op.DEFINE_VAR or u.src[1].op is not Op.CONST:
            return "BIND must be BIND(DEFINE_VAR, CONST)"
        _, lo, hi = u.src[0].arg
        if not lo <= u.src[1].arg <= hi:
            return f"BIND value {u.src[1].arg} outside [{lo}, {hi}]"
        return None
    if op in (Op.CAST, Op.BITCAST) and len(u.src) != 1:
        return f"{op.name} takes one source"
    if op is Op.SINK and u.dtype != dtypes.void:
        return "SINK must be void"
    return None


def _check_tensor(u: UOp) -> str | None:
    op = u.op
    if op is Op.BUFFER and not any(s.op is Op.DEVICE for s in u.src):
        return "BUFFER needs a DEVICE source"
    if op in GroupOp.Movement and len(u.src) != 1:
        return f"{op.name} takes one source"
    if op is Op.REDUCE_AXIS:
        a = u.arg
        if not (isinstance(a, tuple) and len(a) == 2 and a[0] in (Op.ADD, Op.MUL, Op.MAX)
                and all(isinstance(x, int) for x in a[1])):
            return f"REDUCE_AXIS arg must be (ADD|MUL|MAX, axes), is {a!r}"
    if op is Op.COPY and not any(s.op is Op.DEVICE for s in u.src[1:]):
        return "COPY needs a target DEVICE source"
    try:
        _ = u.shape
    except ShapeError as e:
        return f"bad shape: {e}"
    return None


def _ptr_base(u: UOp) -> PtrDType | None:
    return u.dtype if isinstance(u.dtype, PtrDType) else None


def _check_kernel(u: UOp) -> str | None:
    op = u.op
    if op is Op.RANGE and (not u.src or not dtypes.is_int(u.src[0].dtype) or not dtypes.is_int(u.dtype)):
        return "RANGE needs an integer end and an integer dtype"
    if op is Op.SPECIAL and (not u.src or not dtypes.is_int(u.src[0].dtype)):
        return "SPECIAL needs an integer size source"
    if op is Op.INDEX:
        if len(u.src) < 2 or _ptr_base(u.src[0]) is None:
            return "INDEX needs a pointer source and an index"
        if not all(dtypes.is_int(s.dtype) or s.dtype.scalar() == dtypes.bool for s in u.src[1:]):
            return "INDEX indices (and gate) must be integers (bool)"
    if op is Op.LOAD:
        if not u.src or u.src[0].op is not Op.INDEX and _ptr_base(u.src[0]) is None:
            return "LOAD must read through an INDEX"
    if op is Op.STORE:
        if len(u.src) < 2:
            return "STORE needs a target and a value"
        p = _ptr_base(u.src[0])
        if p is None:
            return "STORE target must be a pointer (an INDEX)"
        if u.src[1].dtype.scalar() != p.base.scalar():
            return f"STORE of {u.src[1].dtype!r} into a pointer to {p.base!r}"
    if op in (Op.DEFINE_LOCAL, Op.DEFINE_REG):
        want = AddrSpace.LOCAL if op is Op.DEFINE_LOCAL else AddrSpace.REG
        if not isinstance(u.dtype, PtrDType) or u.dtype.addrspace is not want:
            return f"{op.name} must have a {want.name} pointer dtype"
    if op is Op.END and (not u.src or any(s.op is not Op.RANGE for s in u.src[1:])):
        return "END must be END(value, *ranges)"
    return None


def _check_program(u: UOp) -> str | None:
    op = u.op
    if op is Op.LINEAR and any(s.op is not Op.CALL for s in u.src):
        return "LINEAR sources must all be CALLs"
    if op is Op.CALL and not u.src:
        return "CALL needs a callee source"
    if op is Op.SLICE:
        if len(u.src) != 1 or u.src[0].op not in (Op.BUFFER, Op.PARAM, Op.SLICE):
            return "SLICE must view one BUFFER, PARAM or SLICE"
        if not (isinstance(u.arg, tuple) and all(type(x) is int and x >= 0 for x in u.arg)):
            return f"SLICE arg must be concrete non-negative ints (offset, size), is {u.arg!r}"
    if op is Op.PROGRAM and u.arg is None:
        return "PROGRAM needs its program info as arg"
    return None


_STAGE_CHECKS: dict[str, Callable[[UOp], str | None]] = {
    "tensor": _check_tensor, "kernel": _check_kernel, "program": _check_program}


def validate(sink: UOp, stage: str) -> None:
    """Raise SpecError naming the first node (sources first) of `sink`'s graph that breaks `stage`'s spec."""
    if stage not in _STAGE_CHECKS:
        raise SpecError(f"unknown stage {stage!r}; stages: {', '.join(_STAGE_CHECKS)}")
    allowed, stage_check = ALLOWED[stage], _STAGE_CHECKS[stage]
    nodes = _nodes(sink)
    for u in nodes:
        if u.op not in allowed:
            reason: str | None = f"{u.op.name} is not allowed in a {stage} graph"
        else:
            reason = _check_common(u) or stage_check(u)
        if reason is not None:
            src = ", ".join(f"{s.op.name}" for s in u.src)
            arg = "" if u.arg is None else f" arg={u.arg!r}"
            idx = sink.toposort().index(u)  # the node's %number in the listing
            where = f"node %{idx}: {u.op.name} {u.dtype!r}{arg}" + (f" src=({src})" if src else "")
            graph = listing(sink) if len(nodes) <= 40 else f"({len(nodes)} nodes)"
            raise SpecError(f"{stage} spec: {reason}\n  at {where}\n{graph}")


def check(sink: UOp, stage: str) -> UOp:
    """validate() when the SPEC setting is on; returns sink so passes can chain it."""
    if config.get("SPEC") >= 1:
        validate(sink, stage)
    return sink
