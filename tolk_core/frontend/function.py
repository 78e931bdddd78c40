"""`@tolk_core.function`: call a function of Tensors as one CALL node, inlined by prepare_rangeify (docs/prepare.md).

The function is traced once per argument signature (each Tensor argument's shape, dtype and device; every
other argument's value) over placeholders: a Tensor argument of shape `s` is a `PARAM (slot, (size,))` of its
elements, flat, viewed as `s` (a 0-d Tensor is a scalar `PARAM (slot, ())`). The traced result is the body;
each call builds `CALL(body, *arguments)` with an `InlineCall` arg, lazily, like any other op. A function
returning a tuple or list of Tensors gives one CALL per result (their bodies share the traced graph).

Bodies that store: `x.assign(v)` (or `x[1:3].assign(v)`, `x[1:3] = v`) on a view of an argument records
`STORE(view, v)` and rebinds the assigned Tensor and the argument's own Tensor to the state after the store,
`AFTER(view, STORE)`: later reads in the body, and a returned argument, see the stored value. Like
`Tensor.assign`, each call performs its stores when it is made, in the order the body made them, into the
arguments' storage (a lazy argument that is stored into is realized first); the returned values stay lazy, and
prepare's `resolve_returned_after` reads a returned state from the argument's storage. A value the body read
from an argument before storing into it (a Tensor derived from the argument before the store) is taken from a
copy made before the first store, where a later store or a result reads it. A storing call inside another
body records its stores into the outer body.

The body must stay on its arguments' device: reading a placeholder's data while tracing, or a copy between
devices inside it, raises CallError. Gradients flow through a CALL's inlined body (autograd inlines it).

`custom_kernel` runs a kernel given as code (a call compiled on its own, not inlined), now, like an assignment.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tolk_core.engine import realize as engine
from tolk_core.errors import DeviceMismatchError, TolkError
from tolk_core.frontend import tensor as tensor_mod
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.ir.uop import UOp, prod
from tolk_core.schedule import prepare
from tolk_core.schedule.prepare import InlineCall


class CallError(TolkError, ValueError):
    """A function traced for inline calls that does what a call body cannot: read data, copy across devices,
    or return something other than Tensors."""


def _param_of(u: UOp) -> UOp | None:
    """The PARAM placeholder that `u` views (through movements, bitcasts and states after stores), else None."""
    if not tensor_mod.views_param(u):
        return None
    while u.op is not Op.PARAM:
        u = u.src[0]
    return u


def _stored_param(store: UOp) -> UOp:
    """The PARAM placeholder a traced STORE writes: a traced body stores only into its arguments."""
    p = _param_of(store.src[0])
    assert p is not None, "a traced store writes an argument"
    return p


@dataclass
class _Trace:
    """One trace in progress: the argument Tensors' placeholders and the stores the body made, in order."""
    holders: list[Any]
    stores: list[UOp] = field(default_factory=list)

    def record(self, dest: UOp, value: UOp) -> UOp:
        """Record `STORE(dest, value)`; every argument placeholder it writes moves to the state after it."""
        store = UOp(Op.STORE, dtypes.void, (dest, value))
        self.stores.append(store)
        param = _param_of(dest)
        for h in self.holders:
            if isinstance(h, Tensor) and _param_of(h.uop) is param:
                h.uop = UOp(Op.AFTER, h.dtype, (h.uop, store))
        return UOp(Op.AFTER, dest.dtype, (dest, store))


_traces: list[_Trace] = []


def _record_assign(target: Tensor, value: Tensor) -> bool:
    """Tensor.assign's hook while tracing: a store into a view of a placeholder is recorded, not performed."""
    if not _traces or _param_of(target.uop) is None:
        return False
    target.uop = _traces[-1].record(target.uop, value.uop)
    return True


def _placeholder(slot: int, t: Tensor) -> Tensor:
    shape = (prod(t.shape),) if t.shape else ()
    param = UOp(Op.PARAM, t.dtype, (), (slot, shape))
    return Tensor(param if tuple(t.shape) in ((), shape) else UOp(Op.RESHAPE, t.dtype, (param,), t.shape), t.device)


def _no_reads(t: Tensor) -> None:
    if any(u.op is Op.PARAM for u in t.uop.toposort()):
        raise CallError("cannot read a value computed from a function's arguments while tracing it for an inline "
                        "call: the body is traced once and must not depend on data")


@dataclass(frozen=True)
class _Traced:
    outs: tuple[UOp, ...]
    many: bool
    stores: tuple[UOp, ...]


def function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` called as an inline CALL of its traced body (see the module docstring)."""
    bodies: dict[tuple, _Traced] = {}

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        key = tuple((type(a), a.shape, a.dtype, a.device) if isinstance(a, Tensor) else (type(a), a) for a in args)
        if (traced := bodies.get(key)) is None:
            traced = bodies[key] = _trace(fn, args)
        tensors = [a for a in args if isinstance(a, Tensor)]
        outs, uops = _perform_stores(fn.__qualname__, traced, tensors) if traced.stores else \
            (traced.outs, tuple(a.uop for a in tensors))
        device = tensors[0].device if tensors else None
        results = [Tensor(UOp(Op.CALL, body.dtype, (body, *uops), InlineCall(fn.__qualname__)), device)
                   for body in outs]
        return tuple(results) if traced.many else results[0] if results else None

    # how many signatures were traced; a function object takes attributes, which its declared type does not list
    call.traces = lambda: len(bodies)  # type: ignore[attr-defined]  # an attribute of the wrapper, for tests
    return call


def _pre_state_reads(u: UOp) -> set[UOp]:
    """The PARAMs that `u` reads as they were before any store: reached without passing through an AFTER."""
    seen, stack, out = set(), [u], set()
    while stack:
        x = stack.pop()
        if x in seen or x.op is Op.AFTER:
            continue
        seen.add(x)
        if x.op is Op.PARAM:
            out.add(x)
        stack.extend(x.src)
    return out


def _perform_stores(name: str, traced: _Traced, args: list[Tensor]) -> tuple[tuple[UOp, ...], tuple[UOp, ...]]:
    """Perform a call's stores into its arguments now, in order (or record them into the enclosing trace).
    Returns the result bodies, their reads of a stored argument's earlier value taken from a copy made first,
    and the call's arguments: an argument that is not stored into but reads storage the call writes
    (Shape.reads_storage_written) is a value at the time of the call, so it is materialised first."""
    written = {_stored_param(s) for s in traced.stores}
    nested = bool(_traces) and any(_param_of(a.uop) is not None for a in args)
    for p in written:  # a stored argument must be storage (or a placeholder of an enclosing trace)
        a = args[p.arg[0]]
        if _param_of(a.uop) is None and not tensor_mod.views_storage(a.uop):
            a.realize()
    first = {p: next(i for i, s in enumerate(traced.stores) if _stored_param(s) is p) for p in written}
    # (inside another body the enclosing call takes its own copies: nothing runs while tracing)
    stale = set() if nested else \
        {p for p in written if any(p in _pre_state_reads(o) for o in traced.outs) or
         any(p in _pre_state_reads(s.src[1]) for i, s in enumerate(traced.stores) if i > first[p])}
    pinned = {u: u for s in (*traced.outs, *traced.stores) for u in s.toposort() if u.op is Op.AFTER}
    snapshot = {p: UOp(Op.RESHAPE, p.dtype, (args[p.arg[0]].contiguous().realize().uop,), p.arg[1]) for p in stale}
    fix = {**pinned, **snapshot}
    uops = tuple(a.uop for a in args)
    dests = tuple(uops[p.arg[0]] for p in written)
    if not nested:
        uops = tuple(u if i in {p.arg[0] for p in written} or not prepare.reads_storage_written(u, dests) else
                     Tensor(u, args[i].device).contiguous().realize().uop for i, u in enumerate(uops))
    for store in traced.stores:
        store = store.replace(src=(store.src[0], store.src[1].substitute(fix))) if snapshot else store
        bound = graph_rewrite(UOp(Op.SINK, dtypes.void, (UOp(Op.CALL, dtypes.void, (store, *uops), InlineCall(name)),)),
                              prepare.pm_inline_calls, name="bind a call's store")
        bound = graph_rewrite(bound, prepare.pm_returned_after, bottom_up=True, name="a call's earlier stores")
        dest, value = bound.src[0].src
        if _traces and _param_of(dest) is not None:
            _traces[-1].record(dest, value)  # a call inside a body: its stores are the enclosing body's
        else:
            tensor_mod.before_write(tensor_mod.storage_of(dest), value)
            engine.assign(args[0].device, dest, value)
    return (tuple(o.substitute(fix) for o in traced.outs) if snapshot else traced.outs), uops


def _trace(fn: Callable[..., Any], args: tuple) -> _Traced:
    holders, slot = [], 0
    for a in args:  # Tensor arguments are numbered in order: the call's sources after its body
        holders.append(_placeholder(slot, a) if isinstance(a, Tensor) else a)
        slot += isinstance(a, Tensor)
    trace = _Trace(holders)
    tensor_mod.read_checks.append(_no_reads)
    tensor_mod.assign_hooks.append(_record_assign)
    _traces.append(trace)
    try:
        out = fn(*holders)
    finally:
        _traces.pop()
        tensor_mod.assign_hooks.remove(_record_assign)
        tensor_mod.read_checks.remove(_no_reads)
    many = isinstance(out, (tuple, list))
    outs = tuple(out) if many else () if out is None and trace.stores else (out,)
    if not (outs or trace.stores) or not all(isinstance(o, Tensor) for o in outs):
        raise CallError(f"{fn.__qualname__} must return a Tensor or a tuple of Tensors to be called inline "
                        f"(or None when it stores into its arguments), not {type(out).__name__}")
    for o in (*(o.uop for o in outs), *trace.stores):
        if any(u.op is Op.COPY for u in o.toposort()):
            raise CallError(f"{fn.__qualname__} copies between devices: an inline call's body stays on its "
                            "arguments' device")
    return _Traced(tuple(o.uop for o in outs), many, tuple(trace.stores))


def custom_kernel(source: str, name: str, outputs: Sequence[Tensor | tuple[tuple[int, ...], Any]],
                  inputs: Sequence[Tensor] = (), global_size: tuple[int, int, int] = (1, 1, 1),
                  local_size: tuple[int, int, int] | None = None) -> list[Tensor]:
    """Run a kernel given as code now (a call compiled on its own, not inlined) and return its outputs.

    `source` is one function named `name` in the device's dialect (C for CPU, OpenCL C for OPENCL) taking one
    pointer per output, then one per input, in order. An output is a Tensor viewing storage (written in place:
    a run of whole elements of its storage, else CallArgumentError) or `(shape, dtype)` for new storage. The
    arguments follow prepare's `code_call_arguments`: storage read from its first element is passed as it is, a
    run read elsewhere is copied into new storage first unless another argument writes its storage, and any
    other input (a computed value, a view that reorders) is computed into new storage first. `global_size`
    counts work groups of `local_size` items. All Tensors must be on one device (DeviceMismatchError).
    """
    outs = [o if isinstance(o, Tensor) else Tensor.empty(*o[0], dtype=o[1],
                                                          device=inputs[0].device if inputs else None)
            for o in outputs]
    tensors = [*outs, *inputs]
    if len(devices := {t.device for t in tensors}) > 1:
        raise DeviceMismatchError(f"kernel {name} is given Tensors on {sorted(devices)}: one device only")
    code = prepare.KernelCode(source, name, (True,) * len(outs) + (False,) * len(inputs), (*global_size,),
                              None if local_size is None else (*local_size,))  # as tuples (lists are taken too)
    callee = UOp(Op.SINK, dtypes.void, (), code)
    engine.run_code_call(tensors[0].device, UOp(Op.CALL, dtypes.void, (callee, *(t.uop for t in tensors))))
    return outs
