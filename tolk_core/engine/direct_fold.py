"""direct_fold: the naive allreduce between devices whose kernels read and write each other's memory in place
(docs/multi-device.md, the allreduce).

Where every device's allocator says it may take the others' handles as kernel arguments and that its
memory is host memory (`Allocator.reads_peer`, `Allocator.host_memory`: virtual CPU devices), nothing is
copied. The value is cut into one chunk per device (ceil(size / n) elements, the last ones shorter); device
`i` runs one kernel that folds chunk `i` of every partial, read where it lies, and stores the folded chunk
into chunk `i` of every device's result. Each element is folded once, in device order as the naive allreduce
folds it, so every device holds the same bits, and the memory traffic is the partials read once and the
results written once (the naive exchange copies every partial to every device and folds it there).

The fold kernel is Tolk's own: the fold graph over placeholder buffers is scheduled into one kernel and that
kernel's store is repeated into n - 1 more arguments (`_store_everywhere`), so one loop writes every result.
Kernels are planned once per (fold, dtype, element count, devices): one program per chunk size, shared by the
devices. An eager call allocates the results and launches the plan on views of the partials, each device's
chunk from its own thread (engine/concurrent.py). Inside a JIT capture the call is recorded as
CALL(COPY arg ("fold", devices, plan), *results, *partials) and replayed by `launch` on the arena's handles
(engine/jit.py). `fold` answers None where this does not apply (the engine then copies the partials,
engine/collective.py).
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, concurrent, profile
from tolk_core.engine.compile import compile_linear, kernel_vals
from tolk_core.engine.run import capturing, run_linear
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.runtime import Allocator

# below this many bytes a fold runs its devices' chunks one after another on the calling thread: handing a
# chunk to another thread costs tens of microseconds (hundreds on a loaded machine), more than its work
CONCURRENT_BYTES = 1 << 20
Build = Callable[[list[UOp]], UOp]  # the fold of per-device values, in device order
# a chunk's kernel: (program, global size, local size, values, argument order: i >= 0 partial i, -1 - j the
# result of device j)
Kernel = tuple[Any, Any, Any, tuple[int, ...], tuple[int, ...]]
Chunk = tuple[tuple[int, int], Kernel]  # one device's (lo, hi) elements and its kernel
Plan = tuple[Chunk, ...]  # one chunk per device, in device order (devices past the element count get none)
Ref = tuple[Allocator, Any]  # a buffer as (its device's allocator, its handle)
# plans by (fold, dtype, element count, devices, allocator ids), with weak references that tell a plan made
# for allocators since dropped (a registry reset reopens the devices) from one for the allocators of now
_plans: dict[tuple, tuple[list[weakref.ref], Plan | None]] = {}
_host_backed: weakref.WeakKeyDictionary[Allocator, bool] = weakref.WeakKeyDictionary()


def _is_host(alloc: Allocator) -> bool:
    """Whether `alloc` hands out host memory (asked once of a one-byte allocation: `host_memory` takes a
    handle, and a capture has none yet)."""
    if (hit := _host_backed.get(alloc)) is None:
        probe = alloc.alloc(1)
        hit = _host_backed[alloc] = alloc.host_memory(probe) is not None
        alloc.free(probe, 1)
    return hit


def _peers(allocs: Sequence[Allocator]) -> bool:
    """Whether every one of `allocs` may read and write every other's memory in place, all of it host memory."""
    return all(a is b or a.reads_peer(b) for a in allocs for b in allocs) and all(_is_host(a) for a in allocs)


def _store_everywhere(sink: UOp, extra: int) -> UOp | None:
    """Kernel AST `sink` with its one store repeated into `extra` new PARAMs (numbered after its own), in
    the same loop; None where the kernel is not one store into a PARAM."""
    nodes = sink.toposort()
    stores = [u for u in nodes if u.op is Op.STORE]
    if len(stores) != 1 or stores[0].src[0].op is not Op.INDEX or stores[0].src[0].src[0].op is not Op.PARAM:
        return None
    store = stores[0]
    index, param = store.src[0], store.src[0].src[0]
    tops = [s for s in sink.src if store in s.toposort()]  # what closes the store's loops (END), or the store
    if len(tops) != 1:
        return None
    first = 1 + max(u.arg for u in nodes if u.op is Op.PARAM)
    more = [tops[0].substitute({store: store.replace(src=(index.replace(src=(param.replace(arg=first + k),
                                                                               *index.src[1:])), *store.src[1:]))})
            for k in range(extra)]
    return sink.replace(src=(*sink.src, *more))


def _kernel(device: str, dtype: DType, size: int, n: int, own: int, build: Build) -> Kernel | None:
    """Device `own`'s fold of `n` values of `size` elements as one compiled kernel storing into every
    device's result; None when the fold is not one kernel reading the values and storing the result once."""
    holders = [buffers.new_buffer(device, size, dtype) for _ in range(n)]
    linear, (out,), var_vals = schedule(target_for(device), [build(holders)])
    if len(linear.src) != 1 or var_vals:
        return None
    call = linear.src[0]
    slots = {h: i for i, h in enumerate(holders)} | {out: -1 - own}
    if any(a not in slots for a in call.src[1:]) or (sink := _store_everywhere(call.src[0], n - 1)) is None:
        return None
    others = [buffers.new_buffer(device, size, dtype) for _ in range(n - 1)]
    (prg, ks), = compile_linear(linear.replace(src=(call.replace(src=(sink, *call.src[1:], *others)),)))
    order = (*(slots[a] for a in call.src[1:]), *(-1 - j for j in range(n) if j != own))
    return prg, ks.launch_dims({}), ks.local_size, kernel_vals(ks, {}), order


def _plan(devices: Sequence[str], dtype: DType, numel: int, build: Build) -> Plan | None:
    """Each device's chunk and fold kernel (devices past the element count get none)."""
    step = -(-numel // len(devices))  # ceil: the last devices' chunks may be shorter, or empty
    chunks = []
    for i, d in enumerate(devices):
        lo, hi = min(i * step, numel), min((i + 1) * step, numel)
        if lo == hi:
            break
        if (k := _kernel(d, dtype, hi - lo, len(devices), i, build)) is None:
            return None
        chunks.append(((lo, hi), k))
    return tuple(chunks)


def _planned(key: tuple, devices: Sequence[str], allocs: list[Allocator], dtype: DType, numel: int,
             build: Build) -> Plan | None:
    """The plan of this fold, made on first use per (fold, dtype, size, devices, allocators)."""
    full = (*key, dtype, numel, tuple(devices), tuple(id(a) for a in allocs))
    if (hit := _plans.get(full)) is None or any(r() is not a for r, a in zip(hit[0], allocs, strict=True)):
        hit = _plans[full] = ([weakref.ref(a) for a in allocs], _plan(devices, dtype, numel, build))
    return hit[1]


def _work(chunk: Chunk, outs: Sequence[Ref], parts: Sequence[Ref], itemsize: int) -> None:
    """One device's part: its chunk of every partial folded into its chunk of every result."""
    (lo, hi), (prg, gs, ls, vals, order) = chunk
    off, nbytes = lo * itemsize, (hi - lo) * itemsize
    refs = [outs[-1 - s] if s < 0 else parts[s] for s in order]
    prg(*(a.offset(h, off, nbytes) for a, h in refs), global_size=gs, local_size=ls, vals=vals)


def launch(plan: Plan, devices: Sequence[str], outs: Sequence[Ref], parts: Sequence[Ref], itemsize: int) -> None:
    """Run `plan`: the results `outs` (one per device) folded from the partials `parts`, each device's chunk
    from its own thread where the chunks are worth a thread's wake-up; returns when every chunk is done (the
    caller settled the launches that compute the partials)."""
    works = [functools.partial(_work, chunk, outs, parts, itemsize) for chunk in plan]
    if plan and (plan[0][0][1] - plan[0][0][0]) * len(devices) * itemsize >= CONCURRENT_BYTES:
        with concurrent.together():
            for d, w in zip(devices, works, strict=False):
                concurrent.defer(d, w)
            concurrent.settle()  # also inside an enclosing together(): the results are read next
    else:
        for w in works:
            w()
    GlobalCounters.kernels_launched += len(plan)
    GlobalCounters.allreduces_direct += 1


def fold(partials: Sequence[UOp], devices: Sequence[str], key: tuple, build: Build) -> list[UOp] | None:
    """The fold `build` of `partials` (partials[i] realized on devices[i]) computed where they lie (see the
    module docstring), as a BUFFER per device; `key` names the fold (with `build`'s constants). Inside a JIT
    capture the fold is recorded for the replay. None where the devices cannot read each other's memory, a
    partial is not a whole buffer, or while a profile times launches (the caller, engine/collective.py, does
    not ask under DEBUG>=2 either, where every launch is timed and printed)."""
    if profile.profiling():
        return None
    bases = [buffers.base_buffer(p) for p in partials]
    if any(b is None or buffers.buffer_device(b) != d for b, d in zip(bases, devices, strict=True)):
        return None
    parts = [b for b in bases if b is not None]
    if capturing():  # no buffer is allocated yet: the devices' allocators answer
        from tolk_core.plugins import Device  # deferred: the registry sits above the runtime layer
        allocs = [Device[d].allocator for d in devices]
    else:
        concurrent.settle()  # the partials may still be being computed (an allreduce inside a sharded realize)
        rbs = [buffers.runtime_buffer(p).allocate() for p in parts]
        allocs = [rb.allocator for rb in rbs]
    if not _peers(allocs):
        return None
    dtype, numel = parts[0].dtype, parts[0].arg
    if (plan := _planned(key, devices, allocs, dtype, numel, build)) is None:
        return None
    outs = [buffers.new_buffer(d, numel, dtype) for d in devices]
    if capturing():  # recorded: the JIT replays it on its arenas (engine/jit.py)
        body = UOp(Op.COPY, dtypes.void, (), ("fold", tuple(devices), plan))
        run_linear(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (body, *outs, *parts)),)))
        return outs
    held = [buffers.runtime_buffer(o, a).allocate() for o, a in zip(outs, allocs, strict=True)]
    launch(plan, devices, [(a, b.handle) for a, b in zip(allocs, held, strict=True)],
           [(a, b.handle) for a, b in zip(allocs, rbs, strict=True)], dtype.itemsize)
    return outs
