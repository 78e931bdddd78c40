"""`@tolk_core.function`: call a function of Tensors as one CALL node, inlined by prepare_rangeify (seed 001).

The function is traced once per argument signature (each Tensor argument's shape, dtype and device; every
other argument's value) over placeholders: a Tensor argument of shape `s` is a `PARAM (slot, (size,))` of its
elements, flat, viewed as `s` (a 0-d Tensor is a scalar `PARAM (slot, ())`). The traced result is the body;
each call builds `CALL(body, *arguments)` with an `InlineCall` arg, lazily, like any other op. A function
returning a tuple or list of Tensors gives one CALL per result (their bodies share the traced graph).

The body must be pure and stay on its arguments' device: reading a placeholder's data while tracing, or a copy
between devices inside it, raises CallError. Gradients do not flow through a CALL.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tolk_core.errors import TolkError
from tolk_core.frontend import tensor as tensor_mod
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, prod
from tolk_core.schedule.prepare import InlineCall


class CallError(TolkError, ValueError):
    """A function traced for inline calls that does what a call body cannot: read data, copy across devices,
    or return something other than Tensors."""


def _placeholder(slot: int, t: Tensor) -> Tensor:
    shape = (prod(t.shape),) if t.shape else ()
    param = UOp(Op.PARAM, t.dtype, (), (slot, shape))
    return Tensor(param if tuple(t.shape) in ((), shape) else UOp(Op.RESHAPE, t.dtype, (param,), t.shape), t.device)


def _no_reads(t: Tensor) -> None:
    if any(u.op is Op.PARAM for u in t.uop.toposort()):
        raise CallError("cannot read a value computed from a function's arguments while tracing it for an inline "
                        "call: the body is traced once and must not depend on data")


def function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` called as an inline CALL of its traced body (see the module docstring)."""
    bodies: dict[tuple, tuple[tuple[UOp, ...], bool]] = {}

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        key = tuple((type(a), a.shape, a.dtype, a.device) if isinstance(a, Tensor) else (type(a), a) for a in args)
        if (traced := bodies.get(key)) is None:
            traced = bodies[key] = _trace(fn, args)
        outs, many = traced
        uops = tuple(a.uop for a in args if isinstance(a, Tensor))
        device = next((a.device for a in args if isinstance(a, Tensor)), None)
        results = [Tensor(UOp(Op.CALL, body.dtype, (body, *uops), InlineCall(fn.__qualname__)), device)
                   for body in outs]
        return tuple(results) if many else results[0]

    call.traces = lambda: len(bodies)  # type: ignore[attr-defined] - how many signatures were traced
    return call


def _trace(fn: Callable[..., Any], args: tuple) -> tuple[tuple[UOp, ...], bool]:
    holders, slot = [], 0
    for a in args:  # Tensor arguments are numbered in order: the call's sources after its body
        holders.append(_placeholder(slot, a) if isinstance(a, Tensor) else a)
        slot += isinstance(a, Tensor)
    tensor_mod.read_checks.append(_no_reads)
    try:
        out = fn(*holders)
    finally:
        tensor_mod.read_checks.remove(_no_reads)
    many = isinstance(out, (tuple, list))
    outs = tuple(out) if many else (out,)
    if not outs or not all(isinstance(o, Tensor) for o in outs):
        raise CallError(f"{fn.__qualname__} must return a Tensor or a tuple of Tensors to be called inline, "
                        f"not {type(out).__name__}")
    for o in outs:
        if any(u.op is Op.COPY for u in o.uop.toposort()):
            raise CallError(f"{fn.__qualname__} copies between devices: an inline call's body stays on its "
                            "arguments' device")
    return tuple(o.uop for o in outs), many
