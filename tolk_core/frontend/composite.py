"""composite: a front-end function kept as one node until scheduling, in inference and in training.

`as_node(name, formula, tensors, static)` is `formula(*tensors, *static)` (a function of Tensors returning one
Tensor) as one `CALL(*xs)` with a `Composite` arg (ir/calls.py): prepare_rangeify expands it into exactly the nodes
the formula builds (so the kernels are the formula's), and its gradient is one node per source
(`autograd.node_slope`), expanded into the formula's gradient when scheduled. An eager step builds, walks and keys
one node where the formula builds dozens (a batch norm ~25 forward and ~40 backward, a cross entropy ~30 and
~30), which is most of an eager training step's Python (docs/performance.md, "Eager steps").

The formula runs under `no_grad` when expanded (the nodes a function builds there are the ones it builds for
inference: a product is a composite itself, expanded in turn), once per signature (the sources' shapes and
dtypes) to learn the result's shape and dtype, and then only when a schedule is made. `static`: the formula's other
arguments, hashable (axes, eps): one Composite per (name, formula, static), reused by every call.

A call whose sources are not all on one device named by a string (sharded values: the sharding pass maps only the
IR's own ops) or whose shapes are not plain ints (bound Variables) gets None: the caller builds the formula.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tolk_core.frontend import autograd
from tolk_core.ir.calls import Composite
from tolk_core.ir.dtype import DType
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

Formula = Callable[..., "Tensor"]
# (name, formula, static) -> its composite; (formula, static, the sources' shapes and dtypes) -> the result's
_made: dict[tuple, Composite] = {}
_results: dict[tuple, tuple[tuple[int, ...], DType]] = {}
_RESULTS_MAX = 4096


def as_node(name: str, formula: Formula, tensors: tuple[Tensor, ...], static: tuple = ()) -> Tensor | None:
    """`formula(*tensors, *static)` as one composite node, or None where it cannot be one (see the module
    docstring): the caller then builds the formula itself."""
    nodes = as_nodes(name, formula, tensors, (static,))
    return None if nodes is None else nodes[0]


def as_nodes(name: str, formula: Formula, tensors: tuple[Tensor, ...],
             statics: tuple[tuple, ...]) -> list[Tensor] | None:
    """`as_node` of each of `statics` over the same sources (an update's outputs: Adam's new parameter, m and v),
    the sources checked once; None where they cannot be nodes."""
    device = tensors[0].device
    if type(device) is not str or any(t.device != device or any(type(d) is not int for d in t.shape)
                                      for t in tensors):
        return None
    src = tuple(t.uop for t in tensors)
    signature = tuple((t.shape, t.uop.dtype) for t in tensors)
    out = []
    for static in statics:
        shape, dtype = _result(formula, static, src, signature)
        out.append(tensors[0]._wrap(UOp.shaped(Op.CALL, dtype, src, _composite(name, formula, static), shape)))
    return out


def _result(formula: Formula, static: tuple, src: tuple[UOp, ...], signature: tuple) -> tuple[tuple[int, ...], DType]:
    """The shape and dtype of `formula`'s value (its other arguments `static`) on sources `src` (of `signature`:
    their shapes and dtypes), learnt by building the formula once per signature."""
    if (result := _results.get(sig := (formula, static, signature))) is None:
        from tolk_core.frontend.tensor import Tensor  # (the front end imports this module)
        device = _device(src)
        with autograd.no_grad():
            out = formula(*(Tensor(u, device) for u in src), *static)
        if len(_results) >= _RESULTS_MAX:  # (a program of ever new shapes: learnt again when met again)
            _results.clear()
        result = _results[sig] = (out.shape, out.uop.dtype)
    return result


def _composite(name: str, formula: Formula, static: tuple) -> Composite:
    key = (name, formula, static)
    if (comp := _made.get(key)) is None:
        def expand(*src: UOp) -> UOp:
            from tolk_core.frontend.tensor import Tensor  # (the front end imports this module)
            device = _device(src)
            with autograd.no_grad():
                return formula(*(Tensor(u, device) for u in src), *static).uop

        def out_shape(src: tuple[UOp, ...]) -> Any:  # (a call rebuilt by a rewrite: its sources' shapes are known)
            return _result(formula, static, src, tuple((s._shape, s.dtype) for s in src))[0]
        comp = _made[key] = Composite(name, expand, autograd.node_slope(name, expand), out_shape)
    return comp


def _device(src: tuple[UOp, ...]) -> str | None:
    """The device of a composite's sources (`as_node` takes one named device; a constant source names none)."""
    return next((d for u in src if isinstance(d := u.device, str)), None)
