"""direct_fold: the naive allreduce between devices whose kernels read each other's memory in place
(docs/multi-device.md, the allreduce).

Where every device's allocator says it may take the others' handles as kernel arguments and that its
memory is host memory (`Allocator.reads_peer`, `Allocator.host_memory`: virtual CPU devices), nothing is
copied before the fold. The value is cut into one chunk per device (ceil(size / n) elements, the last
ones shorter); device `i` folds chunk `i` of every partial, read where it lies, into chunk `i` of its
result, and copies that chunk into the other devices' results (host memory to host memory). Each element is
folded once, in device order as the naive allreduce folds it, so every device holds the same bits, and the
work is the fold of the value once plus a copy of it per other device (the naive exchange folds it once per
device after copying every partial everywhere).

The fold kernels are planned once per (fold, dtype, chunk size, devices): the fold graph over placeholder
buffers scheduled and compiled per device (one program per chunk size, shared by the devices). A call
allocates the results and launches the planned kernels on views of the partials, each device's work from
its own thread (engine/concurrent.py). `fold` answers None where this does not apply (the engine then
copies the partials, engine/collective.py).
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, concurrent, profile
from tolk_core.engine.compile import compile_linear, kernel_vals
from tolk_core.engine.run import capturing
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.ir.dtype import DType
from tolk_core.ir.uop import UOp
from tolk_core.runtime import Buffer

# below this many bytes a fold runs its devices' chunks one after another on the calling thread: handing a
# chunk to another thread costs tens of microseconds (hundreds on a loaded machine), more than its work
CONCURRENT_BYTES = 1 << 20
Build = Callable[[list[UOp]], UOp]  # the fold of per-device values, in device order
# one device's chunk: (lo, hi) elements, and its kernel: (program, global size, local size, values, argument
# order: -1 the result, i partial i)
Chunk = tuple[tuple[int, int], tuple[Any, Any, Any, tuple[int, ...], tuple[int, ...]]]
# plans by (fold, dtype, element count, devices, allocator ids), with weak references that tell a plan made
# for allocators since dropped (a registry reset reopens the devices) from one for the allocators of now
_plans: dict[tuple, tuple[list[weakref.ref], list[Chunk] | None]] = {}


def _peer_buffers(partials: Sequence[UOp]) -> list[Buffer] | None:
    """The runtime Buffers holding `partials` whole, where every device may read every other's in place and
    all of it is host memory."""
    bases = [buffers.base_buffer(p) for p in partials]
    if any(b is None for b in bases):
        return None
    rbs = [buffers.runtime_buffer(b).allocate() for b in bases if b is not None]
    allocs = [rb.allocator for rb in rbs]
    if not all(a is b or a.reads_peer(b) for a in allocs for b in allocs):
        return None
    return rbs if all(rb.allocator.host_memory(rb.handle) is not None for rb in rbs) else None


def _kernel(device: str, dtype: DType, size: int, n: int, build: Build) -> Any:
    """The fold of `n` values of `size` elements as one kernel on `device`, compiled, with its arguments'
    order; None when the fold is not one kernel reading the values and writing the result."""
    holders = [buffers.new_buffer(device, size, dtype) for _ in range(n)]
    linear, (out,), var_vals = schedule(target_for(device), [build(holders)])
    if len(linear.src) != 1 or var_vals:
        return None
    slots = {h: i for i, h in enumerate(holders)} | {out: -1}
    if any(a not in slots for a in linear.src[0].src[1:]):
        return None
    (prg, ks), = compile_linear(linear)
    return prg, ks.launch_dims({}), ks.local_size, kernel_vals(ks, {}), tuple(slots[a] for a in linear.src[0].src[1:])


def _plan(devices: Sequence[str], dtype: DType, numel: int, build: Build) -> list[Chunk] | None:
    """Each device's chunk and fold kernel (devices past the element count get none)."""
    step = -(-numel // len(devices))  # ceil: the last devices' chunks may be shorter, or empty
    chunks = []
    for i, d in enumerate(devices):
        lo, hi = min(i * step, numel), min((i + 1) * step, numel)
        if lo == hi:
            break
        if (k := _kernel(d, dtype, hi - lo, len(devices), build)) is None:
            return None
        chunks.append(((lo, hi), k))
    return chunks


def _work(chunk: Chunk, rbs: list[Buffer], outs: list[Buffer], i: int) -> None:
    """Device `i`'s part: its chunk of every partial folded into its chunk of `outs[i]`, that chunk copied into
    the other results."""
    (lo, hi), (prg, gs, ls, vals, slots) = chunk
    isz = rbs[0].dtype.itemsize
    off, nbytes = lo * isz, (hi - lo) * isz
    args = [(outs[i] if s < 0 else rbs[s]) for s in slots]
    prg(*(b.allocator.offset(b.handle, off, nbytes) for b in args), global_size=gs, local_size=ls, vals=vals)
    mine = _host(outs[i])[off:off + nbytes]
    for j, o in enumerate(outs):
        if j != i:  # numpy's copy lets the other devices' threads run meanwhile
            np.copyto(_host(o)[off:off + nbytes], mine)


def _host(b: Buffer) -> np.ndarray:
    """The bytes of host-memory Buffer `b` as a numpy array (`_peer_buffers` checked that they are)."""
    mv = b.allocator.host_memory(b.handle)
    assert mv is not None
    return np.frombuffer(mv, np.uint8)


def fold(partials: Sequence[UOp], devices: Sequence[str], key: tuple, build: Build) -> list[UOp] | None:
    """The fold `build` of `partials` (partials[i] realized on devices[i]) computed where they lie (see the
    module docstring), as a BUFFER per device; `key` names the fold (with `build`'s constants). None where the
    devices cannot read each other's memory, inside a JIT capture (it records copies), or while launches are
    timed (DEBUG>=2, a profile)."""
    if capturing() or profile.profiling() or config.get("DEBUG") >= 2:
        return None
    concurrent.settle()  # the partials may still be being computed (an allreduce inside a sharded realize)
    if (rbs := _peer_buffers(partials)) is None:
        return None
    dtype, numel = partials[0].dtype, rbs[0].size
    allocs = [rb.allocator for rb in rbs]
    full = (*key, dtype, numel, tuple(devices), tuple(id(a) for a in allocs))
    if (hit := _plans.get(full)) is None or any(r() is not a for r, a in zip(hit[0], allocs, strict=True)):
        hit = _plans[full] = ([weakref.ref(a) for a in allocs], _plan(devices, dtype, numel, build))
    if (chunks := hit[1]) is None:
        return None
    outs = [buffers.new_buffer(d, numel, dtype) for d in devices]
    held = [buffers.runtime_buffer(o, a).allocate() for o, a in zip(outs, allocs, strict=True)]
    # each device's chunk from its own thread, where the chunks are worth a thread's wake-up
    with concurrent.together() if numel * dtype.itemsize >= CONCURRENT_BYTES else contextlib.nullcontext():
        for i, (d, chunk) in enumerate(zip(devices, chunks, strict=False)):
            concurrent.defer(d, functools.partial(_work, chunk, rbs, held, i))
        concurrent.settle()  # the partials are read now, not after this returns
    GlobalCounters.kernels_launched += len(chunks)
    GlobalCounters.allreduces_direct += 1
    GlobalCounters.copies_direct += len(chunks) * (len(devices) - 1)
    return outs
