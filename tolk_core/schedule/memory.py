"""The memory planner: the intermediate buffers of a LINEAR become views into one arena per (device, lane).

Input: a LINEAR of CALL(body, *args) where args are BUFFERs, JIT input PARAMs or SLICEs, and the buffers that
must keep their own storage (`held`). A BUFFER argument is *planned* when:
- it is not held,
- its device can make sub-buffer views (`alignment(device)` is not None), and
- the first call that touches it writes it (a buffer read before it is written holds data from outside the
  LINEAR, e.g. weights, and keeps its storage).

Lifetime of a planned buffer: [first call index, last call index]. Buffers touched by a COPY call go to a
separate "copy" lane and stay allocated an extra (last - first + 1) calls, so a copy's slot is not reused by
compute right away (that would serialize copies behind compute). Sizes and offsets are rounded to the device's
alignment (at least 256 bytes; on OpenCL the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN). Offsets come from a
best-fit allocator with coalescing free blocks; a buffer freed at call i can be reused from call i+1.

Output: the LINEAR with each planned BUFFER replaced by SLICE(arena, arg=(byte_offset, numel, buffer's unique id))
of its dtype (the id keeps two planned buffers distinct nodes even when they share an offset);
each arena is a fresh uint8 BUFFER sized to the lane's peak. `NO_MEMORY_PLANNER=1` returns the LINEAR as is.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Collection
from dataclasses import dataclass

from tolk_core import config
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp

MIN_ALIGN = 256


def written_slots(body: UOp) -> set[int]:
    """The PARAM slots a kernel body (SINK or PROGRAM(SINK)) stores into; a COPY writes its first argument, an
    allreduce folded in place (COPY arg ("fold", devices, plan), engine/direct_fold.py) its first one per device."""
    if body.op is Op.COPY:
        return set(range(len(body.arg[1]))) if isinstance(body.arg, tuple) and body.arg[0] == "fold" else {0}
    ast = body.src[0] if body.op is Op.PROGRAM else body
    return {u.src[0].src[0].arg for u in ast.toposort() if u.op is Op.STORE}


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class BestFit:
    """Offsets in an unbounded arena: best-fit over free blocks that coalesce on free; `peak` is the high-water
    mark (the arena size needed)."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []  # (offset, size), sorted by offset
        self.top = 0
        self.peak = 0

    def alloc(self, size: int) -> int:
        best = min((i for i, (_, s) in enumerate(self.free) if s >= size), key=lambda i: self.free[i][1], default=None)
        if best is None:
            if self.free and self.free[-1][0] + self.free[-1][1] == self.top:  # grow the last free block
                off = self.free.pop()[0]
            else:
                off = self.top
            self.top = off + size
            self.peak = max(self.peak, self.top)
            return off
        off, s = self.free[best]
        if s == size:
            del self.free[best]
        else:
            self.free[best] = (off + size, s - size)
        return off

    def release(self, off: int, size: int) -> None:
        i = bisect.bisect(self.free, (off, size))
        self.free.insert(i, (off, size))
        if i + 1 < len(self.free) and off + size == self.free[i + 1][0]:  # merge with the next block
            self.free[i] = (off, size + self.free.pop(i + 1)[1])
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == off:  # and with the previous one
            prev = self.free[i - 1]
            self.free[i - 1] = (prev[0], prev[1] + self.free.pop(i)[1])
            i -= 1
        if self.free[i][0] + self.free[i][1] == self.top:  # a free block at the top shrinks the arena in use
            self.top = self.free.pop(i)[0]


@dataclass
class _Life:
    first: int
    last: int
    lane: str = "compute"


def plan_memory(linear: UOp, held: Collection[UOp], alignment: Callable[[str], int | None]) -> UOp:
    """`linear` with its plannable intermediates as SLICEs of per-(device, lane) arenas (module docstring)."""
    if config.get("NO_MEMORY_PLANNER"):
        return linear
    held = set(held)
    lives: dict[UOp, _Life] = {}
    skip: set[UOp] = set(held)
    for i, call in enumerate(linear.src):
        writes = written_slots(call.src[0])
        for slot, arg in enumerate(call.src[1:]):
            if arg.op is not Op.BUFFER or arg in skip:
                continue
            if (life := lives.get(arg)) is None:
                if slot not in writes or alignment(arg.src[1].arg) is None:
                    skip.add(arg)  # read before written (data from outside), or no views on its device
                    continue
                life = lives[arg] = _Life(i, i)
            life.last = i
            if call.src[0].op is Op.COPY:
                life.lane = "copy"
    if not lives:
        return linear
    events: list[tuple[int, int, UOp]] = []  # (time, 0 = free / 1 = alloc, buffer): frees first at equal times
    for buf, life in lives.items():
        hold = life.last - life.first + 1 if life.lane == "copy" else 0
        events += [(life.first, 1, buf), (life.last + 1 + hold, 0, buf)]
    events.sort(key=lambda e: (e[0], e[1], lives[e[2]].first))
    lanes: dict[tuple[str, str], BestFit] = {}
    placed: dict[UOp, tuple[tuple[str, str], int, int]] = {}
    for _, kind, buf in events:
        dev = buf.src[1].arg
        key, align = (dev, lives[buf].lane), max(MIN_ALIGN, alignment(dev) or 1)
        fit = lanes.setdefault(key, BestFit())
        if kind == 1:
            size = _round_up(max(buf.arg * buf.dtype.itemsize, 1), align)
            placed[buf] = (key, fit.alloc(size), size)
        else:
            _, off, size = placed[buf]
            fit.release(off, size)
    arenas = {key: UOp.new_buffer(key[0], _round_up(fit.peak, MIN_ALIGN), dtypes.uint8) for key, fit in lanes.items()}
    views = {buf: UOp(Op.SLICE, buf.dtype, (arenas[key],), (off, buf.arg, buf.src[0].arg))
             for buf, (key, off, _) in placed.items()}
    calls = [c if not any(a in views for a in c.src[1:]) else c.replace(src=(c.src[0], *(views.get(a, a) for a in
             c.src[1:]))) for c in linear.src]
    return linear.replace(src=tuple(calls))
