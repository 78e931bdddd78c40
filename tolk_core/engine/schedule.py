"""schedule: a tensor graph to a LINEAR of kernel CALLs for one Target, without running anything.

`lower(target, sink, new_buffer)` is the one place a `SINK(STORE(dest, value), ...)` becomes a LINEAR:
prepare_rangeify, then placements and rangeify (`create_linear`), for the device facts of `target`.

`schedule(target, values)` stores each value into new storage and caches the result by structure: a graph
equal to an earlier one up to which storage it reads (BUFFERs are numbered slots in the key), with the same
variable values, scheduling settings and placements (the digest of the current lineage's placement classes by
graph position, `placements.digest`), reuses that LINEAR with this call's buffers and fresh storage for its
outputs and intermediates, so a repeated realize skips scheduling; the placement decisions the cached compile
made are replayed onto this graph's nodes in the current lineage. With DEBUG>=3 (placement dumps) every call
schedules anew, and so does every call while VIZ records (engine/viz.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, viz
from tolk_core.engine.target import reading
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.target import Target
from tolk_core.ir.uop import UOp, sint
from tolk_core.schedule import placements
from tolk_core.schedule.linear import create_linear
from tolk_core.schedule.prepare import prepare_rangeify, unbind

SCHEDULE_CACHE_SIZE = 512
# the settings scheduling reads: part of the schedule cache's key
_SCHEDULE_SETTINGS = ("PLACEMENT_STACK_THRESHOLD", "SPLIT_REDUCEOP", "REDUCEOP_SPLIT_SIZE", "REDUCEOP_SPLIT_THRESHOLD",
                      "FUSION_WORK_BOUND", "FUSION_MIN_EXCESS", "KERNEL_MAX_OPS", "KERNEL_MAX_BUFFERS")
# structural key -> (LINEAR with slots for buffers, (size, dtype) of each new buffer's slot, output slots, the
# placement decisions the compile made, by graph position)
_schedules: dict[tuple, tuple[UOp, list[tuple[int, Any]], int, placements.Decisions]] = {}


class Schedule(NamedTuple):
    """What `schedule` returns: the LINEAR, the new BUFFER holding each value, the bound Variables' values."""
    linear: UOp
    outputs: list[UOp]
    var_vals: dict[str, int]


def concrete(x: sint, var_vals: dict[str, int]) -> int:
    """A size as an int: symbolic sizes evaluated at the bound Variables' values."""
    return x if isinstance(x, int) else int(x.eval(var_vals))


def lower(target: Target, sink: UOp, new_buffer: Callable[[UOp], UOp], nodes: Sequence[UOp] | None = None) -> UOp:
    """The LINEAR of `sink` (stores of unbound values) on `target`; `new_buffer(value)` makes the storage of
    each intermediate the scheduler stores. `nodes`, when given, are the graph's nodes that can name another
    device (a caller that walked the graph already passes them: a walk of a deep graph is not free)."""
    target = reading(target, sink.toposort() if nodes is None else nodes)
    if viz.active():  # recorded for the HTML view (docs/viz.md)
        def both(nb: Callable[[UOp], UOp]) -> tuple[UOp, UOp]:
            prepared = prepare_rangeify(sink, target)
            return prepared, create_linear(prepared, nb, target)
        return viz.note_lower(target.device, sink, both, new_buffer, lambda: structure(sink))
    return create_linear(prepare_rangeify(sink, target), new_buffer, target)


def schedule(target: Target, values: Sequence[UOp]) -> Schedule:
    """Schedule `values` on `target` into new storage, without running anything (see the module docstring)."""
    sink, var_vals = unbind(UOp(Op.SINK, dtypes.void, tuple(values)))
    nodes = sink.toposort()
    inputs = [u for u in nodes if u.op is Op.BUFFER]
    lineage = placements.current()
    key = (target.device, structure(sink), tuple(sorted(var_vals.items())),
           tuple(config.get(k) for k in _SCHEDULE_SETTINGS),
           placements.digest(sink, lineage.placements, lineage.inline_preferences)) \
        if config.get("DEBUG") < 3 and not viz.active() else None
    if key is not None and (hit := _schedules.get(key)) is not None:
        template, fresh, n_out, decisions = hit
        placements.replay(nodes, decisions)
        bufs = inputs + [buffers.new_buffer(target.device, size, dt) for size, dt in fresh]
        linear = template.substitute({_slot(i, b.dtype): b for i, b in enumerate(bufs)})
        GlobalCounters.schedules += 1
        GlobalCounters.schedule_cache_hits += 1
        return Schedule(linear, bufs[len(inputs):len(inputs) + n_out], var_vals)
    made: list[UOp] = []

    def new_buffer(v: UOp) -> UOp:
        made.append(buffers.new_buffer(target.device, concrete(v.size, var_vals), v.dtype))
        return made[-1]

    outs = [new_buffer(v) for v in sink.src]
    stores = tuple(UOp(Op.STORE, dtypes.void, (b, v)) for v, b in zip(sink.src, outs, strict=True))
    before = [lineage.placements.raw_entry(u) for u in nodes]
    linear = lower(target, UOp(Op.SINK, dtypes.void, stores), new_buffer, nodes)  # the stores add no device
    GlobalCounters.schedules += 1
    if (debug := config.get("DEBUG")) >= 1:
        print(f"scheduled {len(linear.src)} kernel(s) on {target.device}" + (f":\n{linear}" if debug >= 3 else ""))
    slots = {b: _slot(i, b.dtype) for i, b in enumerate(inputs + made)}
    # only a LINEAR whose storage is all inputs or new buffers can be replayed with other buffers
    if key is not None and all(u in slots for u in linear.toposort() if u.op is Op.BUFFER):
        if len(_schedules) >= SCHEDULE_CACHE_SIZE:
            del _schedules[next(iter(_schedules))]
        _schedules[key] = (linear.substitute(slots), [(b.arg, b.dtype) for b in made], len(outs),
                           placements.recorded(nodes, before, lineage.placements))
    return Schedule(linear, outs, var_vals)


def schedule_stores(target: Target, sink: UOp) -> Schedule:
    """The LINEAR of `sink` (`SINK(STORE(dest, value), ...)` into existing storage) on `target`: bound
    Variables leave the graph for the var_vals; intermediates get new storage. Not cached (a store's
    destinations are the user's storage)."""
    sink, var_vals = unbind(sink)

    def new_buffer(v: UOp) -> UOp:
        return buffers.new_buffer(target.device, concrete(v.size, var_vals), v.dtype)
    return Schedule(lower(target, sink, new_buffer), [], var_vals)


def structure(sink: UOp) -> tuple:
    """`sink`'s graph as plain data, BUFFERs numbered in order of appearance: equal for structurally equal
    graphs, and holding no node of the graph (a key that held the user's nodes would keep their computed
    results alive in the value cache)."""
    index: dict[UOp, int] = {}
    nbuf = 0
    out: list[tuple] = []
    for u in sink.toposort():
        if u.op is Op.BUFFER:
            out.append(("buffer", u.dtype, u.arg, nbuf))
            nbuf += 1
        elif u.op is Op.UNIQUE:  # a buffer's identity: what the slots abstract away
            out.append(("unique",))
        else:
            out.append((u.op, u.dtype, u.arg, tuple(index[s] for s in u.src)))
        index[u] = len(index)
    return tuple(out)


def _slot(i: int, dtype: Any) -> UOp:
    return UOp(Op.PARAM, dtype, (), ("schedule slot", i))
