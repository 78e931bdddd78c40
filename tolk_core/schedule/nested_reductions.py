"""nested_reductions: a reduction of a reduction by the same operation becomes one reduction over both sets of axes.

Autograd makes such pairs wherever a value was broadcast twice: a linear layer's weight, broadcast over the batch
and over the tokens of `x @ W.T`, gets its gradient as a sum over the tokens (the matmul's own reduction, keeping
the batch axis) and then a sum over the batch, with a reshape and a permute between the two. Two reductions are
two nested sums in one kernel, which codegen's matmul plan does not recognise (it wants one sum over one range):
a weight gradient of the char GPT ran at 12-15 GFLOP/s where the same sum written over both axes at once ran at
47 (docs/performance.md, "Nested reductions"). Folding the sums in another order changes only rounding, as any
reduction order does.

A pair merges only when nothing else reads the inner reduction or the movements between the two (otherwise the
inner sums would be computed twice), when the movements only permute axes and add or drop axes of size 1 (so
every axis of the outer reduction is an axis of the inner one), the operation and dtype are the same throughout,
every size is a plain int, and no placement was declared on any node of the pair.
"""
from __future__ import annotations

from collections import Counter

from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule import placements

_MOVES = (Op.RESHAPE, Op.PERMUTE)


def merge_nested_reductions(sink: UOp) -> UOp:
    """`sink` with every mergeable pair of nested reductions (module docstring) replaced by one reduction; a chain
    of three or more merges pair by pair, one pass each."""
    for _ in range(8):  # each pass merges the innermost pairs whose outer reduction is not itself an inner one
        readers: Counter[UOp] = Counter(s for u in sink.toposort() for s in u.src)
        merged: dict[UOp, UOp] = {}
        inner_of_merged: set[UOp] = set()
        for u in sink.toposort():
            if u.op is Op.REDUCE_AXIS and u not in inner_of_merged and (hit := _merge(u, readers)) is not None:
                merged[u], inner = hit
                inner_of_merged.add(inner)
        merged = {u: v for u, v in merged.items() if u not in inner_of_merged}
        if not merged:
            return sink
        sink = sink.substitute(merged)
    return sink


def _merge(outer: UOp, readers: Counter[UOp]) -> tuple[UOp, UOp] | None:
    """The one reduction `outer` and the reduction below it amount to, and that inner reduction; None when the
    pair cannot merge (module docstring)."""
    chain: list[UOp] = []
    x = outer.src[0]
    while x.op in _MOVES:
        chain.append(x)
        x = x.src[0]
    if x.op is not Op.REDUCE_AXIS or x.arg[0] is not outer.arg[0]:
        return None
    inner = x
    nodes = [inner, *chain]
    if any(readers[n] != 1 or placements.intent(n) is not None for n in nodes) or placements.intent(outer) \
            is not None or any(n.dtype != outer.dtype for n in (*nodes, inner.src[0])):
        return None
    shapes = [n.tensor_shape for n in (inner.src[0], *nodes, outer)]
    if any(not isinstance(d, int) for s in shapes for d in s):
        return None
    origin = _origins(inner, chain[::-1])
    if origin is None:
        return None
    src_shape = outer.src[0].tensor_shape
    more = {origin[a] for a in outer.arg[1] if src_shape[a] != 1}
    if None in more:
        return None
    axes = tuple(sorted({*inner.arg[1], *more}))
    return _shaped(UOp(Op.REDUCE_AXIS, outer.dtype, (inner.src[0],), (outer.arg[0], axes)), outer, origin), inner


def _origins(inner: UOp, chain: list[UOp]) -> list[int | None] | None:
    """For each axis of the chain's last node (the outer reduction's source), the axis of `inner` it is (None: a
    unit axis a reshape added); None when a reshape does more than add or drop unit axes."""
    shape = list(inner.tensor_shape)
    origin: list[int | None] = list(range(len(shape)))
    for m in chain:
        if m.op is Op.PERMUTE:
            origin = [origin[a] for a in m.arg]
            shape = [shape[a] for a in m.arg]
            continue
        new = list(m.arg)
        kept = [(d, o) for d, o in zip(shape, origin, strict=True) if d != 1]
        if [d for d, _ in kept] != [d for d in new if d != 1]:
            return None
        it = iter(kept)
        origin = [next(it)[1] if d != 1 else None for d in new]
        shape = new
    return origin


def _shaped(merged: UOp, outer: UOp, origin: list[int | None]) -> UOp:
    """`merged` (the inner source's shape with 1 at every reduced axis) moved into `outer`'s shape: its axes of
    size > 1 kept in order, put in the order the chain had them in, then reshaped to `outer`'s shape."""
    out_shape = outer.tensor_shape
    survivors = [a for a, d in enumerate(merged.tensor_shape) if d != 1]
    order = [origin[a] for a, d in enumerate(out_shape) if d != 1]
    x = merged
    squeezed = tuple(merged.tensor_shape[a] for a in survivors)
    if squeezed != tuple(merged.tensor_shape):
        x = UOp(Op.RESHAPE, x.dtype, (x,), squeezed)
    perm = tuple(survivors.index(a) for a in order)  # type: ignore[arg-type]  # every surviving axis has an origin
    if perm != tuple(range(len(perm))):
        x = UOp(Op.PERMUTE, x.dtype, (x,), perm)
    if tuple(x.tensor_shape) != tuple(out_shape):
        x = UOp(Op.RESHAPE, x.dtype, (x,), tuple(out_shape))
    return x
