"""Scale: interning is leak-free, derived facts and rewrites work on 100k-node graphs."""
import gc

from tolk_core.ir import Op, PatternMatcher, UOp, UPat, Variable, dtypes, graph_rewrite
from tolk_core.ir.uop import live_uops


def _chain(n: int) -> UOp:
    x = Variable("scale_x", 0, 10)
    for k in range(n):
        x = UOp(Op.ADD, dtypes.index, (x, UOp.const(dtypes.index, k)))
    return x


def _check_chain_and_rewrite(before: int) -> None:
    root = _chain(50_000)  # 100k nodes: 50k ADDs and 50k CONSTs
    assert live_uops() - before >= 99_000  # a few small CONSTs may already be interned
    assert _chain(50_000) is root  # rebuilt structure: the very same object
    bump = PatternMatcher([(UPat(Op.ADD, src=(UPat.var("x"), UPat.cvar("c"))),
                            lambda x, c: UOp(Op.ADD, x.dtype, (x, UOp.const(c.dtype, -c.arg))) if c.arg > 0 else None)])
    out = graph_rewrite(root, bump)
    assert out is not root and out.src[1].arg == -49_999
    assert out.vmin == 0 - sum(range(50_000)) and len(out.toposort()) == 100_001
    assert root.shape == () and out.device is None


def test_hash_consing_identity_preserving_and_leak_free():
    # the graphs live in a helper's frame: the locals() snapshot pytest's assertion-pass hook takes of the
    # asserting frame would keep them alive after a `del`
    gc.collect()
    before = live_uops()
    _check_chain_and_rewrite(before)
    gc.collect()
    assert live_uops() == before


def test_deep_chain_simplify():
    i = Variable("i", 0, 9)
    x = i
    for _ in range(20_000):
        x = UOp(Op.ADD, dtypes.index, (UOp(Op.ADD, dtypes.index, (x, UOp.const(dtypes.index, 1))),
                                        UOp.const(dtypes.index, -1)))
    assert x.simplify() is i
