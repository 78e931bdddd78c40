"""Reverse-mode gradients over tensor-level UOps.

A gradient rule exists per UOp op, not per Tensor method: every composite Tensor op (softmax, matmul,
conv2d, layernorm, ... including ones added later) is a graph of these ops, so it is differentiated for free.
Gradients are themselves tensor-level UOps: they stay lazy, fuse with the forward graph when realized, and a
JIT captures them like any other computation.

Contracts:
- `gradient(root, root_grad, targets)` returns d(root)/d(t) (weighted by `root_grad`) for each target UOp
  reached from `root` through differentiable ops; unreached targets are absent. DETACH stops gradients;
  CONTIGUOUS_BACKWARD passes them through CONTIGUOUS (realized there); TRUNC, comparisons, integer and
  bitcast results carry none.
- Ties split evenly: at MAX(a, b) with a == b each side gets half, and a MAX reduction shares its gradient
  equally between every element equal to the maximum (torch's amax rule).
- Tensors that receive `.grad` are the ones marked `requires_grad` (`track`), matched by their UOp: a tensor
  marked while lazy is realized first, so its UOp is its own storage and no other tensor's graph.
- `no_grad()`: while active, `backward()` raises GradientError and marking a tensor does nothing.
"""
from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tolk_core.errors import TolkError
from tolk_core.frontend.arguments import check_devices
from tolk_core.ir.calls import Composite, is_composite, is_inline_call
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.ir.uop import UOp, sint
from tolk_core.schedule import placements, prepare

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

_LN_2 = math.log(2)


class GradientError(TolkError):
    """A gradient that cannot be taken: no tensor requires grad, a non-scalar root without a seed gradient,
    an op without a gradient rule, backward inside no_grad()."""


# ---------------------------------------------------------------- helpers building tensor-level UOps
# Every helper records the shape of the node it makes (`UOp.shaped`): a gradient has its node's shape, known
# here, and a node built without one has it worked out later by a walk over its whole graph (the backward
# graph is most of a train step's nodes). tests/training/test_rules.py checks them against the shapes that walk gives.
def _node(op: Op, dtype: DType, src: tuple[UOp, ...], arg: object, shape: tuple[sint, ...]) -> UOp:
    return UOp.shaped(op, dtype, src, arg, shape)


def _full(like: UOp, value: float | bool) -> UOp:
    """A constant of `like`'s shape and dtype."""
    c = UOp.const(like.dtype, value)
    shape = tuple(like.tensor_shape)
    if not shape:
        return c
    return _node(Op.EXPAND, like.dtype, (_node(Op.RESHAPE, like.dtype, (c,), (1,) * len(shape), (1,) * len(shape)),),
                 shape, shape)


def _alu(op: Op, *srcs: UOp) -> UOp:
    """An elementwise op; its sources have one shape (a broadcast is an EXPAND in the graph already)."""
    dt = dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype
    return _node(op, dt, srcs, None, srcs[0].tensor_shape)


def _mul(a: UOp, b: UOp) -> UOp: return _alu(Op.MUL, a, b)
def _neg(a: UOp) -> UOp: return _alu(Op.NEG, a)
def _scale(a: UOp, k: float) -> UOp: return _mul(a, _full(a, k))


def _where(c: UOp, a: UOp, b: UOp) -> UOp: return _node(Op.WHERE, a.dtype, (c, a, b), None, a.tensor_shape)


def _sum_to(g: UOp, axes: tuple[int, ...]) -> UOp:
    """Sum over `axes`, keeping them with size 1."""
    if not axes:
        return g
    return _node(Op.REDUCE_AXIS, g.dtype, (g,), (Op.ADD, axes),
                 tuple(1 if i in axes else s for i, s in enumerate(g.tensor_shape)))


def _expand(g: UOp, shape: tuple) -> UOp:
    shape = tuple(shape)
    return g if tuple(g.tensor_shape) == shape else _node(Op.EXPAND, g.dtype, (g,), shape, shape)


def _tie_share(a: UOp, b: UOp) -> UOp:
    """1 where a > b, 1/2 where a == b, 0 where a < b (a's share of MAX(a, b)'s gradient)."""
    return _where(_alu(Op.CMPLT, b, a), _full(a, 1.0), _where(_alu(Op.CMPEQ, a, b), _full(a, 0.5), _full(a, 0.0)))


# ---------------------------------------------------------------- the rules
# Each rule takes (node, its gradient) and returns one gradient (or None) per source.
Rule = Callable[[UOp, UOp], tuple[UOp | None, ...]]


def _reduce_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
    op, axes = u.arg
    x = u.src[0]
    if op is Op.ADD:
        return (_expand(g, x.tensor_shape),)
    if op is Op.MAX:  # shared evenly between the elements equal to the maximum
        # g * (hit / count), not hit * (g / count): the count is read at x's shape, beside the mask, so the
        # kernel computing g (a convolution's input gradient under a max pool) does not read the pool's input
        # at the window's stride, which kept its row from vector lanes (docs/performance.md, CNN row)
        hit = _where(_alu(Op.CMPEQ, x, _expand(u, x.tensor_shape)), _full(x, 1.0), _full(x, 0.0))
        count = _sum_to(hit, axes)
        return (_mul(_expand(g, x.tensor_shape), _alu(Op.FDIV, hit, _expand(count, x.tensor_shape))),)
    raise GradientError(f"no gradient rule for a {op.name} reduction (REDUCE_AXIS {u.arg})")


def _expand_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
    ins = tuple(u.src[0].tensor_shape)
    return (_sum_to(g, tuple(i for i, (a, b) in enumerate(zip(ins, u.arg, strict=True)) if a != b)),)


def _permute_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
    inverse = tuple(sorted(range(len(u.arg)), key=lambda i: u.arg[i]))
    return (_node(Op.PERMUTE, g.dtype, (g,), inverse, tuple(u.src[0].tensor_shape)),)


def _pad_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
    shape = tuple(u.src[0].tensor_shape)
    return (_node(Op.SHRINK, g.dtype, (g,), tuple((b, b + s) for (b, _), s in zip(u.arg, shape, strict=True)), shape),)


def _shrink_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
    shape = tuple(u.src[0].tensor_shape)
    return (_node(Op.PAD, g.dtype, (g,), tuple((lo, s - hi) for (lo, hi), s in zip(u.arg, shape, strict=True)), shape),)


def _call_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
    """A composite kept whole (ir/calls.py) by its own slope; any other call has no rule (an inline call is
    differentiated through its body, inlined before the walk)."""
    if not is_composite(u):
        raise GradientError(f"no gradient rule for CALL (dtype {u.dtype.name}, shape {tuple(u.shape or ())}) "
                            "between a tensor that requires grad and the root")
    return u.arg.slope(u, g)


def _cast_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
    src = u.src[0]
    return (_node(Op.CAST, src.dtype, (g,), None, g.tensor_shape) if dtypes.is_float(src.dtype) else None,)


_RULES: dict[Op, Rule] = {
    Op.ADD: lambda u, g: (g, g),
    Op.SUB: lambda u, g: (g, _neg(g)),
    Op.MUL: lambda u, g: (_mul(g, u.src[1]), _mul(g, u.src[0])),
    Op.FDIV: lambda u, g: (_alu(Op.FDIV, g, u.src[1]),
                           _neg(_alu(Op.FDIV, _mul(g, u), u.src[1]))),
    Op.NEG: lambda u, g: (_neg(g),),
    Op.EXP2: lambda u, g: (_scale(_mul(g, u), _LN_2),),
    Op.LOG2: lambda u, g: (_alu(Op.FDIV, g, _scale(u.src[0], _LN_2)),),
    Op.SIN: lambda u, g: (_mul(g, _alu(Op.COS, u.src[0])),),
    Op.COS: lambda u, g: (_mul(g, _alu(Op.NEG, _alu(Op.SIN, u.src[0]))),),
    Op.SQRT: lambda u, g: (_alu(Op.FDIV, g, _scale(u, 2.0)),),
    Op.RECIPROCAL: lambda u, g: (_neg(_mul(g, _mul(u, u))),),
    Op.TRUNC: lambda u, g: (None,),  # piecewise constant: zero almost everywhere
    # fmod(a, b) = a - b * trunc(a / b)
    Op.MOD: lambda u, g: (g, _neg(_mul(g, _alu(Op.TRUNC, _alu(Op.FDIV, u.src[0], u.src[1]))))),
    Op.MAX: lambda u, g: (_mul(g, _tie_share(u.src[0], u.src[1])), _mul(g, _tie_share(u.src[1], u.src[0]))),
    Op.WHERE: lambda u, g: (None, _where(u.src[0], g, _full(g, 0.0)), _where(u.src[0], _full(g, 0.0), g)),
    Op.CAST: _cast_rule,
    Op.CALL: _call_rule,
    Op.REDUCE_AXIS: _reduce_rule,
    Op.RESHAPE: lambda u, g: (_node(Op.RESHAPE, g.dtype, (g,), tuple(u.src[0].tensor_shape),
                                    tuple(u.src[0].tensor_shape)),),
    Op.PERMUTE: _permute_rule,
    Op.EXPAND: _expand_rule,
    Op.PAD: _pad_rule,
    Op.SHRINK: _shrink_rule,
    Op.FLIP: lambda u, g: (_node(Op.FLIP, g.dtype, (g,), u.arg, g.tensor_shape),),
    Op.CONTIGUOUS: lambda u, g: (g,),
    Op.DETACH: lambda u, g: (None,),
    Op.CONTIGUOUS_BACKWARD: lambda u, g: (_stored(g),),
}


def _stored(g: UOp) -> UOp:
    """The gradient `g` stored once (as `contiguous()` stores a value): every reader of the gradient arriving at
    a `contiguous_backward()` reads its buffer instead of recomputing it."""
    out = _node(Op.CONTIGUOUS, g.dtype, (g,), None, g.tensor_shape)
    placements.seed_contiguous(out)
    return out


# node -> its gradient as a whole, for composite ops whose node-by-node gradient is slow (conv2d: docs/training.md,
# "Convolution gradients"). Weak keys: an entry lives while its node does; the node is hash-consed, so every
# graph holding the same node shares the entry (the same computation, the same gradient).
Vjp = Callable[[UOp], "list[tuple[UOp, UOp]]"]
_vjps: weakref.WeakKeyDictionary[UOp, Vjp] = weakref.WeakKeyDictionary()


def define_gradient(u: UOp, vjp: Vjp) -> None:
    """Differentiate `u` by `vjp` instead of its op's rule: `vjp(g)` for `u`'s gradient `g` returns
    (node, gradient) pairs for nodes `u` is computed from (any depth below `u`: the nodes between get nothing
    through `u`). It must equal what the rules would give; it only chooses a cheaper graph for it."""
    _vjps[u] = vjp


def _differentiable(u: UOp) -> bool:
    return dtypes.is_float(u.dtype)


def gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """d(root)/d(target) for every target in `targets` reached from `root`, seeded with `root_grad` (root's
    shape and dtype). Only nodes on a path from a target to the root are differentiated. Inline calls
    (`tolk_core.function`) are differentiated through their bodies, inlined as prepare_rangeify inlines them."""
    if any(is_inline_call(u) for u in root.toposort()):
        root = graph_rewrite(root, prepare.pm_inline_calls, name="inline calls, for gradients")
    return _accumulate(root.toposort(), root, root_grad, targets)


def formula_gradient(root: UOp, root_grad: UOp, leaves: tuple[UOp, ...]) -> dict[UOp, UOp]:
    """`gradient` of `root` for `leaves`, where `root` is a formula built over `leaves` (a composite's
    expansion: ir/calls.py): the walk stops at the leaves, so the graph below them, which may be a whole
    unrolled model, is not visited once per composite."""
    order: list[UOp] = []
    seen: set[UOp] = set(leaves)
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:  # sources before users, leaves excluded (each is a target, not a formula node)
        u, done = stack.pop()
        if done:
            order.append(u)
            continue
        if u in seen:
            continue
        seen.add(u)
        stack.append((u, True))
        stack.extend((s, False) for s in reversed(u.src) if s not in seen)
    return _accumulate(list(leaves) + order, root, root_grad, set(leaves), partial=True)


def formula_slope(formula: Callable[..., UOp], y: UOp, g: UOp) -> tuple[UOp | None, ...]:
    """A composite's slope by its formula: the gradients reaching each source of y = CALL(*xs) from g, by the
    rules over `formula(*xs)`'s nodes (`formula_gradient`). A node that is several sources (`a @ a`, an input
    given as its own state) gets its whole derivative at its first position."""
    grads = formula_gradient(formula(*y.src), g, y.src)
    seen: set[UOp] = set()
    out: list[UOp | None] = []
    for s in y.src:
        out.append(None if s in seen else grads.get(s))
        seen.add(s)
    return tuple(out)


def node_slope(name: str, formula: Callable[..., UOp]) -> Callable[[UOp, UOp], tuple[UOp | None, ...]]:
    """A composite's slope whose gradients are composite nodes too: for y = CALL(*xs) of formula `formula`
    reached by g, the gradient of each float source xs[i] is one node CALL(*xs, g), of xs[i]'s shape and
    dtype, which prepare_rangeify expands into the formula's gradient (`formula_gradient` over `formula(*xs)`,
    the nodes `formula_slope` builds now; zeros where none reaches xs[i]). An eager training step then builds,
    walks and keys one node per source instead of the formula and its gradient (a GRU cell: ~70 nodes);
    scheduling (a cache miss only) expands them into the same graph, so the kernels are the formula's. A node
    that is several sources gets its whole derivative at its first position. The gradient nodes differentiate
    by their own expansion (second order, `formula_slope`)."""
    made: dict[int, Composite] = {}

    def grad_of(i: int) -> Composite:
        if (c := made.get(i)) is None:
            def expand(*src: UOp) -> UOp:
                xs, g = src[:-1], src[-1]
                got = formula_gradient(formula(*xs), g, xs).get(xs[i])
                return got if got is not None else _full(xs[i], 0.0)
            c = made[i] = Composite(f"{name} gradient {i}", expand, lambda y, g: formula_slope(expand, y, g),
                                    lambda src: src[i]._shape)
        return c

    def slope(y: UOp, g: UOp) -> tuple[UOp | None, ...]:
        out: list[UOp | None] = []
        for i, s in enumerate(y.src):
            first = y.src.index(s) == i
            out.append(_node(Op.CALL, s.dtype, (*y.src, g), grad_of(i), s.tensor_shape)
                       if first and _differentiable(s) else None)
        return tuple(out)
    return slope


def _accumulate(order: list[UOp], root: UOp, root_grad: UOp, targets: set[UOp],
                partial: bool = False) -> dict[UOp, UOp]:
    """The gradients of `targets` from `root`'s (`root_grad`), by the rules applied from `root` down `order` (a
    toposort: sources before users), only on paths from a target to the root. `partial`: a target passes
    nothing on to the nodes below it (each target's own derivative: the caller's walk carries it further)."""
    on_path: set[UOp] = set()
    for u in order:  # sources first: a node is on a path if it is a target or a source of it is
        if u in targets or (u.op is not Op.DETACH and not on_path.isdisjoint(u.src)):
            on_path.add(u)
    grads: dict[UOp, UOp] = {root: root_grad}
    for u in reversed(order):
        g = grads.get(u)
        if g is None or not _differentiable(u) or on_path.isdisjoint(u.src) or (partial and u in targets):
            continue
        if u.op not in _RULES and u not in _vjps:
            raise GradientError(f"no gradient rule for {u.op.name} (dtype {u.dtype.name}, shape "
                                f"{tuple(u.shape or ())}) between a tensor that requires grad and the root")
        vjp = _vjps.get(u)
        for s, sg in (vjp(g) if vjp is not None else zip(u.src, _RULES[u.op](u, g), strict=True)):
            if sg is None or s not in on_path or not _differentiable(s):
                continue
            grads[s] = sg if s not in grads else _alu(Op.ADD, grads[s], sg)
    return {t: grads[t] for t in targets if t in grads}


# ---------------------------------------------------------------- tensor-facing state
_grad_enabled = [True]
# id -> tensor, for every live tensor marked requires_grad (keyed by id: Tensor.__eq__ builds a graph, so
# tensors cannot be set members)
_tracked: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


def is_grad_enabled() -> bool:
    return _grad_enabled[0]


def gradients_expected() -> bool:
    """Whether a value built now may be differentiated by `backward()` as things stand: gradients are enabled
    and some live tensor requires grad. (A graph built otherwise can still be differentiated later: this only
    chooses between equal graphs the one cheaper to build or to differentiate.)"""
    return _grad_enabled[0] and bool(_tracked)


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Within: `backward()` raises GradientError and `requires_grad = True` does nothing. Nothing is recorded
    during forward passes anyway (gradients are derived from the graph on demand), so this is for code that
    must not differentiate by mistake (evaluation, optimizer updates)."""
    prev = _grad_enabled[0]
    _grad_enabled[0] = False
    try:
        yield
    finally:
        _grad_enabled[0] = prev


def track(t: Tensor, on: bool) -> bool:
    """Mark (or unmark) `t` as requiring grad; returns the flag actually stored. A lazy tensor is realized
    first so that its UOp is its own storage."""
    if not on or not _grad_enabled[0]:
        _tracked.pop(id(t), None)
        return False
    if not dtypes.is_float(t.dtype):
        raise GradientError(f"only float tensors can require gradients, this one is {t.dtype.name}")
    if not _is_storage(t.uop):
        t.realize()
    _tracked[id(t)] = t
    return True


def may_flow(u: UOp) -> bool:
    """Whether a gradient could flow into `u`: gradients are enabled and a tensor marked requires_grad (now)
    is in `u`'s graph. (A tensor marked after a value was built from it gets no gradient through the ops that
    chose a gradient-free form, as in torch, where marking comes before use.)"""
    if not _grad_enabled[0] or not _tracked:
        return False
    nodes = set(u.toposort())
    return any(t.uop in nodes for t in list(_tracked.values()))


def _is_storage(u: UOp) -> bool:
    return u.storage_base(GroupOp.Movement).op is Op.BUFFER


def backward(root: Tensor, seed: Tensor | None = None) -> None:
    """Accumulate d(root)/d(t) into `t.grad` for every tensor `t` marked requires_grad that `root` depends on.
    `seed` (root's shape, on root's device: else DeviceMismatchError) weights the root; it may be left out when
    root has one element."""
    from tolk_core.frontend.tensor import Tensor
    if not _grad_enabled[0]:
        raise GradientError("backward() inside no_grad(): gradients are disabled there")
    if not dtypes.is_float(root.dtype):
        raise GradientError(f"backward() of a {root.dtype.name} tensor: only float results have gradients")
    if seed is None:
        if root.numel() != 1:
            raise GradientError(f"backward() of a tensor of shape {root.shape} needs a gradient of that shape "
                                "(only one-element tensors default to a gradient of 1)")
        seed = Tensor.ones(root.shape, dtype=root.dtype, device=root.device)
    elif tuple(seed.shape) != tuple(root.shape):
        raise GradientError(f"backward() gradient of shape {seed.shape} for a tensor of shape {root.shape}")
    check_devices("backward()", (root, seed))
    nodes = set(root.uop.toposort())
    leaves = [t for t in list(_tracked.values()) if t.uop in nodes]
    if not leaves:
        raise GradientError("backward(): nothing this tensor depends on requires grad (mark parameters with "
                            "requires_grad = True before computing from them; a tensor realized before "
                            "backward() has lost its graph)")
    grads = gradient(root.uop, seed.cast(root.dtype).uop, {t.uop for t in leaves})
    for t in leaves:
        if (g := grads.get(t.uop)) is not None:
            new = Tensor(g, t.device)
            t.grad = new if t.grad is None else t.grad + new
