"""Throughput of the IR hot paths: node construction, toposort, graph_rewrite (no-op and symbolic).

Run: python bench/ir_rewrite.py [scale]   (scale multiplies the graph sizes; default 1)
Prints one line per measurement with nodes per second.
"""
from __future__ import annotations

import random
import sys
import time

from tolk_core.ir import Op, PatternMatcher, UOp, Variable, dtypes, graph_rewrite, rewrite_stats
from tolk_core.ir.symbolic import symbolic


def _report(what: str, nodes: int, seconds: float) -> None:
    print(f"{what:<38} {nodes:>9} nodes {seconds * 1e3:>9.1f} ms {nodes / seconds / 1e3:>9.1f} k nodes/s")


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _ladder(n: int) -> UOp:
    """A DAG where each node is used twice (a tree walk would be exponential)."""
    x = Variable("x", 0, 9)
    for _ in range(n):
        x = UOp(Op.MUL, dtypes.index, (UOp(Op.ADD, dtypes.index, (x, x)), x))
    return x


def _index_exprs(count: int, rng: random.Random) -> UOp:
    """Index maths as the scheduler produces it: reshapes split/merged, padded and flipped."""
    outs = []
    for k in range(count):
        i, j, m = Variable(f"i{k % 7}", 0, 15), Variable(f"j{k % 5}", 0, 3), Variable(f"k{k % 3}", 0, 7)
        s = rng.choice([4, 8, 16])
        flat = (i * 4 + j) * s + m * (s // 8 or 1)
        e = ((flat // s) % 16) * 4 + (flat % s) // 2 + ((15 - i) * 4 + j) // 4 + (i * 4 + j < 64).where(j, i)
        outs.append(e)
    return UOp(Op.SINK, dtypes.void, tuple(outs))


def main(scale: int = 1) -> None:
    rng = random.Random(0)
    noop = PatternMatcher([])
    n = 50_000 * scale
    root, dt = _timed(lambda: _ladder(n))
    nodes = len(root.toposort())
    _report("construct ladder DAG", nodes, dt)
    root2 = _ladder(n // 2)
    _, dt = _timed(root2.toposort)
    _report("toposort (uncached)", len(root2.toposort()), dt)
    rewrite_stats.reset()
    _, dt = _timed(lambda: graph_rewrite(root, noop))
    _report("graph_rewrite no-op", rewrite_stats.visited, dt)
    rewrite_stats.reset()
    _, dt = _timed(lambda: graph_rewrite(root, noop, bottom_up=True))
    _report("graph_rewrite no-op bottom_up", rewrite_stats.visited, dt)
    sink = _index_exprs(2000 * scale, rng)
    rewrite_stats.reset()
    out, dt = _timed(lambda: graph_rewrite(sink, symbolic))
    _report("symbolic simplify of index exprs", rewrite_stats.visited, dt)
    print(f"  ({len(sink.toposort())} nodes in, {len(out.toposort())} out, {rewrite_stats.rewrites} rule firings)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
