"""hits: a schedule-cache hit launched directly, without its LINEAR.

An eager step realizes the same graphs every step, and each realize is a schedule-cache hit (engine/schedule.py).
Built as a LINEAR, a hit costs a BUFFER node and a runtime Buffer per intermediate, a CALL node per kernel, and
per launch the lookups of its program, launch sizes and buffers: a few milliseconds per step for a recurrent
or transformer train step, more than its kernels. Here the entry's launches are resolved once (each kernel's
loaded program, launch sizes and scalar arguments, and the slot of each of its buffers; the Variables' values
are part of the entry's key), and a hit allocates its storage and queues the launches on them: BUFFER nodes only
for the values it returns, plain runtime Buffers for the intermediates, kept alive by the queued launches.
A hit's intermediates are kept for the entry's next hit (its launches queue after this hit's on the device, so
they may reuse the storage), up to SCRATCH_BYTES over all entries: a Buffer made, allocated and given back per
intermediate was ~2 us each, 126 of them in a recurrent train step.
From its second launch, an entry of at least GRAPH_MIN_KERNELS kernels is replayed through the device's Graph
(the JIT's batched replay, docs/plugins.md), rebound to each hit's buffers (`Graph.rebind`) when it runs: one
native call instead of a Python launch per kernel (~2-3 us each on CPU, a recurrent train step launches 126).

Where a LINEAR must exist this is not used (`allowed`): inside a JIT capture (which records LINEARs), while
profiling or at DEBUG>=2 (launches timed one by one), with BEAM (kernels tuned on first launch).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, compile, concurrent, profile, run
from tolk_core.engine.schedule import Hit, count_hit
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device
from tolk_core.runtime import Buffer, Launch
from tolk_core.schedule.merge import reads_precede_stores

# the fewest kernels a hit must launch to be replayed through the device's Graph (fewer: launched one by one)
GRAPH_MIN_KERNELS = 4
# the bytes of intermediates kept for their schedules' next hits, over all schedules (`_keep`)
SCRATCH_BYTES = 64 << 20
# schedule entries keeping intermediates, least recently hit first: id -> (entry, bytes)
_kept: OrderedDict[int, tuple[Any, int]] = OrderedDict()
_kept_bytes = [0]


def allowed() -> bool:
    """Whether a hit may be launched directly now (see the module docstring)."""
    if run.capturing() or profile.profiling():
        return False
    debug, beam = config.get_many(("DEBUG", "BEAM"))
    return debug < 2 and not beam


def _plan(device: str, hit: Hit) -> tuple[Any, list[tuple[Any, tuple[int, ...], Any, Any, tuple[int, ...]]]] | None:
    """(the opened device, each launch as (program, argument slots, global size, local size, scalar values)) of
    `hit`'s entry on `device`, worked out on first use and again when the device is reopened or a program
    replaced (a tuned plan); None where some kernel is not compiled for it."""
    handle, entry = Device[device], hit.entry
    assert entry.calls is not None  # `lookup` finds entries whose calls take slots only
    if (got := entry.derived.get("plan")) is not None and got[0] is handle and got[1] == compile.replaced():
        return handle, got[2]
    programs = compile.loaded(handle, [ast for ast, _, _ in entry.calls])
    if programs is None:
        return None
    plan = [(prg, slots, ks.launch_dims(hit.var_vals), ks.local_size, compile.kernel_vals(ks, hit.var_vals))
            for (prg, ks), (_, _, slots) in zip(programs, entry.calls, strict=True)]
    entry.derived["plan"] = (handle, compile.replaced(), plan)
    return handle, plan


def reads_precede_stores_at(hit: Hit, destinations: set[UOp]) -> bool:
    """`merge.reads_precede_stores` of the hit's kernels, `destinations` among its inputs (BUFFERs): structural,
    so worked out once per entry and set of destination slots."""
    assert hit.entry.calls is not None
    where = {b: i for i, b in enumerate(hit.inputs)}
    slots = frozenset(where[d] for d in destinations if d in where)
    verdicts = hit.entry.derived.setdefault("reads precede stores", {})
    if (verdict := verdicts.get(slots)) is None:
        verdict = verdicts[slots] = reads_precede_stores([(ast, s) for ast, _, s in hit.entry.calls], set(slots))
    return verdict


def launch(device: str, hit: Hit) -> list[UOp] | None:
    """Queue `hit`'s kernels on its inputs and new storage; the new BUFFERs holding its values (as `schedule`
    returns them). None, with nothing done, where a kernel is not compiled for `device` (the caller schedules
    as usual, which compiles it). Every buffer is allocated before anything is queued, as `run_linear` does."""
    if (found := _plan(device, hit)) is None:
        return None
    handle, plan = found
    entry, alloc = hit.entry, handle.allocator
    outs = [buffers.new_buffer(device, size, dt) for size, dt in entry.fresh[:entry.n_out]]
    bufs = [buffers.runtime_buffer(b, alloc).allocate() for b in (*hit.inputs, *outs)]
    scratch = _scratch(entry, plan, device, alloc)
    bufs += scratch
    handles = [b.handle for b in bufs]
    count_hit()
    GlobalCounters.kernels_launched += len(plan)
    # the buffers stay referenced until the launches ran (queued on the device inside together())
    if (found_graph := _graph(handle, entry, plan, handles)) is not None:
        graph, flat = found_graph  # (the graph and its lock)
        GlobalCounters.eager_graph_replays += 1
        flat_handles = [handles[i] for i in flat]
        concurrent.defer(device, lambda: _replay(graph, flat_handles, bufs))
    else:
        launches = [(prg, [handles[i] for i in slots], gsize, lsize, vals) for prg, slots, gsize, lsize, vals in plan]
        concurrent.defer(device, lambda: run.launch_all(launches, bufs))
    _keep(entry, plan, scratch)  # the next hit's launches queue after these on the device: it may reuse them
    return outs


def _scratch(entry: Any, plan: list, device: str, alloc: Any) -> list[Buffer]:
    """The storage of `entry`'s intermediates: what its last hit kept (`_keep`), else new."""
    if (got := entry.derived.pop("scratch", None)) is not None:
        _kept_bytes[0] -= _kept.pop(id(entry))[1]
        if got[0] is plan:  # (kept for the same opened device and programs)
            return got[1]
    return [Buffer(device, size, dt, allocator=alloc).allocate() for size, dt in entry.fresh[entry.n_out:]]


def _keep(entry: Any, plan: list, scratch: list[Buffer]) -> None:
    """Keep `scratch` for `entry`'s next hit, within SCRATCH_BYTES for all entries (the least recently hit give
    theirs back first)."""
    nbytes = sum(b.nbytes for b in scratch)
    if not scratch or nbytes > SCRATCH_BYTES:
        return
    if (before := _kept.pop(id(entry), None)) is not None:  # another thread's hit kept its own meanwhile
        _kept_bytes[0] -= before[1]
    entry.derived["scratch"] = (plan, scratch)
    _kept[id(entry)] = (entry, nbytes)
    _kept_bytes[0] += nbytes
    while _kept_bytes[0] > SCRATCH_BYTES:
        _, (old, n) = _kept.popitem(last=False)
        old.derived.pop("scratch", None)
        _kept_bytes[0] -= n


def _graph(handle: Any, entry: Any, plan: list, handles: list[Any]) -> tuple[Any, list[int]] | None:
    """The device Graph replaying `entry`'s launches with the lock its replays take (threads may share a
    schedule: one rebind and replay at a time), and the slot of each launch's buffers in launch order; or
    None: only for a schedule of at least GRAPH_MIN_KERNELS launched a second time (a graph costs a compile of
    its driver on some devices, which a realize seen once does not repay), on a device with a Graph capability.
    Built on these `handles`; a replay rebinds them."""
    if len(plan) < GRAPH_MIN_KERNELS or handle.graph is None:
        return None
    got = entry.derived.get("graph")
    if got is not None and got[0] is plan:
        return got[1], got[2]
    if got is None:  # the first launch of this plan
        entry.derived["graph"] = (None, None, None)
        return None
    graph = handle.graph(handle, [Launch(prg, [handles[i] for i in slots], list(vals), gsize, lsize)
                                  for prg, slots, gsize, lsize, vals in plan])
    flat = [i for _, slots, _, _, _ in plan for i in slots]
    pair = (graph, threading.Lock())
    entry.derived["graph"] = (plan, pair, flat)
    return pair, flat


def _replay(graph_lock: tuple[Any, threading.Lock], handles: list[Any], keep: list[Buffer]) -> None:
    """Rebind the graph to this hit's buffers (`handles`, every launch's in launch order) and run it, under its
    lock, at the launch's place in the device's queue (two hits of one entry queued together each bind their
    own); `keep` holds the Buffers until it ran."""
    graph, lock = graph_lock
    with lock:
        graph.rebind(handles)
        graph.submit()  # the device may finish it later (docs/performance.md, "Launches that do not wait")
