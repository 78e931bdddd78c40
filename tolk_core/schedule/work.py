"""work: what a kernel implements, read from the tensor graph it is lowered from, for the profiler.

`kernel_info(root, body)` names the tensor-level operations a kernel computing `root` holds and counts the
operations they stand for (its *nominal* work); rangeify puts the result on the kernel, and the LINEAR on the
kernel's CALL (`ir.calls.KernelInfo`, the CALL's arg: the kernel AST, which keys the program caches, stays as
it was).
The profiler (`engine/profile.py`) divides the operations the lowered kernel executes by this count: the work
ratio (docs/performance.md, "Profiling").

Nominal work counts each tensor node once, by the distinct values it computes: an ALU op or a CAST one
operation per element of its shape, not counting the axes it is broadcast along (a value EXPANDed from size 1
is one value along that axis: softmax's negated row maximum is one NEG per row); a REDUCE_AXIS one operation
per element it folds, for each distinct element of its result. Movements, loads, constants, IOTAs, BITCASTs
and nodes computed from constants alone (the lowered kernel folds them into a constant) count none.
"""
from __future__ import annotations

import weakref
from collections.abc import Collection

from tolk_core.ir.calls import KernelInfo
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp, prod, sint


def _label(u: UOp) -> str | None:
    """The name a tensor-level node is listed under in `KernelInfo.ops`; None for nodes that compute nothing."""
    if u.op is Op.REDUCE_AXIS:
        return f"REDUCE_AXIS({u.arg[0].name})"
    return u.op.name if u.op in GroupOp.ALU or u.op in (Op.CAST, Op.BITCAST) else None


def _reshaped(src: tuple[sint, ...], flags: tuple[bool, ...], out: tuple[sint, ...]) -> tuple[bool, ...]:
    """The broadcast flags of a RESHAPE's result: axes of `src` and `out` grouped into runs of equal size; an
    output axis is broadcast when every input axis of its run is. Symbolic or empty shapes: none are."""
    none = (False,) * len(out)
    if not all(isinstance(s, int) and s > 0 for s in (*src, *out)):
        return none
    ins = [(s, f) for s, f in zip(src, flags, strict=True) if s != 1]
    outs = [k for k, s in enumerate(out) if s != 1]
    res, a, b = list(none), 0, 0
    while a < len(ins) and b < len(outs):
        group, members = [ins[a][1]], [outs[b]]
        size_in, size_out = ins[a][0], out[outs[b]]
        a, b = a + 1, b + 1
        while size_in != size_out:
            if size_in < size_out:
                group.append(ins[a][1])
                size_in, a = size_in * ins[a][0], a + 1
            else:
                members.append(outs[b])
                size_out, b = size_out * out[outs[b]], b + 1
        for k in members:
            res[k] = all(group)
    return tuple(res)


def _broadcast(u: UOp, flags: dict[UOp, tuple[bool, ...]]) -> tuple[bool, ...]:
    """Per axis of tensor node `u`, whether it holds one value along the axis (its sources' flags known)."""
    n = len(u.shape) if u.shape is not None else 0
    if u.op is Op.EXPAND:
        return tuple(f or (i == 1 and o != 1) for f, i, o in zip(flags[u.src[0]], u.src[0].tensor_shape, u.arg,
                                                                 strict=True))
    if u.op is Op.PERMUTE:
        return tuple(flags[u.src[0]][a] for a in u.arg)
    if u.op is Op.RESHAPE:
        return _reshaped(u.src[0].tensor_shape, flags[u.src[0]], u.tensor_shape)
    if u.op is Op.PAD:  # a padded axis holds the pad's zeros besides its value: no longer one value
        return tuple(f and not (b or a) for f, (b, a) in zip(flags[u.src[0]], u.arg, strict=True))
    if u.op in (Op.SHRINK, Op.FLIP, Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD):
        return flags[u.src[0]]
    if u.op is Op.REDUCE_AXIS:
        return tuple(f and a not in u.arg[1] for a, f in enumerate(flags[u.src[0]]))
    srcs = [flags[s] for s in u.src]
    if (u.op in GroupOp.ALU or u.op in (Op.CAST, Op.BITCAST)) and srcs and all(len(f) == n for f in srcs):
        return tuple(all(fs) for fs in zip(*srcs, strict=True))
    return (False,) * n  # storage, constants, anything else: every element its own


def _distinct(shape: tuple[sint, ...], flags: tuple[bool, ...]) -> sint:
    return prod(s for s, f in zip(shape, flags, strict=True) if not f)


def nominal_ops(u: UOp, flags: dict[UOp, tuple[bool, ...]]) -> sint:
    """The operations tensor node `u` stands for (module docstring), its and its sources' flags known."""
    if u.op is Op.REDUCE_AXIS:
        src = u.src[0]
        return prod(s if a in u.arg[1] else (1 if f else s) for a, (s, f) in
                    enumerate(zip(src.tensor_shape, flags[src], strict=True)))
    counted = (u.op in GroupOp.ALU or u.op is Op.CAST) and u.shape is not None
    return _distinct(u.tensor_shape, flags[u]) if counted else 0


def _body_order(root: UOp, body: Collection[UOp]) -> list[UOp]:
    """The nodes of `body` reachable from `root` within it, sources first (the graph above is not walked)."""
    order: list[UOp] = []
    seen, stack = {root}, [(root, 0)]
    while stack:
        u, i = stack[-1]
        if i < len(u.src):
            stack[-1] = (u, i + 1)
            if (s := u.src[i]) in body and s not in seen:
                seen.add(s)
                stack.append((s, 0))
        else:
            order.append(stack.pop()[0])
    return order


def kernel_info(root: UOp, body: Collection[UOp]) -> KernelInfo:
    """The KernelInfo of the kernel computing tensor node `root`, whose `body` is the set of nodes it computes
    (root included; every source outside it is a stored value the kernel loads)."""
    counts: dict[str, int] = {}
    nominal: sint = 0
    flags: dict[UOp, tuple[bool, ...]] = {}
    varying: set[UOp] = set()  # nodes that read storage or a Variable: the others fold into constants
    for u in _body_order(root, body):
        for s in u.src:
            if s not in body and s not in flags:  # a stored value: loaded, every element its own
                flags[s] = (False,) * (len(s.shape) if s.shape is not None else 0)
        flags[u] = _broadcast(u, flags) if u.shape is not None else ()
        if u.op in (Op.BUFFER, Op.DEFINE_VAR, Op.BIND, Op.IOTA) or any(s not in body or s in varying for s in u.src):
            varying.add(u)
        if u in varying and (label := _label(u)) is not None:
            counts[label] = counts.get(label, 0) + 1
            nominal = nominal + nominal_ops(u, flags)
    return KernelInfo(tuple(counts.items()), nominal)


# broadcast flags of tensor nodes, a pure function of the (immutable) node: remembered while the node lives
_flags: weakref.WeakKeyDictionary[UOp, tuple[bool, ...]] = weakref.WeakKeyDictionary()


def broadcast_flags(u: UOp) -> tuple[bool, ...]:
    """Per axis of tensor node `u`, whether it holds one value along that axis (an EXPAND from size one on the
    way, not undone by a computation that reads another value along the axis)."""
    if (hit := _flags.get(u)) is not None:
        return hit
    flags: dict[UOp, tuple[bool, ...]] = {}
    for x in u.toposort():
        if (known := _flags.get(x)) is not None:
            flags[x] = known
            continue
        flags[x] = _broadcast(x, flags) if x.shape is not None else ()
        _flags[x] = flags[x]
    return flags[u]
