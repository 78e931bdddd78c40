"""upcast: replicate a kernel's body over a small constant range, as unrolled copies or as vector lanes.

Two expansions of an output range `r` of size `S` by a factor `U` dividing `S` (both keep every element's
value: they only change which loop iteration computes it):

- `unroll_output(ast, r, U)`: `r` becomes a range `r'` of size `S/U`, and each store is copied `U` times with
  `r = r' * U + c` for `c = 0..U-1`. A reduction inside becomes `U` reductions over the same loops; linearize
  folds them in one loop, so each copy keeps its own accumulator (register blocking), and loads that do not
  depend on `r` are shared by every copy (hash-consing makes them one node).
- `vectorize_lanes(ast, r, W)`: `r = r' * W + lane`, where `lane` stands for all `W` values at once: every
  value that depends on it gets a vector dtype of `W` lanes. A load or store whose index is `base + lane`
  becomes one contiguous vector access at `base`; any other lane-dependent index is a gather or a scatter.
  A reduction range can be split the same way (`split_range_lanes`): the REDUCE then folds over `lane` too,
  which becomes a vector accumulator over `r'` whose lanes are folded together (GEP) after the loop.
"""
from __future__ import annotations

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.uop import UOp


def _next_range_id(ast: UOp) -> int:
    return 1 + max((u.arg[0] for u in ast.toposort() if u.op is Op.RANGE), default=-1)


def _split(ast: UOp, r: UOp, factor: int) -> tuple[UOp, UOp]:
    """(the range of size ceil(size(r)/factor) that replaces `r`, keeping its id, and a fresh range of size
    factor)."""
    outer = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, -(-r.src[0].arg // factor)),), r.arg)
    return outer, UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, factor),), (_next_range_id(ast), AxisType.LANE))


def _retop(top: UOp, old: UOp, new: UOp, mapping: dict[UOp, UOp]) -> UOp:
    if top.op is not Op.END:
        return top.substitute(mapping)
    rngs = tuple(new if s is old else s for s in top.src[1:])
    return UOp(Op.END, dtypes.void, (top.src[0].substitute(mapping), *rngs))


def unroll_output(ast: UOp, r: UOp, factor: int) -> tuple[UOp, UOp]:
    """(`ast` with output range `r` unrolled `factor` times (see the module docstring), the range replacing
    `r`); `factor` divides r's constant size. The copies of one store are adjacent tops with the same ranges."""
    outer, _ = _split(ast, r, factor)
    tops = [_retop(t, r, outer, {r: outer * factor + c}) for t in ast.src for c in range(factor)]
    return UOp(Op.SINK, dtypes.void, tuple(tops)).simplify(), outer


def hoist_range(ast: UOp, r: UOp) -> UOp:
    """`ast` with output range `r` made the outermost loop of every END that closes it."""
    tops = [UOp(Op.END, dtypes.void, (t.src[0], r, *(s for s in t.src[1:] if s is not r)))
            if t.op is Op.END and r in t.src[1:] else t for t in ast.src]
    return UOp(Op.SINK, dtypes.void, tuple(tops))


def lane_index_split(idx: UOp, lane: UOp) -> UOp | None:
    """`base` when `idx` is `base + lane` with `base` free of `lane`, else None."""
    if idx is lane:
        return UOp.const(dtypes.index, 0)
    terms, stack = [], [idx]
    while stack:
        t = stack.pop()
        if t.op is Op.ADD:
            stack.extend(t.src)
        else:
            terms.append(t)
    hits = [t for t in terms if t is lane]
    rest = [t for t in terms if t is not lane]
    if len(hits) != 1 or any(lane in t.toposort() for t in rest):
        return None
    base = rest[0]
    for t in rest[1:]:
        base = UOp(Op.ADD, dtypes.index, (base, t))
    return base


def split_lanes(ast: UOp, r: UOp, width: int) -> tuple[UOp, UOp, UOp]:
    """(`ast` with `r = r' * width + lane`, simplified, the range `r'`, and the `lane` placeholder range).
    When `width` does not divide r's size S (at least `width`), r' counts ceil(S / width) vectors and the last
    one starts at S - width instead: `r = min(r' * width, S - width) + lane`. It overlaps its neighbour, which
    computes the same values, so every vector is whole and no scalar tail loop is needed; only for a kernel
    that does not read what it stores (an in-place update would read the overlap's new values)."""
    outer, lane = _split(ast, r, width)
    size = r.src[0].arg
    start = outer * width if size % width == 0 else (outer * width).minimum(size - width)
    tops = [_retop(t, r, outer, {r: start + lane}) for t in ast.src]
    return UOp(Op.SINK, dtypes.void, tuple(tops)).simplify(), outer, lane


def split_range_lanes(ast: UOp, r: UOp, width: int) -> tuple[UOp, UOp]:
    """(`ast` with range `r = r' * width + lane`, simplified; the `lane` placeholder range). `width` divides
    r's constant size. Every END closing `r` closes `r'` instead, and every REDUCE over `r` reduces over `r'`
    and `lane` (see vectorize_lanes)."""
    outer, lane = _split(ast, r, width)
    new: dict[UOp, UOp] = {r: outer * width + lane}
    for u in ast.toposort():
        if u in new:
            continue
        src = tuple(new.get(s, s) for s in u.src)
        if u.op in (Op.REDUCE, Op.END) and r in u.src[1:]:
            rngs = tuple(outer if s is r else s for s in u.src[1:])
            new[u] = UOp(u.op, u.dtype, (src[0], *rngs, *((lane,) if u.op is Op.REDUCE else ())), u.arg)
        elif src != u.src:
            new[u] = u.replace(src=src)
    return new[ast].simplify(), lane


def lanes_are_contiguous(ast: UOp, lane: UOp, arrays: bool = False, masked_loads: bool = False) -> bool:
    """Whether every memory access that depends on `lane` is `base + lane` (no gathers or scatters); buffer
    accesses only, or kernel-local arrays too with `arrays`. A gate that depends on `lane` makes an access
    lane by lane, except a buffer load's with `masked_loads` (the renderer loads the vector under a mask)."""
    loaded = {u.src[0] for u in ast.toposort() if u.op is Op.LOAD}
    for u in ast.toposort():
        if u.op is Op.INDEX and (arrays or u.src[0].op is Op.PARAM) and lane in u.toposort():
            masked = masked_loads and u in loaded and u.src[0].op is Op.PARAM
            if lane_index_split(u.src[1], lane) is None or \
                    (len(u.src) > 2 and not masked and lane in u.src[2].toposort()):
                return False
    return True


def fold_lanes(vec: UOp, op: Op) -> UOp:
    """The lanes of `vec` folded with `op` as a tree of halves: lanes i and i + n/2 first, as one operation on
    vectors of n/2 lanes (GEP with a tuple arg: a contiguous run of lanes), down to two scalars; a count that is
    not a power of two folds its lanes pairwise one by one. A vector accumulator of 16 lanes folds in 4 vector
    operations and one scalar one, where lane by lane it took 15 extractions and 15 scalar operations (a dot
    product of K = 128 spent more on them than on its FMAs)."""
    n = vec.dtype.count
    while n > 2 and n & (n - 1) == 0:  # powers of two only: C vector types of other sizes do not exist
        half = vec.dtype.scalar().vec(n // 2)
        lo, hi = (UOp(Op.GEP, half, (vec,), tuple(range(start, start + n // 2))) for start in (0, n // 2))
        vec, n = UOp(op, half, (lo, hi)), n // 2
    parts = [UOp(Op.GEP, vec.dtype.scalar(), (vec,), i) for i in range(n)]
    while len(parts) > 1:  # pairwise: independent operations
        parts = [UOp(op, parts[i].dtype, tuple(parts[i:i + 2])) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def vectorize_lanes(ast: UOp, lane: UOp, width: int) -> UOp:
    """`ast` with the `lane` placeholder replaced by the lane vector `(0, 1, .., width-1)` and every value that
    depends on it widened to `width` lanes. Must run after the last simplify: vector nodes are for the
    renderer only. Contiguous accesses become INDEX(param, base) under a vector LOAD/STORE."""
    dep: set[UOp] = set()
    new: dict[UOp, UOp] = {}
    for u in ast.toposort():
        if u is lane:
            dep.add(u)
            new[u] = UOp(Op.VECTORIZE, dtypes.index.vec(width),
                         tuple(UOp.const(dtypes.index, i) for i in range(width)))
            continue
        src = tuple(new[s] for s in u.src)
        if u.op is Op.REDUCE and lane in u.src[1:]:  # a vector accumulator, its lanes folded after the loop
            body = src[0] if u.src[0] in dep else UOp(Op.VECTORIZE, u.dtype.vec(width), (src[0],) * width)
            acc = UOp(Op.REDUCE, u.dtype.vec(width), (body, *(new[s] for s in u.src[1:] if s is not lane)), u.arg)
            new[u] = fold_lanes(acc, u.arg)
            continue
        # a load's value depends on its index only (its other sources order it after an array's fill)
        if not any(s in dep for s in (u.src[:1] if u.op is Op.LOAD else u.src)):
            new[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
            continue
        dep.add(u)
        if u.op is Op.INDEX and (base := lane_index_split(u.src[1], lane)) is not None:
            # base is lane-free: unchanged; a gate that depends on the lanes is a vector (a masked load)
            new[u] = UOp(Op.INDEX, u.dtype, (src[0], base, *src[2:]), "vec")
        elif u.op is Op.STORE and src[0].arg == "vec" and u.src[1] not in dep:  # a lane-free value, broadcast
            val = UOp(Op.VECTORIZE, src[1].dtype.vec(width), (src[1],) * width)
            new[u] = UOp(u.op, u.dtype, (src[0], val, *src[2:]), u.arg)
        elif u.op in (Op.STORE, Op.END, Op.SINK):
            new[u] = UOp(u.op, u.dtype, src, u.arg)
        elif u.op is Op.INDEX:
            new[u] = UOp(Op.INDEX, u.dtype, src, "gather")
        else:
            new[u] = UOp(u.op, u.dtype.vec(width), src, u.arg)
    return new[ast]

