import pytest

from tolk_core import config
from tolk_core.errors import TolkError
from tolk_core.ir import GroupOp, Op, PatternMatcher, UOp, UPat, Variable, dtypes, graph_rewrite, rewrite_stats


def test_upat_basic_matching():
    i, j = Variable("i", 0, 9), Variable("j", 0, 3)
    e = i + j
    assert UPat(Op.ADD).match(e, {}) == [{}]
    assert UPat(Op.MUL).match(e, {}) == []
    assert UPat(Op.ADD, src=(UPat.var("a"), UPat.var("b"))).match(e, {}) == [{"a": i, "b": j}]
    # permuted sources give both bindings
    assert len(UPat(Op.ADD, src=[UPat.var("a"), UPat.var("b")]).match(e, {})) == 2
    # a repeated name must bind the same node
    assert UPat(Op.ADD, src=(UPat.var("a"), UPat.var("a"))).match(e, {}) == []
    assert UPat(Op.ADD, src=(UPat.var("a"), UPat.var("a"))).match(i + i, {}) == [{"a": i}]
    # single UPat: every source
    assert UPat(Op.ADD, src=UPat(Op.DEFINE_VAR)).match(e, {}) == [{}]
    assert UPat(Op.ADD, src=UPat(Op.CONST)).match(e, {}) == []
    # any-length prefix
    w = UOp(Op.WHERE, dtypes.index, (i < 3, i, j))
    assert UPat(Op.WHERE, src=(UPat.var("c"),), allow_any_len=True).match(w, {})[0]["c"] is w.src[0]
    assert UPat(Op.WHERE, src=(UPat.var("c"),)).match(w, {}) == []
    # dtype and arg
    c = UOp.const(dtypes.int32, 5)
    assert UPat.cvar("c", dtypes.int32).match(c, {}) == [{"c": c}]
    assert UPat.cvar("c", dtypes.float32).match(c, {}) == []
    assert UPat.const(None, 5).match(c, {}) and not UPat.const(None, 6).match(c, {})
    assert UPat.any(UPat(Op.MUL), UPat(Op.ADD, name="x")).match(e, {}) == [{"x": e}]
    assert UPat(GroupOp.Binary, name="x").match(e, {}) == [{"x": e}]


def test_upat_operators():
    i = Variable("i", 0, 9)
    pat = UPat.var("x") + UPat.cvar("c")
    assert pat.match(i + 3, {})[0]["x"] is i
    assert pat.match(3 + i, {})[0]["x"] is i  # commutative: either order


def test_pattern_matcher_ctx_names_and_compose():
    i = Variable("i", 0, 9)
    seen = []

    def add_zero(x):
        return x

    def count(ctx, x):
        ctx.append(x)
        return None

    pm1 = PatternMatcher([(UPat.var("x") + 0, add_zero)])
    pm2 = PatternMatcher([(UPat(Op.DEFINE_VAR, name="x"), count)])
    pm = pm1 + pm2
    assert [r.name for r in pm.rules] == ["add_zero", "count"]
    e = UOp(Op.ADD, dtypes.index, (i, UOp.const(dtypes.index, 0)))
    assert graph_rewrite(e, pm, ctx=seen) is i
    assert seen == [i]



def test_matcher_counts_the_rules_that_fire_by_name():
    """`fires` counts a rule each time its replacement wins: not when it declines (None) or returns its input;
    matchers given one Counter share it, and `+` keeps a shared one."""
    from collections import Counter
    i = Variable("i", 0, 9)
    zero, two = UOp.const(dtypes.index, 0), UOp.const(dtypes.index, 2)

    def drop_add_zero(x):
        return x

    def note_mul_by_two(ctx, x):  # gets the matcher's ctx, notes that it ran, declines
        ctx.append(x)
        return None

    own = PatternMatcher([(UPat.var("x") + 0, drop_add_zero), (UPat.var("x") * 2, note_mul_by_two),
                          (UPat(Op.NEG, name="x"), lambda x: x, "keep_neg")])
    e = UOp(Op.ADD, dtypes.index, (UOp(Op.MUL, dtypes.index, (UOp(Op.ADD, dtypes.index, (i, zero)), two)), zero))
    e = UOp(Op.NEG, dtypes.index, (e,))
    seen: list = []
    out = graph_rewrite(e, own, ctx=seen)
    assert out.op is Op.NEG and out.src[0].op is Op.MUL and out.src[0].src[0] is i
    assert own.fires == Counter({"drop_add_zero": 2}) and len(seen) == 1  # keep_neg returned its input
    shared: Counter[str] = Counter()
    a = PatternMatcher([(UPat.var("x") + 0, drop_add_zero)], shared)
    b = PatternMatcher([(UPat(Op.NEG, src=(UPat(Op.NEG, src=(UPat.var("x"),)),)), lambda x: x, "neg_neg")], shared)
    both = a + b
    assert both.fires is shared and (a + own).fires is not shared
    graph_rewrite(UOp(Op.NEG, dtypes.index, (UOp(Op.NEG, dtypes.index, (e.src[0],)),)), both)
    graph_rewrite(e.src[0], a)
    assert shared == Counter({"drop_add_zero": 4, "neg_neg": 1})

def test_graph_rewrite_fixed_point_and_modes():
    i = Variable("i", 0, 9)
    zero = UOp.const(dtypes.index, 0)
    e = UOp(Op.ADD, dtypes.index, (UOp(Op.ADD, dtypes.index, (i, zero)), zero))
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])
    assert graph_rewrite(e, pm) is i
    assert graph_rewrite(e, pm, bottom_up=True) is i
    # a rule whose output is rewritten again (fixed point): x*2 -> x+x, x+x -> x*... terminates
    pm2 = PatternMatcher([(UPat(Op.NEG, src=(UPat(Op.NEG, src=(UPat.var("x"),)),)), lambda x: x)])
    n = i
    for _ in range(6):
        n = UOp(Op.NEG, dtypes.index, (n,))
    assert graph_rewrite(n, pm2) is i
    assert graph_rewrite(n, pm2, bottom_up=True) is i


def test_graph_rewrite_shared_dag_visits_each_node_once():
    # a ladder DAG: every node used twice; naive tree walk would be exponential
    x = Variable("x", 0, 9)
    nodes = [x]
    for _ in range(5000):
        a = UOp(Op.ADD, dtypes.index, (nodes[-1], nodes[-1]))
        nodes.append(UOp(Op.MUL, dtypes.index, (a, nodes[-1])))
    root = nodes[-1]
    total = len(root.toposort())
    assert total == 10001
    rewrite_stats.reset()
    assert graph_rewrite(root, PatternMatcher([])) is root
    assert rewrite_stats.visited == total
    rewrite_stats.reset()
    graph_rewrite(root, PatternMatcher([]), bottom_up=True)
    assert rewrite_stats.visited == total


def test_graph_rewrite_deep_chain():
    i = Variable("i", 0, 9)
    x = i
    for _ in range(100_000):
        x = UOp(Op.ADD, dtypes.index, (x, UOp.const(dtypes.index, 0)))
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])
    assert graph_rewrite(x, pm) is i
    x2 = i
    for _ in range(100_000):
        x2 = UOp(Op.NEG, dtypes.index, (x2,))
    neg = PatternMatcher([(UPat(Op.NEG, src=(UPat(Op.DEFINE_VAR, name="v"),)), lambda v: v.replace(arg=("k", 0, 9)))])
    out = graph_rewrite(x2, neg)
    assert out.toposort()[0].arg == ("k", 0, 9)


def test_rewrite_cycle_detected():
    i = Variable("i", 0, 9)
    pm = PatternMatcher([(UPat(Op.DEFINE_VAR, name="x"), lambda x: UOp(Op.NEG, x.dtype, (x,))),
                         (UPat(Op.NEG, src=(UPat.var("x"),)), lambda x: x)])
    with pytest.raises(TolkError, match="cycle"):
        graph_rewrite(i, pm, bottom_up=True)


def test_debug_reports_rules(capsys):
    i = Variable("i", 0, 9)
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x, "drop_add_zero")])
    with config.override(DEBUG=5):
        graph_rewrite(UOp(Op.ADD, dtypes.index, (i, UOp.const(dtypes.index, 0))), pm, name="t")
    assert "drop_add_zero" in capsys.readouterr().out


def test_rewrite_into_itself_detected():
    i = Variable("i", 0, 9)
    pm = PatternMatcher([(UPat(Op.DEFINE_VAR, name="x"), lambda x: UOp(Op.NEG, x.dtype, (x,)))])
    with pytest.raises(TolkError, match="cycle"):
        graph_rewrite(i, pm)
