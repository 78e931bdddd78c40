"""The symbolic simplifier for index maths (`symbolic`, used by `UOp.simplify`).

Semantics are the IR's: integer division and remainder truncate toward zero (C). Rules that move terms
across a division check the signs that truncation needs, using the range analysis of `UOp.vmin/vmax`.
Integer rules assume index maths does not overflow (as C compilers and tinygrad do).

Canonical integer form the rules keep: a sum is a left-leaning chain of terms `base*coeff` (coeff omitted
when 1) in order of first appearance, with the constant last; constants sit on the right of MUL/ADD/MAX.
SUB and NEG of signed ints become `a + b*-1` and `a*-1`.
"""
from __future__ import annotations

import math

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import GroupOp, Op, exec_alu, truncate
from tolk_core.ir.pattern import PatternMatcher, UPat
from tolk_core.ir.uop import UOp

SIGNED = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.index)
INTS = SIGNED + (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.bool)


def _c(dt: DType, v: int) -> UOp:
    return UOp.const(dt, v)


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _terms(x: UOp) -> tuple[dict[UOp, int], int]:
    """x as {base: coefficient} (first-appearance order) plus a constant, flattening an ADD chain."""
    terms: dict[UOp, int] = {}
    k = 0
    stack = [x]
    while stack:
        u = stack.pop()
        if u.op is Op.ADD:
            stack.append(u.src[1])
            stack.append(u.src[0])
        elif u.op is Op.CONST:
            k += u.arg
        elif u.op is Op.MUL and u.src[1].op is Op.CONST:
            terms[u.src[0]] = terms.get(u.src[0], 0) + u.src[1].arg
        elif u.op is Op.MUL and u.src[0].op is Op.CONST:
            terms[u.src[1]] = terms.get(u.src[1], 0) + u.src[0].arg
        else:
            terms[u] = terms.get(u, 0) + 1
    return terms, k


def _build(terms: dict[UOp, int], k: int, dt: DType) -> UOp:
    """The canonical sum of `terms` and constant `k`."""
    out: UOp | None = None
    for b, v in terms.items():
        if v == 0:
            continue
        t = b if v == 1 else UOp(Op.MUL, dt, (b, _c(dt, v)))
        out = t if out is None else UOp(Op.ADD, dt, (out, t))
    if out is None:
        return _c(dt, k)
    return out if k == 0 else UOp(Op.ADD, dt, (out, _c(dt, k)))


def _terms_range(terms: dict[UOp, int], k: int) -> tuple[int, int]:
    """Bounds of sum(b * v) + k from each term's range. The terms are those of an integer division or
    remainder (IDIV and MOD take integers), so each range is a pair of ints; int() says so to the checker."""
    lo = hi = k
    for b, v in terms.items():
        a, z = int(b.vmin) * v, int(b.vmax) * v
        lo, hi = lo + min(a, z), hi + max(a, z)
    return lo, hi


# ---------------------------------------------------------------- generic folds
def fold_alu(x: UOp) -> UOp | None:
    """All-constant ALU ops compute; integer/bool ops whose range is a single value become that value."""
    if x.dtype.count != 1:
        return None
    if all(s.op is Op.CONST for s in x.src):
        try:
            return UOp.const(x.dtype, exec_alu(x.op, x.dtype, tuple(s.arg for s in x.src)))
        except (ZeroDivisionError, ValueError, OverflowError):
            return None
    if x.dtype.kind in ("i", "u", "b") and x.vmin == x.vmax:
        return UOp.const(x.dtype, x.vmin)
    return None


def fold_cast(x: UOp) -> UOp | None:
    s = x.src[0]
    if s.dtype == x.dtype:
        return s
    if s.op is Op.CONST and x.dtype.count == 1:
        return UOp.const(x.dtype, truncate(x.dtype, s.arg))
    return None


# ---------------------------------------------------------------- sums and products
def fold_add(x: UOp) -> UOp | None:
    """Combine like terms, fold constants, merge (a//c)*c + a%c into a, and canonicalise the chain."""
    if x.dtype.count != 1:
        return None
    terms, k = _terms(x)
    for b in list(terms):
        # (a//c)*(c*m) + (a%c)*m -> a*m : C division identity, valid for every sign
        if b.op is Op.MOD and b.src[1].op is Op.CONST and (m := terms.get(b)):
            a, c = b.src
            q = UOp(Op.IDIV, x.dtype, (a, c))
            if terms.get(q) == m * c.arg:
                del terms[b], terms[q]
                terms[a] = terms.get(a, 0) + m
    out = _build(terms, k, x.dtype)
    return None if out is x else out


def fold_mul(x: UOp) -> UOp | None:
    """Constant to the right; x*0, x*1; scale sums and scaled terms by a constant."""
    a, b = x.src
    if x.dtype.count != 1:
        return None
    if a.op is Op.CONST and b.op is not Op.CONST:
        return UOp(Op.MUL, x.dtype, (b, a))
    if b.op is not Op.CONST:
        # float constant factors outward so sums see coefficients: a*(z*c) -> (a*z)*c, (z*c)*b -> (z*b)*c
        if b.op is Op.MUL and b.src[1].op is Op.CONST:
            return UOp(Op.MUL, x.dtype, (UOp(Op.MUL, x.dtype, (a, b.src[0])), b.src[1]))
        if a.op is Op.MUL and a.src[1].op is Op.CONST:
            return UOp(Op.MUL, x.dtype, (UOp(Op.MUL, x.dtype, (a.src[0], b)), a.src[1]))
        return None
    c = b.arg
    if c == 0:
        return _c(x.dtype, 0)
    if c == 1:
        return a
    if a.op is Op.ADD or (a.op is Op.MUL and a.src[1].op is Op.CONST):
        terms, k = _terms(a)
        out = _build({t: v * c for t, v in terms.items()}, k * c, x.dtype)
        return None if out is x else out
    return None


# ---------------------------------------------------------------- division and remainder
def _divmod_fold(x: UOp, c: int, is_mod: bool) -> UOp | None:
    """x // c or x % c for a constant c > 1, by gcd cancellation or by taking whole multiples of c out
    of the sum when truncation allows (x and the remainder part on the same side of zero)."""
    dt = x.dtype
    terms, k = _terms(x)
    g = math.gcd(c, k, *terms.values())
    if g > 1:
        inner = _build({b: v // g for b, v in terms.items()}, k // g, dt)
        if is_mod:
            return UOp(Op.MUL, dt, (UOp(Op.MOD, dt, (inner, _c(dt, c // g))), _c(dt, g)))
        return UOp(Op.IDIV, dt, (inner, _c(dt, c // g)))
    # whole multiples of c leave each coefficient (its sign kept, so small terms stay as they are); the
    # constant's remainder takes the sign of x so that x and the remainder part can share a side of zero
    if x.vmin >= 0:
        kr = k % c
    elif x.vmax <= 0:
        kr = -((-k) % c)
    else:
        return None
    rterms = {b: v - c * _tdiv(v, c) for b, v in terms.items()}
    qterms = {b: (v - rterms[b]) // c for b, v in terms.items()}
    kq = (k - kr) // c
    if kq == 0 and all(q == 0 for q in qterms.values()):
        return None
    lo, hi = _terms_range(rterms, kr)
    if not ((x.vmin >= 0 and lo >= 0) or (x.vmax <= 0 and hi <= 0)):
        return None
    r = _build(rterms, kr, dt)
    if is_mod:
        return UOp(Op.MOD, dt, (r, _c(dt, c)))
    if _tdiv(lo, c) == _tdiv(hi, c):
        return _build(qterms, kq + _tdiv(lo, c), dt)
    if kq != 0 or any(rterms[b] == 0 and q != 0 for b, q in qterms.items()):
        return UOp(Op.ADD, dt, (_build(qterms, kq, dt), UOp(Op.IDIV, dt, (r, _c(dt, c)))))
    return None


def _below(r: UOp, y: UOp) -> bool:
    """0 <= r < y provably: by range, or r is a loop over exactly y."""
    return r.vmin >= 0 and (r.vmax < y.vmin or (r.op is Op.RANGE and r.src[0] is y))


def _divmod_sym(x: UOp, y: UOp, is_mod: bool) -> UOp | None:
    """x // y or x % y for a positive non-constant y: terms that are multiples of y (y*m, or y itself)
    leave the division when truncation allows (x and the rest on the same side of zero)."""
    if x.dtype.count != 1 or y.vmin <= 0:
        return None
    if _below(x, y):
        return x if is_mod else _c(x.dtype, 0)
    dt = x.dtype
    terms, k = _terms(x)
    qterms: dict[UOp, int] = {}
    qk = 0
    rterms: dict[UOp, int] = {}
    for b, v in terms.items():
        if b is y:
            qk += v
        elif b.op is Op.MUL and (b.src[0] is y or b.src[1] is y):
            other = b.src[1] if b.src[0] is y else b.src[0]
            qterms[other] = qterms.get(other, 0) + v
        else:
            rterms[b] = v
    if not qterms and qk == 0:
        return None
    lo, hi = _terms_range(rterms, k)
    if not ((x.vmin >= 0 and lo >= 0) or (x.vmax <= 0 and hi <= 0)):
        return None
    r = _build(rterms, k, dt)
    if is_mod:
        return UOp(Op.MOD, dt, (r, y))
    return UOp(Op.ADD, dt, (_build(qterms, qk, dt), UOp(Op.IDIV, dt, (r, y))))


def fold_idiv(x: UOp, d: UOp) -> UOp | None:
    if d.op is not Op.CONST:
        return _divmod_sym(x, d, False)
    c, dt = d.arg, x.dtype
    if c == 0 or x.dtype.count != 1:
        return None
    if c == 1:
        return x
    if c < 0:  # truncation is odd-symmetric: x // -c == -(x // c)
        return UOp(Op.MUL, dt, (UOp(Op.IDIV, dt, (x, _c(dt, -c))), _c(dt, -1)))
    if x.op is Op.IDIV and x.src[1].op is Op.CONST and x.src[1].arg > 0:
        return UOp(Op.IDIV, dt, (x.src[0], _c(dt, x.src[1].arg * c)))
    return _divmod_fold(x, c, False)


def fold_mod(x: UOp, d: UOp) -> UOp | None:
    if d.op is not Op.CONST:
        return _divmod_sym(x, d, True)
    c, dt = d.arg, x.dtype
    if c == 0 or x.dtype.count != 1:
        return None
    if c < 0:  # the sign of a truncated remainder follows the dividend only
        return UOp(Op.MOD, dt, (x, _c(dt, -c)))
    if (0 <= x.vmin and x.vmax < c) or (-c < x.vmin and x.vmax <= 0):
        return x
    if x.op is Op.MOD and x.src[1].op is Op.CONST and x.src[1].arg > 0 and x.src[1].arg % c == 0:
        return UOp(Op.MOD, dt, (x.src[0], d))
    return _divmod_fold(x, c, True)


# ---------------------------------------------------------------- comparisons and clamps
def _lt_terms(terms: dict[UOp, int], c: int, dt: DType) -> UOp | None:
    """sum(terms) < c, divided through by the gcd d of the non-unit coefficients and c when the unit
    terms stay in [0, d): then d*A + P < d*C  <=>  A < C."""
    unit = [b for b, v in terms.items() if v == 1]
    big = {b: v for b, v in terms.items() if v not in (0, 1)}
    if not big:
        return None
    d = math.gcd(c, *big.values())
    if d <= 1:
        return None
    plo = sum(b.vmin for b in unit)
    phi = sum(b.vmax for b in unit)
    if not (0 <= plo and phi < d):
        return None
    pos = {b: v // d for b, v in big.items() if v > 0}
    neg = {b: -v // d for b, v in big.items() if v < 0}
    return UOp(Op.CMPLT, dtypes.bool, (_build(pos, 0, dt), _build(neg, c // d, dt)))


def fold_lt(x: UOp, y: UOp) -> UOp | None:
    dt = x.dtype
    if x.dtype.count != 1:
        return None
    if x is y:
        return UOp.const(dtypes.bool, False)
    if y.op is Op.CONST:
        c = y.arg
        if x.op is Op.ADD and x.src[1].op is Op.CONST:
            return UOp(Op.CMPLT, dtypes.bool, (x.src[0], _c(dt, c - x.src[1].arg)))
        if x.op is Op.MUL and x.src[1].op is Op.CONST and x.src[1].arg != 0:
            c0 = x.src[1].arg
            if c0 > 0:  # x*c0 < c  <=>  x < ceil(c/c0)
                return UOp(Op.CMPLT, dtypes.bool, (x.src[0], _c(dt, -((-c) // c0))))
            # x*c0 < c with c0 < 0  <=>  x*|c0| >= 1-c  <=>  ceil((1-c)/|c0|) - 1 < x
            return UOp(Op.CMPLT, dtypes.bool, (_c(dt, -((c - 1) // -c0) - 1), x.src[0]))
        if x.op is Op.IDIV and x.src[1].op is Op.CONST and x.src[1].arg > 0:
            dd = x.src[1].arg  # truncating: x//d < c <=> x < c*d (c > 0), x <= d*(c-1) (c <= 0)
            return UOp(Op.CMPLT, dtypes.bool, (x.src[0], _c(dt, c * dd if c > 0 else dd * (c - 1) + 1)))
        terms, k = _terms(x)
        return _lt_terms(terms, c - k, dt)
    # non-constant right side: compare the difference with zero, keep the result only if it reduced
    tx, kx = _terms(x)
    ty, ky = _terms(y)
    for b, v in ty.items():
        tx[b] = tx.get(b, 0) - v
    return _lt_terms(tx, ky - kx, dt)


def fold_max(x: UOp) -> UOp | None:
    """MAX(a, a) -> a; the operand whose range lies above the other's (integers and bools only: a float's range
    says nothing about NaN, which MAX must return, so MAX(x, inf) stays); constants to the right."""
    a, b = x.src
    if a is b:
        return a
    if dtypes.is_float(x.dtype):
        return None
    if a.vmin >= b.vmax:
        return a
    if b.vmin >= a.vmax:
        return b
    if a.op is Op.CONST and b.op is not Op.CONST:
        return UOp(Op.MAX, x.dtype, (b, a))
    return None


def fold_where(c: UOp, a: UOp, b: UOp) -> UOp | None:
    if a is b:
        return a
    if c.dtype.count == 1 and c.vmin == c.vmax:
        return a if c.vmin else b
    return None


def _neg(a: UOp) -> UOp:
    return UOp(Op.MUL, a.dtype, (a, _c(a.dtype, -1)))


_true, _false = UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False)

symbolic = PatternMatcher([
    (UPat(GroupOp.ALU, name="x"), fold_alu),
    (UPat(Op.CAST, name="x"), fold_cast),
    # signed integer algebra
    (UPat(Op.SUB, SIGNED, src=(UPat.var("a"), UPat.var("b"))),
     lambda a, b: UOp(Op.ADD, a.dtype, (a, _neg(b))) if a.dtype.count == 1 else None, "sub_to_add"),
    (UPat(Op.NEG, SIGNED, src=(UPat.var("a"),)), lambda a: _neg(a) if a.dtype.count == 1 else None, "neg_to_mul"),
    (UPat(Op.ADD, SIGNED, name="x"), fold_add),
    (UPat(Op.MUL, SIGNED, name="x"), fold_mul),
    (UPat(Op.IDIV, SIGNED, src=(UPat.var("x"), UPat.var("d"))), fold_idiv),
    (UPat(Op.MOD, SIGNED, src=(UPat.var("x"), UPat.var("d"))), fold_mod),
    (UPat(Op.CMPLT, src=(UPat.var("x", SIGNED), UPat.var("y", SIGNED))), fold_lt),
    (UPat(Op.MAX, name="x"), fold_max),
    (UPat(Op.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("b"))), fold_where),
    # booleans and self comparisons
    (UPat(Op.AND, dtypes.bool, src=[UPat.var("x"), _true]), lambda x: x, "and_true"),
    (UPat(Op.OR, dtypes.bool, src=[UPat.var("x"), _false]), lambda x: x, "or_false"),
    (UPat((Op.AND, Op.OR), src=(UPat.var("x"), UPat.var("x"))), lambda x: x, "and_or_self"),
    (UPat(Op.CMPNE, src=(UPat(Op.CMPNE, src=(UPat.var("x", dtypes.bool), _true)), _true)), lambda x: x, "not_not"),
    (UPat(Op.CMPNE, src=(UPat.var("x", dtypes.bool), _false)), lambda x: x, "ne_false"),
    (UPat(Op.CMPNE, src=(UPat.var("x", INTS), UPat.var("x"))), lambda x: UOp.const(dtypes.bool, False), "ne_self"),
    (UPat(Op.CMPEQ, src=(UPat.var("x", INTS), UPat.var("x"))), lambda x: UOp.const(dtypes.bool, True), "eq_self"),
])
