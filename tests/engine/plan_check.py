"""An independent checker of a JIT memory plan, written from the contract only (not from the planner's code).

Contract: each planned buffer is a SLICE(arena, (byte offset, numel, id)) of its dtype. A slice is live from the
first to the last call (in replay order, graph batches flattened) that takes it. No two slices live at the same
call may share a byte of one arena, and every slice lies inside its arena.
"""
from __future__ import annotations

from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


def flat_calls(linear: UOp) -> list[UOp]:
    out: list[UOp] = []
    for c in linear.src:
        out.extend(c.src[0].src[0].src if c.src[0].op is Op.CUSTOM_FUNCTION else (c,))
    return out


def check_plan(linear: UOp) -> tuple[int, int]:
    """Assert the plan of `linear` is sound; return (bytes in all arenas, peak bytes simultaneously live)."""
    life: dict[UOp, list[int]] = {}
    for i, call in enumerate(flat_calls(linear)):
        for a in call.src[1:]:
            if a.op is Op.SLICE:
                life.setdefault(a, [i, i])[1] = i
    spans = {s: (s.arg[0], s.arg[0] + s.arg[1] * s.dtype.itemsize) for s in life}
    for s, (lo, hi) in spans.items():
        arena = s.src[0]
        assert arena.op is Op.BUFFER and 0 <= lo <= hi <= arena.arg * arena.dtype.itemsize, f"{s} outside its arena"
    items = list(life)
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if a.src[0] is not b.src[0]:
                continue
            (fa, la), (fb, lb) = life[a], life[b]
            if fa <= lb and fb <= la:  # live at a common call
                (alo, ahi), (blo, bhi) = spans[a], spans[b]
                assert ahi <= blo or bhi <= alo, (f"planned buffers overlap while both live: bytes [{alo},{ahi}) "
                                                  f"calls {life[a]} and [{blo},{bhi}) calls {life[b]}")
    ncalls = len(flat_calls(linear))
    peak = max((sum(spans[s][1] - spans[s][0] for s in items if life[s][0] <= t <= life[s][1])
                for t in range(ncalls)), default=0)
    arena_bytes = sum(a.arg for a in {s.src[0] for s in items})
    return arena_bytes, peak
