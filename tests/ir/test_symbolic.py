"""The symbolic simplifier: identities that must fold, and value preservation under truncating semantics."""
import random
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tolk_core.ir import Op, UOp, Variable, dtypes

i, j, k = Variable("i", 0, 9), Variable("j", 0, 3), Variable("k", 0, 7)
a, b = Variable("a", 0, 4), Variable("b", 0, 7)
n, m = Variable("n", 1, 16), Variable("m", 1, 8)
x, y = Variable("x", 0, 100), Variable("y", -10, 10)
r = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, 16),), 0)
rn = UOp(Op.RANGE, dtypes.index, (n,), 1)

# (expression, rendered simplified form)
IDENTITIES = [
    # reshape split / merge
    ((i * 4 + j) // 4, "i"),
    ((i * 4 + j) % 4, "j"),
    (((a * 8 + b) // 8) % 5, "a"),
    (((a * 8 + b) % 8), "b"),
    (((i * 32 + k * 4 + j) // 4) % 8, "k"),
    (((i * 32 + k * 4 + j) // 32), "i"),
    ((i * 4 + j) // 4 * 4 + (i * 4 + j) % 4, "((i*4)+j)"),
    ((x // 4) * 4 + x % 4, "x"),
    ((r // 4) * 4 + r % 4, "ridx0"),
    # nested
    (((i * 4 + j) // 2) % 2, "(j//2)"),
    (((i * 4 + j) // 2) // 2, "i"),
    ((x // 4) // 5, "(x//20)"),
    ((x % 12) % 4, "(x%4)"),
    ((x % 12) % 5, "((x%12)%5)"),
    # gcd folding
    ((x * 6) // 4, "((x*3)//2)"),
    ((x * 6) % 4, "((x%2)*2)"),
    ((x * 4 + 2) // 4, "x"),
    ((x * 4 + 8) // 4, "(x+2)"),
    ((x * 8 + k * 4) // 4, "((x*2)+k)"),
    # (x + c) % m under range
    ((j + 2) % 8, "(j+2)"),
    ((j + 4) % 4, "j"),
    ((i + 8) // 4, "((i//4)+2)"),
    ((j + 12) % 4, "j"),
    ((j - 4) % 4, "((j-4)%4)"),
    # min / max clamps
    (i.minimum(20), "i"),
    (i.maximum(0), "i"),
    (i.maximum(-5).minimum(9), "i"),
    (j.maximum(i + 10), "(i+10)"),
    (y.maximum(-20), "y"),
    ((i + 1).minimum(0), "0"),
    (x.maximum(x), "x"),
    # symbolic strides (a reshape over a variable size n)
    ((r * n + rn) // n, "ridx0"),
    ((r * n + rn) % n, "ridx1"),
    ((r * (n * 2) + j) // 2, "((ridx0*n)+(j//2))"),
    (i * (n * 4), "((i*n)*4)"),
    ((i * n * 4 + rn) % n, "ridx1"),
    # comparisons decided by range / reduced
    (i * 4 + j < n * 4, "(i<n)"),
    (i * 4 + j < 40, "true"),
    (j < 0, "false"),
    (i * 4 + j < 8, "(i<2)"),
    (x // 4 < 3, "(x<12)"),
    (i * 3 < 7, "(i<3)"),
    (i < i, "false"),
    ((i + 3) < 5, "(i<2)"),
    (i.ne(i), "false"),
    # PAD and FLIP: sums of mixed-stride terms
    ((((i * -1) + 9) * 4 + j) // 4, "((i*-1)+9)"),
    ((((i * -1) + 9) * 4 + j) % 4, "j"),
    (((i - 2) * 4 + j + 8) // 4, "i"),
    (((7 - k) * 4 + (3 - j)) % 4, "((j*-1)+3)"),
    ((((7 - k) * 4 + (3 - j)) // 4), "((k*-1)+7)"),
    ((i + 1) * 4 - 4 + j, "((i*4)+j)"),
    # like terms and constants
    ((i + j) - i, "j"),
    (i * 2 + i, "(i*3)"),
    ((i + 1) * 3 - 3, "(i*3)"),
    (i - i, "0"),
    (i * 0 + j, "j"),
    (UOp(Op.NEG, dtypes.index, (UOp(Op.NEG, dtypes.index, (i,)),)), "i"),
    ((i + j) * 2 - j * 2, "(i*2)"),
    (x // -4, "((x//4)*-1)"),
    (x % -4, "(x%4)"),
    ((i < 5).where(j, j), "j"),
    ((i < 20).where(i, j), "i"),
    ((i < 3) & (j < 10), "(i<3)"),
]


def test_identity_table_size():
    assert len(IDENTITIES) >= 30


@pytest.mark.parametrize("expr,want", IDENTITIES, ids=[w for _, w in IDENTITIES])
def test_identity_folds(expr, want):
    got = expr.simplify()
    assert got.render() == want, f"{expr.render()} simplified to {got.render()}, expected {want}"
    for p in _points(expr, 20, random.Random(0)):  # and the identity is right
        assert expr.eval(p) == got.eval(p)


# ------------------------------------------------------------------ property tests
VARS = [Variable("v0", 0, 15), Variable("v1", -8, 7), Variable("v2", 1, 40), Variable("v3", -30, -1),
        Variable("v4", 0, 3)]


def _points(e: UOp, count: int, rng: random.Random):
    topo = e.toposort()
    vs = [u for u in topo if u.op is Op.DEFINE_VAR]
    loops = [u for u in topo if u.op is Op.RANGE]
    pts = [{v.render(): v.vmin for v in vs}, {v.render(): v.vmax for v in vs}]
    pts += [{v.render(): rng.randint(v.vmin, v.vmax) for v in vs} for _ in range(count)]
    for p in pts:  # a loop index lies below its (possibly symbolic) end
        for lp in loops:
            p[lp.render()] = rng.randint(0, lp.src[0].eval(p) - 1)
    return pts


def _gen(rng: random.Random, depth: int) -> UOp:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(VARS) if rng.random() < 0.75 else UOp.const(dtypes.index, rng.randint(-12, 12))
    kind = rng.choice(["+", "-", "*", "//", "%", "min", "max", "where", "+", "*", "//", "%"])
    lhs = _gen(rng, depth - 1)
    if kind in ("//", "%"):
        d = rng.choice([c for c in range(-9, 10) if c != 0] + [VARS[2], VARS[3]])
        return UOp(Op.IDIV if kind == "//" else Op.MOD, dtypes.index, (lhs, UOp.const(dtypes.index, d)
                                                                        if isinstance(d, int) else d))
    if kind == "*":
        return UOp(Op.MUL, dtypes.index, (lhs, UOp.const(dtypes.index, rng.randint(-6, 6)) if rng.random() < 0.7
                                           else _gen(rng, depth - 1)))
    rhs = _gen(rng, depth - 1)
    if kind == "where":
        return UOp(Op.WHERE, dtypes.index, (UOp(Op.CMPLT, dtypes.bool, (lhs, rhs)), rhs, _gen(rng, depth - 1)))
    op = {"+": Op.ADD, "-": Op.SUB, "max": Op.MAX}.get(kind)
    if op is not None:
        return UOp(op, dtypes.index, (lhs, rhs))
    return lhs.minimum(rhs)


def _check(e: UOp, rng: random.Random) -> UOp:
    s = e.simplify()
    for p in _points(e, 25, rng):
        want = e.eval(p)
        assert s.eval(p) == want, f"{e.render()}  ->  {s.render()}  at {p}"
        assert e.vmin <= want <= e.vmax, f"range of {e.render()} is [{e.vmin}, {e.vmax}] but value {want} at {p}"
    return s


def _leaf() -> st.SearchStrategy[UOp]:
    return st.one_of(st.sampled_from(VARS), st.integers(-12, 12).map(lambda v: UOp.const(dtypes.index, v)))


def _extend(ch: st.SearchStrategy[UOp]) -> st.SearchStrategy[UOp]:
    def binop(t):
        op, a, b = t
        return a.minimum(b) if op == "min" else UOp(op, dtypes.index, (a, b))

    def divmod_(t):
        op, a, d = t
        return UOp(op, dtypes.index, (a, UOp.const(dtypes.index, d) if isinstance(d, int) else d))

    divisors = st.one_of(st.integers(-9, 9).filter(bool), st.sampled_from([VARS[2], VARS[3]]))
    return st.one_of(
        st.tuples(st.sampled_from([Op.ADD, Op.SUB, Op.MAX, "min"]), ch, ch).map(binop),
        st.tuples(st.just(Op.MUL), ch, st.one_of(st.integers(-6, 6).map(lambda v: UOp.const(dtypes.index, v)), ch))
        .map(binop),
        st.tuples(st.sampled_from([Op.IDIV, Op.MOD]), ch, divisors).map(divmod_),
        st.tuples(ch, ch, ch, ch).map(lambda t: UOp(Op.WHERE, dtypes.index, (UOp(Op.CMPLT, dtypes.bool, t[:2]),
                                                                             t[2], t[3]))),
    )


EXPRS = st.recursive(_leaf(), _extend, max_leaves=14)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRS, st.one_of(st.none(), EXPRS), st.randoms(use_true_random=False))
def test_simplifier_preserves_value(e, rhs, rng):
    """Random expressions over + - * // % < min max (and where) with bounded variables, some negative:
    the simplified expression has the same value at the bounds and at random points."""
    if rhs is not None:
        e = UOp(Op.CMPLT, dtypes.bool, (e, rhs))
    _check(e, rng)


def _c_render(root: UOp) -> str:
    out: dict[UOp, str] = {}
    infix = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.IDIV: "/", Op.MOD: "%", Op.CMPLT: "<", Op.CMPNE: "!=",
             Op.CMPEQ: "==", Op.AND: "&", Op.OR: "|"}
    for u in root.toposort():
        s = [out.get(x) for x in u.src]
        if u.op is Op.CONST:
            out[u] = f"({int(u.arg)}LL)"
        elif u.op is Op.DEFINE_VAR:
            out[u] = u.arg[0]
        elif u.op in infix:
            out[u] = f"((long long)({s[0]}{infix[u.op]}{s[1]}))"
        elif u.op is Op.MAX:
            out[u] = f"MAX({s[0]},{s[1]})"
        elif u.op is Op.NEG:
            out[u] = f"(-{s[0]})"
        elif u.op is Op.WHERE:
            out[u] = f"({s[0]}?{s[1]}:{s[2]})"
        else:
            raise AssertionError(u.op)
    return out[root]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_simplifier_agrees_with_c(tmp_path):
    """A sample of random expressions, original and simplified, compiled with gcc and run at random points:
    C's truncating / and % agree with the IR's evaluation of both."""
    rng = random.Random(1234)
    names = [v.arg[0] for v in VARS]
    lines = ["#include <stdio.h>", "#define MAX(a,b) ((a)>(b)?(a):(b))", "int main(void){"]
    expected = []
    for t in range(150):
        e = _gen(rng, rng.randint(1, 5))
        if t % 3 == 0:
            e = UOp(Op.CMPLT, dtypes.bool, (e, _gen(rng, 2)))
        s = _check(e, rng)
        for p in _points(e, 3, rng)[2:]:
            full = {nm: p.get(nm, 0) for nm in names}
            decl = " ".join(f"long long {nm}={full[nm]};" for nm in names)
            lines.append(f"{{ {decl} (void)v0;(void)v1;(void)v2;(void)v3;(void)v4; "
                         f"printf(\"%lld %lld\\n\", (long long)({_c_render(e)}), (long long)({_c_render(s)})); }}")
            expected.append(int(e.eval(p)))
    lines.append("return 0;}")
    src = tmp_path / "exprs.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "exprs"
    subprocess.run(["gcc", "-O0", "-w", "-o", str(exe), str(src)], check=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    for want, line in zip(expected, got, strict=False):
        c_orig, c_simp = map(int, line.split())
        assert c_orig == want and c_simp == want
    assert len([g for g in got if g]) == len(expected)
