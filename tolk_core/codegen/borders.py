"""borders: hoist the bounds gates of a padded read to loop bounds, by splitting an output row into pieces.

A reduction that reads its input through a PAD (a convolution with `padding`) carries a gate on every load:
`valid ? x[i] : 0`, valid where the window position lies inside the input. Along the row the position is
`ow + kw - pad`, so the gate is true for every window tap except near the row's two ends. `split_row` cuts the
output row range `r` (size S) into a left border `[0, b)`, an interior `[b, S - b)` and a right border
`[S - b, S)`, `b` the smallest multiple of the vector width for which the interior's gates along the row fold
to true (the simplifier proves it from the ranges' bounds). Each piece is its own copy of the store over a
range of its own; the interior reads the input ungated, so it vectorizes as an unpadded convolution does, and
the border pieces are one or a few vectors whose lane-dependent gates become masked vector loads (the CPU
renderer's `tolk_maskload`; after the C compiler unrolls the window loop, only the taps that reach past the
row's end keep a mask). The pieces compute disjoint outputs, so their order does not matter: `join_pieces`
groups the pieces whose loops are the same into one loop nest.

Gates along other axes (the rows above and below) do not depend on the vector lanes: they stay as one scalar
condition per vector load.

`split_at_gates` does the same for a kernel with no reduction whose gates compare an output range with
constants: a concatenation (`cat` is a sum of padded pieces, each read where `r` lies in its part). Its range
is cut at those constants into pieces in which every such gate is constant, so each part reads one input
ungated, with index arithmetic the simplifier can fold: the three-way cat of the char GPT's q, k and v
gradients divided and took remainders of 64-bit indices a dozen times per element at 0.4 GFLOP/s (docs/
performance.md, "Nested reductions").
"""
from __future__ import annotations

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.uop import UOp


def _gated_loads(ast: UOp) -> list[UOp]:
    """The gated INDEX nodes of buffer loads (a read through a PAD)."""
    return [u for u in ast.toposort() if u.op is Op.INDEX and len(u.src) > 2 and u.src[0].op is Op.PARAM]


def drop_gated_selects(ast: UOp) -> UOp:
    """`ast` with `where(g, load(index(buf, i, g)), 0)` replaced by the load: a gated load already reads 0
    where its gate is false, and the select would be a lane-by-lane operation once the gate is a vector."""
    sub: dict[UOp, UOp] = {}
    for u in ast.toposort():
        if u.op is Op.WHERE and u.src[1].op is Op.LOAD and u.src[2].op is Op.CONST and u.src[2].arg == 0:
            idx = u.src[1].src[0]
            if idx.op is Op.INDEX and len(idx.src) > 2 and idx.src[2] is u.src[0]:
                sub[u] = u.src[1]
    return ast.substitute(sub) if sub else ast


def _range(size: int, rid: int) -> UOp:
    return UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (rid, AxisType.LOOP))


def _piece(top: UOp, r: UOp, at: UOp, rngs: tuple[UOp, ...]) -> UOp:
    """`top` with output range `r` replaced by the expression `at` of the new ranges `rngs`, simplified."""
    ends = tuple(x for s in top.src[1:] for x in (rngs if s is r else (s,)))
    return UOp(Op.END, dtypes.void, (top.src[0].substitute({r: at}), *ends)).simplify()


def split_row(ast: UOp, r: UOp, width: int) -> list[UOp] | None:
    """The pieces of a one-store kernel `ast` along its output range `r` (module docstring), each a SINK of
    one store, or None: no gated load depends on `r`, or no interior at least `width` wide has gates free of
    `r` (a row too short for borders of whole vectors). The two borders are one piece, a loop of two blocks
    (`b * (S - border) + i`): one loop nest whose tile holds one border's accumulators."""
    if len(ast.src) != 1 or ast.src[0].op is not Op.END or r not in ast.src[0].src[1:] or \
            not any(r in g.src[2].toposort() for g in _gated_loads(ast)):
        return None
    top, size = ast.src[0], r.src[0].arg
    rid = 1 + max(u.arg[0] for u in ast.toposort() if u.op is Op.RANGE)
    for border in range(width, size // 2, width):
        mid = _range(size - 2 * border, rid)
        middle = _piece(top, r, mid + border, (mid,))
        if size - 2 * border >= width and not any(mid in g.src[2].toposort() for g in _gated_loads(middle)):
            block, inner = _range(2, rid + 1), _range(border, rid + 2)
            borders = _piece(top, r, block * (size - border) + inner, (block, inner))
            return [UOp(Op.SINK, dtypes.void, (t,)) for t in (borders, middle)]
    return None


CUT_MOST = 8
"""Pieces `split_at_gates` cuts a range into at most (a cat of more parts keeps its gates)."""
PIECES_NODES_MOST = 8192
"""Nodes of all the pieces together at most: each piece is a copy of the kernel's body, compiled."""


def split_at_gates(ast: UOp) -> list[UOp] | None:
    """The pieces of a one-store kernel `ast` along its outermost output range whose gates compare it with
    constants (module docstring), each a SINK of one store over the part of the range between two cuts (a part
    of one element is the constant, not a loop); None when no range has such cuts. Each piece has ranges of its
    own, ids in a block of its own (ranges made later inside different pieces never share an id either): no
    renderer meets one range opened by two loop nests (the PYTHON device's named the second opening's values
    over the first's)."""
    if len(ast.src) != 1 or ast.src[0].op is not Op.END:
        return None
    top = ast.src[0]
    tests = [u for g in _gated_loads(ast) for u in g.src[2].toposort() if u.op is Op.CMPLT and u.src[1].op is Op.CONST]
    if not tests:
        return None
    rid = 1 + max((u.arg[0] for u in ast.toposort() if u.op is Op.RANGE), default=0)
    for r in top.src[1:]:
        if r.op is not Op.RANGE or r.src[0].op is not Op.CONST:
            continue
        size = r.src[0].arg
        cuts = sorted({t.src[1].arg for t in tests if t.src[0] is r and 0 < t.src[1].arg < size})
        if not cuts or len(cuts) >= CUT_MOST:
            continue
        if (len(cuts) + 1) * len(top.toposort()) > PIECES_NODES_MOST:
            continue
        bounds = [0, *cuts, size]
        pieces = []
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
            own = top.substitute({s: s.replace(arg=(rid + 1000 * k + 1 + j, s.arg[1]))
                                  for j, s in enumerate(top.src[1:]) if s is not r and s.op is Op.RANGE})
            if hi - lo == 1:
                pieces.append(_piece(own, r, UOp.const(dtypes.index, lo), ()))
            else:
                part = _range(hi - lo, rid + 1000 * k)
                pieces.append(_piece(own, r, part + lo, (part,)))
        return [UOp(Op.SINK, dtypes.void, (_ungated(p),)) for p in pieces]
    return None


def _ungated(top: UOp) -> UOp:
    """`top` with the gates that folded to true dropped from its loads' indices."""
    sub = {g: UOp(Op.INDEX, g.dtype, g.src[:2]) for g in _gated_loads(top)
           if g.src[2].op is Op.CONST and g.src[2].arg is True}
    return top.substitute(sub) if sub else top


def join_pieces(pieces: list[UOp]) -> UOp:
    """One SINK of the (tiled) pieces' stores. A loop of one iteration is dropped from each END (its range is
    folded to 0 inside), and the stores that then close the same loops are made adjacent, so that linearize
    runs them in one loop nest: a reduction is computed in the first open nest of the loops it depends on, and
    a piece whose one-vector row range had been folded away would otherwise find its accumulators in the
    previous piece's nest."""
    groups: dict[tuple[UOp, ...], list[UOp]] = {}
    for top in (t for p in pieces for t in p.src):
        rngs = tuple(s for s in top.src[1:] if s.src[0].arg != 1) if top.op is Op.END else ()
        store = top.src[0] if top.op is Op.END else top
        groups.setdefault(rngs, []).append(UOp(Op.END, dtypes.void, (store, *rngs)) if rngs else store)
    return UOp(Op.SINK, dtypes.void, tuple(t for g in groups.values() for t in g))
