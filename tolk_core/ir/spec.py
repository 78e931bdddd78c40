"""Spec validators: what a well-formed graph of each stage looks like.

`validate(x, stage)` checks the graph under `x` for `stage` and raises SpecError naming the offending node (its
number and line in the listing). Stages:

- "tensor": any tensor-level graph (what the front end builds);
- "prepared": what prepare_rangeify produces: a SINK of STOREs into storage (a BUFFER, or views or states of
  one), calls of kernels given as code, and storage (a source that only viewed storage), with no inline call,
  DETACH, CONTIGUOUS_BACKWARD or NOOP left;
- "kernel": one kernel's SINK (rangeify's lowerer, codegen's optimizer); every RANGE carries
  `(axis number, AxisType)`, and no range built only for analysis (PROBE, VIEW);
- "linear": what create_linear produces: a LINEAR of CALL(kernel SINK, *BUFFERs), the buffers bound to the
  kernel's PARAM slots 0..n-1 in order, each kernel valid at the kernel stage;
- "program": a LINEAR of compiled calls (PROGRAM bodies, SLICE views);
- "linearized": codegen's flat program (a list of UOps, `codegen.linearize`): loops open and close in order,
  and every instruction reads only values computed before it in its own block or an enclosing one.

`check(x, stage, producer)` validates only when the SPEC setting is >= 1, and raises StageSpecError naming the
pass `producer` that made the bad graph; the pipeline calls it after each stage (one setting read when off).

Bodies of calls are opaque to the stage of their caller: the first source of CALL (the callee) and the
sources of PROGRAM are validated at their own stage, not the caller's (the "linear" stage validates its
kernels at the kernel stage).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tolk_core import config
from tolk_core.errors import ShapeError, SpecError, StageSpecError
from tolk_core.ir.calls import is_code_call, is_composite, is_inline_call
from tolk_core.ir.dtype import AddrSpace, DType, PtrDType, dtypes
from tolk_core.ir.ops import AxisType, GroupOp, Op
from tolk_core.ir.uop import UOp, listing

_TENSOR_ONLY = GroupOp.Movement | {Op.REDUCE_AXIS, Op.COPY, Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD,
                                   Op.ASSIGN, Op.IOTA}
_PROGRAM_ONLY = frozenset({Op.PROGRAM, Op.LINEAR, Op.SLICE})
_KERNEL_ONLY = frozenset({Op.RANGE, Op.END, Op.INDEX, Op.LOAD, Op.IF, Op.BARRIER, Op.DEFINE_LOCAL, Op.DEFINE_REG,
                          Op.SPECIAL, Op.VECTORIZE, Op.GEP})
ALLOWED = {
    "tensor": frozenset(Op) - _KERNEL_ONLY - _PROGRAM_ONLY,
    # prepare_rangeify drops DETACH and CONTIGUOUS_BACKWARD, and the NOOPs of dropped self-stores
    "prepared": frozenset(Op) - _KERNEL_ONLY - _PROGRAM_ONLY - {Op.DETACH, Op.CONTIGUOUS_BACKWARD, Op.NOOP},
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


def _lanes_fit(s: DType, dt: DType) -> bool:
    """Whether an operand of dtype `s` fits an op over `dt`: the same dtype, or the scalar of a vector `dt`
    (codegen's lane vectorization leaves lane-free operands scalar; the dialects broadcast them)."""
    return s == dt or (dt.count > 1 and s == dt.scalar())


def _check_alu(u: UOp) -> str | None:
    if len(u.src) != _ARITY[u.op]:
        return f"{u.op.name} takes {_ARITY[u.op]} sources, has {len(u.src)}"
    if u.op is Op.WHERE:
        c, a, b = u.src
        if c.dtype.scalar() != dtypes.bool:
            return f"WHERE condition must be bool, is {c.dtype!r}"
        if not (_lanes_fit(a.dtype, u.dtype) and _lanes_fit(b.dtype, u.dtype)):
            return f"WHERE branches {a.dtype!r}/{b.dtype!r} must both be {u.dtype!r}"
        return None
    if u.op in GroupOp.Comparison:
        if u.dtype.scalar() != dtypes.bool:
            return f"comparison must give bool, gives {u.dtype!r}"
        da, db = u.src[0].dtype, u.src[1].dtype
        if not (da == db or _lanes_fit(da, db) or _lanes_fit(db, da)):
            return f"compares {u.src[0].dtype!r} with {u.src[1].dtype!r}"
        return None
    for s in u.src:
        shift = u.op in (Op.SHL, Op.SHR) and s is u.src[1] and dtypes.is_int(s.dtype)
        if not _lanes_fit(s.dtype, u.dtype) and not shift:
            return f"source dtype {s.dtype!r} differs from result dtype {u.dtype!r}"
    if u.op is Op.IDIV and u.dtype.kind not in ("i", "u"):  # (MOD of floats is fmod)
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
    if op is Op.IOTA and (not dtypes.is_int(u.dtype) or len(u.src) != 1 or u.src[0].op is not Op.DEVICE):
        return "IOTA must be an integer with one DEVICE source"
    try:
        _ = u.shape
    except ShapeError as e:
        return f"bad shape: {e}"
    return None


def _ptr_base(u: UOp) -> PtrDType | None:
    return u.dtype if isinstance(u.dtype, PtrDType) else None


def _check_prepared(u: UOp) -> str | None:
    if is_inline_call(u):
        return f"inline call {u.arg.name!r} left in the graph (prepare_rangeify inlines every one)"
    if is_composite(u):
        return f"composite {u.arg.name!r} left in the graph (prepare_rangeify expands every one)"
    return _check_tensor(u)


def _check_range(u: UOp) -> str | None:
    if not u.src or not dtypes.is_int(u.src[0].dtype) or not dtypes.is_int(u.dtype):
        return "RANGE needs an integer end and an integer dtype"
    a = u.arg
    if not (isinstance(a, tuple) and len(a) == 2 and type(a[0]) is int):
        return f"RANGE arg must be (axis number, AxisType), is {a!r}"
    if not isinstance(a[1], AxisType):
        return f"RANGE kind {a[1]!r} is not an AxisType member (ranges are built with AxisType members)"
    if a[1] in (AxisType.PROBE, AxisType.VIEW):
        return f"RANGE of kind {a[1].name} is built only for analysis and is never part of a kernel"
    return None


def _check_kernel(u: UOp) -> str | None:
    op = u.op
    if op is Op.RANGE:
        return _check_range(u)
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
    # (codegen's group plans replace some ranges by work-item indices: such a source closes no loop)
    if op is Op.END and (not u.src or any(s.op is not Op.RANGE and not dtypes.is_int(s.dtype) for s in u.src[1:])):
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


def _prepared_form(sink: UOp) -> tuple[UOp, str] | None:
    """The first source of the prepared SINK that is not a STORE into storage or a call of code, with why."""
    if sink.op is not Op.SINK:
        return sink, f"a prepared graph is a SINK, not {sink.op.name}"
    for s in sink.src:
        if s.op is Op.STORE:
            if len(s.src) != 2:
                return s, f"STORE takes (destination, value), has {len(s.src)} sources"
            if (base := s.src[0].storage_base(GroupOp.ViewOfState)).op is not Op.BUFFER:
                return s, f"STORE destination {s.src[0].op.name} views {base.op.name}, not storage (a BUFFER)"
        elif not is_code_call(s) and s.op is not Op.BUFFER:
            return s, f"{s.op.name} in the SINK (its sources are STOREs, calls of kernels given as code and storage)"
    return None


def _linear_form(linear: UOp) -> tuple[UOp, str, UOp] | None:
    """The first bad call of a schedule's LINEAR (or bad node of its kernel), with why and the graph to list."""
    if linear.op is not Op.LINEAR:
        return linear, f"a schedule is a LINEAR, not {linear.op.name}", linear
    for call in linear.src:
        if call.op is not Op.CALL or not call.src or call.src[0].op is not Op.SINK:
            return call, "LINEAR sources must be CALL(kernel SINK, *buffers)", linear
        kernel, args = call.src[0], call.src[1:]
        params = {u.arg: u for u in kernel.toposort() if u.op is Op.PARAM}
        if sorted(params) != list(range(len(args))):
            return call, f"the kernel reads PARAM slots {sorted(params)}, the call passes {len(args)} buffers", linear
        for slot, p in sorted(params.items()):
            if args[slot].op is not Op.BUFFER or args[slot].dtype != p.ptrdtype.base:
                return call, (f"argument {slot} is {args[slot].op.name} of {args[slot].dtype!r}, the kernel's PARAM "
                              f"{slot} points to {p.ptrdtype.base!r}"), linear
        if (bad := _node_violation(kernel, "kernel")) is not None:
            return *bad, kernel
    return None


def _linearized_violation(program: list[UOp]) -> tuple[int, str] | None:
    """(position, why) of the first instruction of a flat program that reads a value not computed before it in
    its own block or an enclosing one, or that opens or closes loops out of order. An INDEX is an address the
    renderers spell out where a LOAD or STORE uses it, so its sources are checked there instead."""
    scopes: list[set[UOp]] = [set()]
    loops: list[UOp] = []
    done: set[UOp] = set()  # every statement placed so far, in any block: a fill's END stands for its STORE

    def missing(s: UOp) -> UOp | None:
        if s.op is Op.INDEX:
            return next((m for x in s.src if (m := missing(x)) is not None), None)
        ok = s.op in (Op.CONST, Op.PARAM, Op.DEFINE_VAR) or any(s in sc for sc in scopes) or \
            s.op is Op.END and all(x in done for x in (s.src[0].src if s.src[0].op is Op.SINK else s.src[:1]))
        return None if ok else s

    for i, u in enumerate(program):
        if u.op is Op.END:
            if len(u.src) != 1 or not loops or u.src[0] is not loops[-1]:
                return i, "END must close the innermost open loop"
            loops.pop()
            scopes.pop()
            continue
        if u.op is not Op.INDEX and (m := next((m for s in u.src if (m := missing(s)) is not None), None)):
            return i, f"{u.op.name} reads a {m.op.name} that is not computed before it in an enclosing block"
        done.add(u)
        if u.op is Op.RANGE:  # its counter exists inside its loop only
            if u in loops:
                return i, "RANGE opened again inside its own loop"
            loops.append(u)
            scopes.append({u})
            continue
        scopes[-1].add(u)
        if u.op is Op.DEFINE_REG and isinstance(u.arg, UOp):
            scopes[-1].add(u.arg)  # after its loop, the REDUCE names this accumulator
    return (len(program), f"{len(loops)} loop(s) never closed") if loops else None


def _node_violation(sink: UOp, stage: str) -> tuple[UOp, str] | None:
    """The first node (sources first) of `sink`'s graph that breaks `stage`'s per-node rules, with why."""
    allowed, stage_check = ALLOWED[stage], _STAGE_CHECKS[stage]
    for u in _nodes(sink):
        if u.op not in allowed:
            return u, f"{u.op.name} is not allowed in a {stage} graph"
        if (reason := _check_common(u) or stage_check(u)) is not None:
            return u, reason
    return None


def _where(u: UOp, root: UOp) -> str:
    """`u` as the error names it: its %number in `root`'s listing, op, dtype, arg and sources; then the listing."""
    src = ", ".join(f"{s.op.name}" for s in u.src)
    arg = "" if u.arg is None else f" arg={u.arg!r}"
    order = root.toposort()
    where = f"node %{order.index(u)}: {u.op.name} {u.dtype!r}{arg}" + (f" src=({src})" if src else "")
    return f"  at {where}\n" + (listing(root) if len(order) <= 40 else f"({len(order)} nodes)")


def _program_listing(program: list[UOp]) -> str:
    """A flat program one instruction a line, `i: OP dtype arg (sources)`, sources by instruction number (or op
    name when not an instruction); long programs give their length only."""
    if len(program) > 80:
        return f"({len(program)} instructions)"
    at = {u: i for i, u in enumerate(program)}
    lines = []
    for i, u in enumerate(program):
        arg = "" if u.arg is None or isinstance(u.arg, UOp) else f" {u.arg!r}"
        src = ", ".join(str(at[s]) if s in at else s.op.name for s in u.src)
        lines.append(f"{i}: {u.op.name} {u.dtype!r}{arg}" + (f" ({src})" if src else ""))
    return "\n".join(lines)


_STAGE_CHECKS: dict[str, Callable[[UOp], str | None]] = {
    "tensor": _check_tensor, "prepared": _check_prepared, "kernel": _check_kernel, "program": _check_program}
STAGES = ("tensor", "prepared", "kernel", "linear", "program", "linearized")


def validate(x: UOp | list[UOp], stage: str) -> None:
    """Raise SpecError naming the first node of `x` that breaks `stage`'s spec: for graph stages the first
    (sources first) of `x`'s graph, for "linearized" the first instruction of the program `x`."""
    if stage not in STAGES:
        raise SpecError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    if stage == "linearized":
        assert not isinstance(x, UOp), "the linearized stage checks a program: a list of instructions"
        if (bad_line := _linearized_violation(list(x))) is not None:
            i, reason = bad_line
            u = x[i] if i < len(x) else None
            at = "the end" if u is None else f"instruction {i}: {u.op.name} {u.dtype!r}"
            raise SpecError(f"linearized spec: {reason}\n  at {at}\n{_program_listing(x)}", stage, u, reason)
        return
    assert isinstance(x, UOp)
    if stage == "linear":
        bad = _linear_form(x)
    else:
        found = (_prepared_form(x) if stage == "prepared" else None) or _node_violation(x, stage)
        bad = None if found is None else (*found, x)
    if bad is not None:
        u, reason, root = bad
        raise SpecError(f"{stage} spec: {reason}\n{_where(u, root)}", stage, u, reason)


# what check() passes through: a graph, or a linearized program
_Checked = TypeVar("_Checked", UOp, list[UOp])


def check(x: _Checked, stage: str, producer: str = "") -> _Checked:
    """validate() when the SPEC setting is on; returns `x` so passes can chain it. A failure raises
    StageSpecError naming `producer`, the pass whose output `x` is."""
    if config.get("SPEC") >= 1:
        try:
            validate(x, stage)
        except SpecError as e:
            if not producer or e.stage is None:
                raise
            raise StageSpecError(f"{producer} produced a bad {stage} graph: {e}", e.stage, e.node, e.reason,
                                 producer) from None
    return x
