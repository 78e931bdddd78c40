"""gather: a sum that selects one term by an index comparison becomes a load at that index.

A one-hot gather (frontend/indexing.py `pick`, `Tensor.gather`, `one_hot(idx) @ W`) lowers to a reduction over a
range r of the table's rows of a term selected by `x == r` (`x` an index value the kernel loads, r reached
through an IOTA: the arange compared against):

    REDUCE(ADD, WHERE(x == r, v(r), 0), r)        or        REDUCE(ADD, CAST(x == r) * v(r), r)

which costs rows x table-size work for rows x 1 useful terms. `collapse_one_hot` rewrites it to

    WHERE(0 <= x < n, v(min(max(x, 0), n - 1)), 0)

(`v` is read at the index clamped into the range, an address the sum read too: nothing is read out of bounds
and addresses keep the range's width; an index out of range gives 0, as the one-hot sum does). Several
equalities over several ranges (a gather by several index tensors) are solved together; conditions that solve
no range stay in the selection, and ranges left unsolved stay reduced. The loaded index becomes part of an
address: renderers and the kernel spec take any integer expression there.

What the rewrite assumes and does not preserve: a selected float is returned as it is, where the sum gave
0.0 + v (so a -0.0 stays -0.0), and in the product form the other rows' terms are not evaluated (a product
0 * inf in a row not selected made the sum NaN): the result is the gather's, as numpy's `take` gives it.
Only sums (Op.ADD) are rewritten; the comparison must be with the range itself or a cast of it to an integer
type that holds every value of the range.
"""
from __future__ import annotations

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from tolk_core.ir.uop import UOp, resolve

# elementwise wrappers of a selected term that map 0 to 0 (a cast or reinterpretation of the selected value)
_WRAPPERS = (Op.CAST, Op.BITCAST)


def _zero(dt: DType) -> UOp:
    return UOp.const(dt, False if dtypes.is_bool(dt) else (0.0 if dtypes.is_float(dt) else 0))


def _is_zero(u: UOp) -> bool:
    return u.op is Op.CONST and u.arg == 0


def _indicator(u: UOp) -> UOp | None:
    """The condition c of a 0/1 value made from it (casts of c, `WHERE(c, 1, 0)`), else None."""
    if u.op is Op.CAST:
        while u.op is Op.CAST and u.src[0].dtype.count == 1:
            u = u.src[0]
        return u if u.dtype == dtypes.bool else None
    if u.op is Op.WHERE and u.src[1].op is Op.CONST and u.src[1].arg == 1 and _is_zero(u.src[2]):
        return u.src[0]
    return None


def _selection(body: UOp) -> tuple[list[UOp], list[UOp], UOp] | None:
    """(the conditions selecting the term, the wrappers around it outermost first, the term) when `body` is 0
    unless every condition holds: nested `WHERE(c, x, 0)` and `x * indicator(c)`, through casts."""
    conds: list[UOp] = []
    wrappers: list[UOp] = []
    u = body
    while True:
        if u.op in _WRAPPERS and len(u.src) == 1:
            wrappers.append(u)
            u = u.src[0]
        elif u.op is Op.WHERE and _is_zero(u.src[2]):
            conds.append(u.src[0])
            u = u.src[1]
        elif u.op is Op.MUL and (c := _indicator(u.src[0])) is not None:
            conds.append(c)
            u = u.src[1]
        elif u.op is Op.MUL and (c := _indicator(u.src[1])) is not None:
            conds.append(c)
            u = u.src[0]
        else:
            break
    return (conds, wrappers, u) if conds else None


def _conjuncts(c: UOp) -> list[UOp]:
    return _conjuncts(c.src[0]) + _conjuncts(c.src[1]) if c.op is Op.AND and c.dtype == dtypes.bool else [c]


def _as_range(u: UOp, ranges: tuple[UOp, ...]) -> UOp | None:
    """The range of `ranges` that `u` is, directly or through casts to integer types that hold all of its
    values (an int64 arange is an int32 IOTA cast)."""
    casts = []
    while u.op is Op.CAST and dtypes.is_int(u.dtype) and u.dtype.count == 1:
        casts.append(u)
        u = u.src[0]
    if u not in ranges or not all(resolve(u.src[0] - 1 <= dtypes.max(c.dtype), False) for c in casts):
        return None
    return u


def _solve(term: UOp, ranges: tuple[UOp, ...], solved: dict[UOp, UOp]) -> tuple[UOp, UOp] | None:
    """(range r, the index expression it equals) when `term` is `x == r` (either order) with x an integer
    independent of every range in `ranges` and r not solved yet."""
    if term.op is not Op.CMPEQ:
        return None
    for a, b in ((term.src[0], term.src[1]), (term.src[1], term.src[0])):
        r = _as_range(b, ranges)
        if r is None or r in solved or not dtypes.is_int(a.dtype) or a.dtype.count != 1:
            continue
        if any(n in ranges for n in a.toposort()):
            continue
        return r, (a if a.dtype == dtypes.index else a.cast(dtypes.index))
    return None


def one_hot_load(red: UOp) -> UOp | None:
    """The rewrite of the module docstring for one REDUCE, or None when it is not a selecting sum."""
    if red.arg is not Op.ADD:
        return None
    ranges = red.src[1:]
    sel = _selection(red.src[0])
    if sel is None:
        return None
    conds, wrappers, term = sel
    solved: dict[UOp, UOp] = {}
    rest: list[UOp] = []
    for t in (t for c in conds for t in _conjuncts(c)):
        if (hit := _solve(t, ranges, solved)) is not None:
            solved[hit[0]] = hit[1]
        else:
            rest.append(t)
    if not solved:
        return None
    keep: UOp | None = None
    for c in [(x >= 0) & (x < r.src[0]) for r, x in solved.items()] + rest:
        keep = c if keep is None else keep & c
    assert keep is not None
    value = term
    for w in reversed(wrappers):
        value = UOp(w.op, w.dtype, (value,), w.arg)
    # the term is read at the index clamped into the range, an address it read before: no load leaves the
    # table and indices keep the range's width; the selection gives 0 where the index is outside
    at = {r: x.maximum(0).minimum(r.src[0] - 1) for r, x in solved.items()}
    body = UOp(Op.WHERE, red.dtype, (keep.substitute(solved), value.substitute(at), _zero(red.dtype)))
    left = tuple(r for r in ranges if r not in solved)
    return UOp(Op.REDUCE, red.dtype, (body, *left), red.arg) if left else body


_pm = PatternMatcher([(UPat(Op.REDUCE, name="red"), one_hot_load, "one_hot_load")])


def collapse_one_hot(ast: UOp) -> UOp:
    """Kernel AST `ast` with every selecting sum over an index comparison turned into a gated load (module
    docstring); unchanged when it has none."""
    if not any(u.op is Op.REDUCE and u.arg is Op.ADD for u in ast.toposort()):
        return ast
    return graph_rewrite(ast, _pm, name="collapse one-hot")
