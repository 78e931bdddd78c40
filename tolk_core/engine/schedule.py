"""schedule: a tensor graph to a LINEAR of kernel CALLs for one Target, without running anything.

`lower(target, sink, new_buffer)` is the one place a `SINK(STORE(dest, value), ...)` becomes a LINEAR:
prepare_rangeify, then placements and rangeify (`create_linear`), for the device facts of `target`.

`schedule(target, values)` stores each value into new storage and caches the result by structure: a graph
equal to an earlier one up to which storage it reads (BUFFERs are numbered slots in the key), with the same
variable values, scheduling settings and placements (the digest of the current lineage's placement classes by
graph position, `placements.digest`), reuses that LINEAR with this call's buffers and fresh storage for its
outputs and intermediates, so a repeated realize skips scheduling; the placement decisions the cached compile
made are replayed onto this graph's nodes in the current lineage. With DEBUG>=3 (placement dumps) every call
schedules anew, and so does every call while VIZ records (engine/viz.py). `schedule_stores(target, sink)`
(assignments into existing storage) is cached the same way, its destinations numbered slots like the inputs.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
from tolk_core.schedule.prepare import SIZED_MOVEMENTS, prepare_rangeify, unbind

SCHEDULE_CACHE_SIZE = 512
# the settings scheduling reads: part of the schedule cache's key
_SCHEDULE_SETTINGS = ("PLACEMENT_STACK_THRESHOLD", "SPLIT_REDUCEOP", "REDUCEOP_SPLIT_SIZE", "REDUCEOP_SPLIT_THRESHOLD",
                      "FUSION_WORK_BOUND", "FUSION_MIN_EXCESS", "KERNEL_MAX_OPS", "KERNEL_MAX_BUFFERS")
# a cached schedule's calls as (AST, info, slot of each argument): see `Entry`
_Calls = tuple[tuple[UOp, Any, tuple[int, ...]], ...]


@dataclass
class Entry:
    """A cached schedule: the LINEAR with numbered slots for its buffers (`_slot`: the inputs in order of
    appearance, then the storage it makes, its values' first), the (size, dtype) of each buffer it makes, how
    many of those hold its values, the placement decisions its compile made (by graph position), and its calls
    as (AST, info, slot of each argument) where every argument is a slot and no AST holds one (None otherwise:
    a hit then substitutes the whole LINEAR). `derived`: what launching it directly works out once
    (engine/hits.py)."""
    template: UOp
    fresh: list[tuple[int, Any]]
    n_out: int
    decisions: placements.Decisions
    calls: _Calls | None
    derived: dict[str, Any] = field(default_factory=dict)


class Hit(NamedTuple):
    """A cache entry found for a graph (`lookup`): the entry, the graph's BUFFERs (its input slots, in order)
    and its bound Variables' values."""
    entry: Entry
    inputs: list[UOp]
    var_vals: dict[str, int]


class _Keyed(NamedTuple):
    """A graph ready for the cache: `sink` with its Variables unbound, their values, its nodes (toposort), its
    BUFFERs in order (the input slots) and its key (None: not cached)."""
    sink: UOp
    var_vals: dict[str, int]
    nodes: list[UOp]
    inputs: list[UOp]
    key: tuple | None


# structural key -> the cached schedule
_schedules: dict[tuple, Entry] = {}


class Schedule(NamedTuple):
    """What `schedule` returns: the LINEAR, the new BUFFER holding each value, the bound Variables' values."""
    linear: UOp
    outputs: list[UOp]
    var_vals: dict[str, int]


def concrete(x: sint, var_vals: dict[str, int]) -> int:
    """A size as an int: symbolic sizes evaluated at the bound Variables' values."""
    return x if isinstance(x, int) else int(x.eval(var_vals))


def lower(target: Target, sink: UOp, new_buffer: Callable[[UOp], UOp], nodes: Sequence[UOp] | None = None,
          merge: bool = False) -> UOp:
    """The LINEAR of `sink` (stores of unbound values) on `target`; `new_buffer(value)` makes the storage of
    each intermediate the scheduler stores. `nodes`, when given, are the graph's nodes that can name another
    device (a caller that walked the graph already passes them: a walk of a deep graph is not free). `merge`:
    `sink` assigns into existing storage, its store kernels may merge (`create_linear`)."""
    target = reading(target, sink.toposort() if nodes is None else nodes)
    if viz.active():  # recorded for the HTML view (docs/viz.md)
        def both(nb: Callable[[UOp], UOp]) -> tuple[UOp, UOp]:
            prepared = prepare_rangeify(sink, target)
            return prepared, create_linear(prepared, nb, target, merge)
        return viz.note_lower(target.device, sink, both, new_buffer, lambda: structure(sink))
    return create_linear(prepare_rangeify(sink, target), new_buffer, target, merge)


def _cache_key(kind: str, target: Target, sink: UOp, var_vals: dict[str, int], shape: tuple,
               positions: dict[UOp, int]) -> tuple | None:
    """The schedule cache's key of `sink`, whose `structure` is `shape` and `positions` its nodes' positions in
    it (None: this call is not cached, see the module docstring)."""
    debug, *settings = config.get_many(("DEBUG", *_SCHEDULE_SETTINGS))  # one look at the config files
    if debug >= 3 or viz.active():
        return None
    lineage = placements.current()
    return (kind, target.device, shape, tuple(sorted(var_vals.items())), tuple(settings),
            placements.digest(sink, lineage.placements, lineage.inline_preferences, positions))


def _from_cache(key: tuple | None, target: Target, nodes: list[UOp],
                inputs: list[UOp]) -> tuple[UOp, list[UOp]] | None:
    """A cached LINEAR for `key` with this call's buffers (its inputs, then fresh storage for the outputs and
    intermediates, which it also returns), its placement decisions replayed; None on a miss."""
    if key is None or (entry := _schedules.get(key)) is None:
        return None
    placements.replay(nodes, entry.decisions)
    bufs = inputs + [buffers.new_buffer(target.device, size, dt) for size, dt in entry.fresh]
    count_hit()
    if entry.calls is None:
        return entry.template.substitute({_slot(i, b.dtype): b for i, b in enumerate(bufs)}), bufs[len(inputs):]
    return UOp(Op.LINEAR, dtypes.void, tuple(UOp(Op.CALL, dtypes.void, (ast, *[bufs[i] for i in slots]), info)
                                             for ast, info, slots in entry.calls)), bufs[len(inputs):]


def count_hit() -> None:
    """Count a schedule served from the cache."""
    GlobalCounters.schedules += 1
    GlobalCounters.schedule_cache_hits += 1


def lookup(kind: str, target: Target, sink: UOp, seen: Survey | None = None) -> Hit | None:
    """The entry `schedule` (`kind` "values": `sink`'s sources are values) or `schedule_stores` ("stores")
    would reuse for `sink`, when its calls take slots only, with the entry's placement decisions replayed onto
    `sink`'s nodes (as a hit replays them); None otherwise. Nothing is counted: the caller that launches the
    hit counts it (`count_hit`), one that does not schedules as usual. `seen`: the caller's survey of `sink`."""
    k = _keyed(kind, target, sink, seen)
    if k.key is None or (entry := _schedules.get(k.key)) is None or entry.calls is None:
        return None
    placements.replay(k.nodes, entry.decisions)
    return Hit(entry, k.inputs, k.var_vals)


def _keyed(kind: str, target: Target, sink: UOp, seen: Survey | None = None) -> _Keyed:
    """`sink` unbound and keyed for the cache, from one walk (`survey`; `seen`, the caller's survey of
    `sink`, spares it)."""
    seen = seen or survey(sink)
    var_vals: dict[str, int] = {}
    if seen.binds and (unbound := unbind(sink))[0] is not sink:
        sink, var_vals = unbound
        seen = survey(sink)
    return _Keyed(sink, var_vals, seen.nodes, seen.inputs,
                  _cache_key(kind, target, sink, var_vals, seen.shape, seen.positions))


def _call_slots(template: UOp) -> _Calls | None:
    """The CALLs of a slotted LINEAR as (AST, info, slot of each argument), where every argument is a slot
    and no kernel's graph reads one (else None: a hit substitutes the whole LINEAR)."""
    out = []
    for call in template.src:
        ast, args = call.src[0], call.src[1:]
        if call.op is not Op.CALL or not all(_is_slot(a) for a in args) or any(_is_slot(u) for u in ast.toposort()):
            return None
        out.append((ast, call.arg, tuple(a.arg[1] for a in args)))
    return tuple(out)


def _is_slot(u: UOp) -> bool:
    return u.op is Op.PARAM and type(u.arg) is tuple and len(u.arg) == 2 and u.arg[0] == "schedule slot"


def _remember(key: tuple | None, linear: UOp, inputs: list[UOp], made: list[UOp], n_out: int, nodes: list[UOp],
              before: list) -> None:
    """Cache `linear` under `key` when its storage is all inputs or buffers it made (only such a LINEAR can be
    replayed with other buffers)."""
    slots = {b: _slot(i, b.dtype) for i, b in enumerate(inputs + made)}
    if key is None or not all(u in slots for u in linear.toposort() if u.op is Op.BUFFER):
        return
    if len(_schedules) >= SCHEDULE_CACHE_SIZE:
        del _schedules[next(iter(_schedules))]
    template = linear.substitute(slots)
    _schedules[key] = Entry(template, [(b.arg, b.dtype) for b in made], n_out,
                            placements.recorded(nodes, before, placements.current().placements), _call_slots(template))


def _scheduled(target: Target, sink: UOp, values: bool, var_vals: dict[str, int], nodes: list[UOp],
               made: list[UOp]) -> UOp:
    """The LINEAR of `sink` (of values, each stored into new storage first, or of stores), counted and shown
    at DEBUG>=1; the storage it makes goes to `made`, the values' first."""
    def new_buffer(v: UOp) -> UOp:
        made.append(buffers.new_buffer(target.device, concrete(v.size, var_vals), v.dtype))
        return made[-1]
    if values:
        outs = [new_buffer(v) for v in sink.src]
        sink = UOp(Op.SINK, dtypes.void, tuple(UOp(Op.STORE, dtypes.void, (b, v))
                                               for v, b in zip(sink.src, outs, strict=True)))
    linear = lower(target, sink, new_buffer, nodes, merge=not values)  # the stores add no device
    GlobalCounters.schedules += 1
    if (debug := config.get("DEBUG")) >= 1:
        print(f"scheduled {len(linear.src)} kernel(s) on {target.device}" + (f":\n{linear}" if debug >= 3 else ""))
    return linear


def _schedule(kind: str, target: Target, sink: UOp) -> tuple[UOp, list[UOp], dict[str, int]]:
    """The LINEAR of `sink`, the storage made for its first outputs and the bound Variables' values: from the
    cache, or scheduled and remembered. `kind` "values": `sink`'s sources are values, each stored into new
    storage; "stores": `sink` holds STOREs into existing storage."""
    sink, var_vals, nodes, inputs, key = _keyed(kind, target, sink)
    if (hit := _from_cache(key, target, nodes, inputs)) is not None:
        return (*hit, var_vals)
    made: list[UOp] = []
    before = [placements.current().placements.raw_entry(u) for u in nodes]
    n_out = len(sink.src) if kind == "values" else 0
    linear = _scheduled(target, sink, kind == "values", var_vals, nodes, made)
    _remember(key, linear, inputs, made, n_out, nodes, before)
    return linear, made, var_vals


def schedule(target: Target, values: Sequence[UOp]) -> Schedule:
    """Schedule `values` on `target` into new storage, without running anything (see the module docstring)."""
    linear, made, var_vals = _schedule("values", target, UOp(Op.SINK, dtypes.void, tuple(values)))
    return Schedule(linear, made[:len(values)], var_vals)


def schedule_stores(target: Target, sink: UOp) -> Schedule:
    """The LINEAR of `sink` (`SINK(STORE(dest, value), ...)` into existing storage) on `target`: bound
    Variables leave the graph for the var_vals; intermediates get new storage. Cached as `schedule` is: the
    destinations are BUFFERs like the inputs, numbered slots in the key (so which of them alias is part of
    it), and a hit substitutes this call's (an optimizer stores the same graphs into the same parameters every
    step)."""
    linear, _, var_vals = _schedule("stores", target, sink)
    return Schedule(linear, [], var_vals)


def structure(sink: UOp) -> tuple:
    """`sink`'s graph as plain data, BUFFERs numbered in order of appearance: equal for structurally equal
    graphs, and holding no node of the graph (a key that held the user's nodes would keep their computed
    results alive in the value cache)."""
    return survey(sink).shape


class Survey(NamedTuple):
    """One walk of a graph (`survey`), what a realize and the schedule cache ask of it: its nodes (toposort)
    and each one's position, its `structure`, its BUFFERs in that order (a cache hit's inputs), the nodes
    whose value reads storage, whether it may hold a bound Variable (a BIND, or a movement with a symbolic
    argument: `unbind` decides) and whether it copies or reads storage on a device other than the one asked."""
    nodes: list[UOp]
    positions: dict[UOp, int]
    shape: tuple
    inputs: list[UOp]
    reads: set[UOp]
    binds: bool
    crosses: bool


_FLAGGED = frozenset({Op.BIND, Op.COPY, *SIZED_MOVEMENTS})
# movement arguments seen, and whether they are concrete (ints, (int, int) pairs): the same shapes come back in
# every step's graph, one dict lookup instead of a generator over the argument (bounded: cleared when full)
_concrete_args: dict[Any, bool] = {}


def _is_concrete(arg: tuple) -> bool:
    if (known := _concrete_args.get(arg)) is None:
        if len(_concrete_args) >= 4096:
            _concrete_args.clear()
        known = _concrete_args[arg] = all(type(a) is int or (type(a) is tuple and type(a[0]) is int and
                                                              type(a[1]) is int) for a in arg)
    return known


def survey(sink: UOp, device: str | None = None) -> Survey:
    """Everything `Survey` holds about `sink`'s graph, from its toposort and one pass over it: every realize
    asks all of it, and separate passes (structure, storage reads, bound Variables, devices) were a fifth of
    an eager train step's Python. `device`: the device asked (None: no BUFFER counts as another device's)."""
    nodes = sink.toposort()
    index = dict(zip(nodes, range(len(nodes)), strict=True))  # built in C: sources are indexed before users
    inputs: list[UOp] = []
    out: list[tuple] = []
    reads: set[UOp] = set()
    binds = crosses = False
    append, at, disjoint = out.append, index.__getitem__, reads.isdisjoint
    for u in nodes:
        op, src = u.op, u.src
        if op is Op.BUFFER:
            append(("buffer", u.dtype, u.arg, len(inputs)))
            inputs.append(u)
            reads.add(u)
            crosses = crosses or (device is not None and src[1].arg != device)
            continue
        if op is Op.UNIQUE:  # a buffer's identity: what the slots abstract away
            append(("unique",))
            continue
        n = len(src)
        if n == 1:  # most nodes: one or two sources, indexed without a map object
            append((op, u.dtype, u.arg, at(src[0])))
        elif n == 2:
            append((op, u.dtype, u.arg, at(src[0]), at(src[1])))
        else:
            append((op, u.dtype, u.arg, *map(at, src)))
        if n and not disjoint(src):
            reads.add(u)
        if op in _FLAGGED:
            if op is Op.COPY:
                crosses = True
            elif op is Op.BIND or not _is_concrete(u.arg):
                binds = True
    return Survey(nodes, index, tuple(out), inputs, reads, binds, crosses)


def _slot(i: int, dtype: Any) -> UOp:
    return UOp(Op.PARAM, dtype, (), ("schedule slot", i))
