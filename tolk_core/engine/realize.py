"""realize: compute values into storage, store into storage, perform copies and calls of kernels given as code.

The front end's entry points into execution; they take and return UOps (never Tensors: the front end points
its Tensors at the results itself).

- `realize(device, values)` computes each value into new storage and returns the storage view holding it,
  remembering it while the value lives (a value computed before is not computed again; storage is its own view).
- `assign(device, target, value)` stores `value` into the storage `target` views.
- `run_code_call(device, call)` runs a call of a kernel given as code.

Copies between devices happen here, before scheduling: the value is computed on its own device and its bytes
copied into new storage on the copy's device. A copy from a disk reads one run of the file's bytes. Scheduling
is `schedule` (cached by structure), compiling `compile`, launching `run`.
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Sequence

import numpy as np

from tolk_core.engine import buffers, collective, concurrent, hits
from tolk_core.engine.run import capturing, run_linear
from tolk_core.engine.schedule import concrete, lookup, schedule, schedule_stores, survey
from tolk_core.engine.target import is_disk, reading, target_for
from tolk_core.errors import DeviceMismatchError, DiskError, JitError, ShardingError
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.ir.uop import UOp
from tolk_core.runtime import ranks
from tolk_core.schedule import multi, placements, prepare
from tolk_core.schedule.merge import reads_precede_stores
from tolk_core.schedule.prepare import storage_base

# values already computed: value UOp -> the storage view holding it (lives as long as the value does)
_computed: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def _refuse_disk(device: str, u: UOp) -> None:
    """A disk runs no kernels: computing `u` there raises DiskError naming the device and the operation."""
    if is_disk(device):
        raise DiskError(f"{device} is a disk: a disk value can only be copied to another device (.to(...)), "
                        f"viewed or bitcast, but {u.op.name} was asked to be computed on it")


def _known(u: UOp, device: str) -> UOp | None:
    """The storage view an earlier realize computed `u` into, if that storage is on `device`. A value without a
    device of its own (a constant) may have been computed on another device: that storage is not this one's."""
    view = _computed.get(u)
    return view if view is not None and view.device == device else None


def realize(device: str, values: Sequence[UOp]) -> list[UOp]:
    """The storage view holding each of `values` (all on `device`), computing the ones not computed yet, in one
    schedule. A value that is storage (a BUFFER seen whole through reshapes) is its own view. On another rank's
    device (runtime/ranks.py) nothing is computed: each value gets a placeholder view, storage never allocated."""
    if ranks.is_remote(device):
        return [_placeholder(device, v) for v in values]
    out = [_known(v, device) or v for v in values]
    todo = list(dict.fromkeys(v for v in out if buffers.base_buffer(v) is None))
    if not todo:
        return out
    if (copies := _stored_copies(device, todo)) is not None:
        copied = dict(zip(todo, copies, strict=True))
        return [copied.get(v, v) for v in out]
    # reuse values computed by earlier realizes that these graphs still read
    sink = UOp(Op.SINK, dtypes.void, tuple(todo))
    first = survey(sink, device)  # one walk: what this realize and the schedule cache ask of the graph
    reads, seen = first.reads, first if not first.crosses else None
    # the values substituted are storage on this device: a graph that crossed no device before does not now
    if known := _known_in(first.nodes, device):
        sink, seen = sink.substitute(known, placements.carry_intent), None
    if first.crosses:
        sink = _copy_across_devices(device, sink)
    for u in sink.src:
        _refuse_disk(device, u)
    target = target_for(device)
    if hits.allowed() and (hit := lookup("values", target, sink, seen)) is not None and \
            (launched := hits.launch(device, hit)) is not None:  # an eager step's realizes: docs/performance.md
        outs, var_vals = launched, hit.var_vals
    else:
        linear, outs, var_vals = schedule(target, sink.src)
        run_linear(linear, var_vals=var_vals)
    views: dict[UOp, UOp] = {}
    for orig, buf in zip(todo, outs, strict=True):
        views[orig] = buffers.view_as(buf, tuple(concrete(s, var_vals) for s in orig.tensor_shape))
        # a capture fills the buffer only at replay, and each replay overwrites it. A value that reads no
        # storage (a broadcast constant) is not remembered: its nodes are interned, shared by every graph that
        # holds the same constant, and those graphs would read this storage instead of the constant
        if not capturing() and orig in reads:
            _computed[orig] = views[orig]
    return [views.get(v, v) for v in out]


def _stored_copies(device: str, todo: list[UOp]) -> list[UOp] | None:
    """New storage holding each of `todo`, each filled by one device copy and no schedule, when every one is a
    copy of stored data on `device` read whole and in order (DETACH or CONTIGUOUS over a BUFFER seen through
    reshapes: the leaf `x.detach().requires_grad_()` makes, `x.contiguous()` of storage). None otherwise, and where a
    schedule must run: while a JIT captures (each replay repeats the copy, a kernel of the capture), inside a
    profile or at DEBUG >= 2 (a launch each, as they report). Not remembered as computed: two detaches of one
    tensor stay two leaves with storage of their own."""
    sources = []
    for v in todo:  # the graphs first: most realizes compute something, and the checks below read settings
        u = v
        while u.op in _COPY_OPS:
            u = u.src[0]
        if u is v or (buf := buffers.base_buffer(u)) is None or buf.dtype != v.dtype or \
                buffers.buffer_device(buf) != device:
            return None
        shape = tuple(s for s in v.tensor_shape if isinstance(s, int))
        if len(shape) != len(v.tensor_shape):
            return None
        sources.append((buf, shape))
    if capturing() or not hits.allowed() or is_disk(device):
        return None
    out: list[UOp] = []
    for v, (buf, shape) in zip(todo, sources, strict=True):
        new = buffers.new_buffer(device, buf.arg, v.dtype)
        buffers.copy_buffer(new, buf)
        out.append(buffers.view_as(new, shape))
    return out


_COPY_OPS = frozenset({Op.DETACH, Op.CONTIGUOUS})


def _known_in(nodes: list[UOp], device: str) -> dict[UOp, UOp]:
    """The nodes of `nodes` an earlier realize computed into storage on `device`, with that storage's view.
    The values remembered are few (a value is dropped with its last reader, and a realized tensor holds its
    storage, not its value): the smaller side is walked."""
    if len(_computed) < len(nodes):
        present = set(nodes)
        return {u: view for u, view in list(_computed.items()) if u in present and view.device == device}
    return {u: k for u in nodes if (k := _known(u, device)) is not None}


def _placeholder(device: str, v: UOp) -> UOp:
    """Value `v` of another rank's `device` as storage this process never allocates (a BUFFER of its size)."""
    if (base := buffers.base_buffer(v)) is not None and buffers.buffer_device(base) == device:
        return v
    shape = tuple(s for s in v.tensor_shape if isinstance(s, int))
    if len(shape) != len(v.tensor_shape):
        raise ShardingError(f"a value of symbolic shape {v.tensor_shape} on {device}: tuples spanning ranks take "
                            "concrete shapes (docs/distributed.md, limits)")
    return buffers.view_as(buffers.new_buffer(device, math.prod(shape), v.dtype), shape)


def _copy_across_devices(device: str, sink: UOp) -> UOp:
    """Every COPY of a value living on another device, done: the value is computed on its own device and its
    bytes copied into new storage on the COPY's device (see docs/prepare.md, copies). A COPY to the value's
    own device is the value (a prepare_rangeify rule). A copy from a disk reads one run of the file's bytes;
    its views are applied on the target, and a store across devices stores a copy of its value (prepare's
    rules, applied here first). A graph without COPYs whose storage is all on `device` (almost every graph)
    has none of these and is returned as it is."""
    if not survey(sink, device).crosses:
        return sink
    nodes = sink.toposort()
    if any(u.op is Op.MULTI for u in nodes):  # a gather of sharded values (docs/multi-device.md)
        sink = lower_multi(sink)
        nodes = sink.toposort()
    target = reading(target_for(device), nodes)
    sink = graph_rewrite(sink, prepare.pm_before_copies, ctx=target, name="disk copies, stores across devices")
    done: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u.op is not Op.COPY:
            continue
        src, dest = u.src[0].substitute(done) if done else u.src[0], u.src[1].arg
        if (home := src.device) is None or home == dest:
            continue
        if ranks.is_remote(dest):  # that rank makes its own copy
            done[u] = _placeholder(dest, src)
            continue
        if ranks.is_remote(home):
            raise DeviceMismatchError(f"a copy from {home} to {dest}: this process (rank {ranks.place()[0]}) cannot "
                                      "read another rank's data; reduce it first (an allreduce, tolk_core."
                                      "distributed.all_reduce) or read a replicated value's own shard "
                                      "(docs/distributed.md)")
        if capturing():  # recorded as a COPY call the replay performs (docs/jit.md, copies)
            done[u] = _captured_copy(src, home, dest)
            continue
        if not is_disk(home):  # computed on its device, then copied buffer to buffer
            buf, var_vals = _stored_on(src, home)
            copied = buffers.new_buffer(dest, buf.arg, buf.dtype)
            buffers.copy_buffer(copied, buf)
            done[u] = buffers.view_as(copied, tuple(concrete(s, var_vals) for s in src.tensor_shape))
            continue
        host, shape, var_vals, dt = _bytes_of(src, home)
        copied = buffers.new_buffer(dest, host.size // dt.itemsize, dt)
        if host.size:
            buffers.runtime_buffer(copied).copyin(host.data)
        done[u] = buffers.view_as(copied, tuple(concrete(s, var_vals) for s in shape))
    return sink.substitute(done) if done else sink


def _stored_on(src: UOp, home: str) -> tuple[UOp, dict[str, int]]:
    """The BUFFER holding value `src` on its device `home` (computed there first when it is not storage; inside
    a capture that is recorded), and the Variable values it was computed with."""
    var_vals: dict[str, int] = {}
    if (buf := buffers.base_buffer(src)) is None:
        linear, (buf,), var_vals = schedule(target_for(home), [src])
        run_linear(linear, var_vals=var_vals)
    return buf, var_vals


def _captured_copy(src: UOp, home: str, dest: str) -> UOp:
    """Inside a JIT capture: `src` computed on `home` (recorded) and a COPY call into new storage on `dest`
    recorded after it; the new storage's view. A copy from a disk is refused (it reads the file now)."""
    if is_disk(home):
        raise JitError(f"a copy from the disk {home} inside a jitted function: load the data before calling it")
    buf, var_vals = _stored_on(src, home)
    copied = buffers.new_buffer(dest, buf.arg, buf.dtype)
    run_linear(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (UOp(Op.COPY, dtypes.void), copied, buf)),)))
    return buffers.view_as(copied, tuple(concrete(s, var_vals) for s in src.tensor_shape))


def lower_multi(sink: UOp) -> UOp:
    """`sink` with its ops pushed into the shards of the MULTIs they read (`schedule.multi.shard_graph`) and
    its allreduces run (`collective.run_allreduces`): what is left is per-device work and copies."""
    return collective.run_allreduces(realize, multi.shard_graph(sink))


def realize_sharded(devices: tuple[str, ...], values: Sequence[UOp]) -> list[UOp]:
    """Each of `values` (sharded over `devices`: graphs over MULTIs) computed shard by shard, as a MULTI of the
    storage views holding its shards; a value that reads no MULTI (a constant) is replicated. One schedule per
    device; the kernels of equal shape share one compiled program."""
    sink = lower_multi(UOp(Op.SINK, dtypes.void, tuple(values)))
    roots = [r if r.op is Op.MULTI else multi.multi([multi.copy_to(r, d) for d in devices], devices, None, None)
             for r in sink.src]
    for r in roots:
        if r.arg[0] != devices:
            raise DeviceMismatchError(f"a value sharded over {r.arg[0]} was asked for on {devices}")
    with concurrent.together():  # each device's kernels from its own thread (docs/multi-device.md)
        per_device = [realize(d, [r.src[i] for r in roots]) for i, d in enumerate(devices)]
    return [r if all(v is s for v, s in zip((views[j] for views in per_device), r.src, strict=True)) else
            multi.multi([views[j] for views in per_device], devices, r.arg[1], r.arg[2]) for j, r in enumerate(roots)]


def assign_sharded(devices: tuple[str, ...], target: UOp, value: UOp) -> None:
    """Store `value` into the storage of sharded `target` (a MULTI of storage views over `devices`), each
    shard the part of `value` in `target`'s layout, its allreduces run first. A shard that reads only its own
    device is stored directly; when some shard reads another device (a copy), every shard is computed first,
    so that no store changes what another device still reads."""
    assign_sharded_all(devices, [(target, value)])


def assign_sharded_all(devices: tuple[str, ...], pairs: Sequence[tuple[UOp, UOp]]) -> None:
    """`assign_sharded` of every (target, value) pair in one pass: the values' graph pushed into the shards
    and its allreduces run once, then one schedule per device storing every pair's shard there (an optimizer
    step over replicated weights: docs/multi-device.md). The caller makes sure, as for `assign_all`, that no
    value reads another pair's destination storage and that the destinations are distinct storage."""
    roots = lower_multi(UOp(Op.SINK, dtypes.void, tuple(v for _, v in pairs))).src
    cuts = []
    for (target, _), root in zip(pairs, roots, strict=True):
        _, axis, bounds = target.arg
        parts = multi.cut(root, devices, axis, bounds, "assign")
        if not all(u.op is not Op.COPY and (u.op is not Op.BUFFER or u.device == d)
                   for d, p in zip(devices, parts, strict=True) for u in p.toposort()):
            parts = list(realize_sharded(devices, [multi.multi(parts, devices, axis, bounds)])[0].src)
        cuts.append(parts)
    for i, d in enumerate(devices):
        assign_all(d, [(target.src[i], parts[i]) for (target, _), parts in zip(pairs, cuts, strict=True)])


def _bytes_of(src: UOp, device: str) -> tuple[np.ndarray, tuple, dict[str, int], DType]:
    """The bytes of value `src` on its own `device` (computed first when it is not storage), as a host array,
    with its shape, the Variable values it was computed with, and its dtype."""
    if (run := prepare.disk_run(src)) is not None and is_disk(device):
        disk, offset, nbytes, dt = run
        host = np.empty(nbytes, np.uint8)
        if nbytes:
            buffers.runtime_buffer(disk).allocate().view(nbytes, dtypes.uint8, offset).copyout(host.data)
        return host, tuple(src.tensor_shape), {}, dt
    _refuse_disk(device, src)
    var_vals: dict[str, int] = {}
    if (buf := buffers.base_buffer(src)) is None:
        linear, (buf,), var_vals = schedule(target_for(device), [src])
        run_linear(linear, var_vals=var_vals)
    host = np.empty(buf.arg * buf.dtype.itemsize, np.uint8)
    concurrent.settle()
    if host.size:
        buffers.runtime_buffer(buf).copyout(host.data)
    return host, tuple(src.tensor_shape), var_vals, buf.dtype


def assign(device: str, target: UOp, value: UOp) -> None:
    """Store `value` into the storage that `target` views (a BUFFER seen through movements and bitcasts).

    prepare_rangeify refuses broadcast destinations and materialises a value that reads the destination
    through another view first. Cached results that read the storage are forgotten.
    """
    assign_all(device, [(target, value)])


def assign_all(device: str, pairs: Sequence[tuple[UOp, UOp]], cross_reads: bool = False) -> bool:
    """`assign` of every (target, value) pair, in one schedule: every value is read before any store lands, so
    the caller makes sure that no value reads another pair's destination storage, and that the destinations
    are distinct storage (a value reading its own destination is `assign`'s case). Nothing is stored on another
    rank's device (runtime/ranks.py): that rank stores its own.

    `cross_reads`: values may read other pairs' destinations. The schedule keeps every such read before the
    store it reads only when it merges the kernels involved (schedule/merge.py); when it does not, nothing is
    run and the result is False (the caller stores another way). True otherwise."""
    if ranks.is_remote(device):
        return True
    for _, value in pairs:
        _refuse_disk(device, value)
    sink = UOp(Op.SINK, dtypes.void, tuple(UOp(Op.STORE, dtypes.void, (target, value)) for target, value in pairs))
    first = survey(sink, device)
    seen = first if not first.crosses else None
    if first.crosses:
        sink = _copy_across_devices(device, sink)
    written = {storage_base(target) for target, _ in pairs}
    if hits.allowed() and (hit := lookup("stores", target_for(device), sink, seen)) is not None:
        if cross_reads and not hits.reads_precede_stores_at(hit, written):
            return False
        if hits.launch(device, hit) is not None:
            _forget(written)
            return True
    linear, _, var_vals = schedule_stores(target_for(device), sink)
    if cross_reads and not reads_precede_stores_in(linear, written):
        return False
    run_linear(linear, var_vals=var_vals)
    _forget(written)
    return True


def reads_precede_stores_in(linear: UOp, destinations: set[UOp]) -> bool:
    """`merge.reads_precede_stores` of a LINEAR's kernel calls (False when it calls anything but kernels)."""
    calls = [(c.src[0], c.src[1:]) for c in linear.src]
    return all(c.op is Op.CALL and ast.op is Op.SINK for c, (ast, _) in zip(linear.src, calls, strict=True)) and \
        reads_precede_stores(calls, destinations)


def _forget(written: set[UOp]) -> None:
    """Forget the computed values that read storage in `written` (their storage now holds other data)."""
    for u in [u for u in list(_computed) if any(b in written for b in u.toposort())]:
        del _computed[u]


def run_code_call(device: str, call: UOp) -> None:
    """Run a call of a kernel given as code (`ir.calls.KernelCode`) now. prepare's `code_call_arguments` puts
    its arguments in the form the call takes: values to materialise are computed into new storage first, and a
    run of storage that starts elsewhere is passed as a view at its byte offset. A run the device cannot view
    (OpenCL sub-buffers start on CL_DEVICE_MEM_BASE_ADDR_ALIGN) goes through new storage: copied in, and
    stored back after the call when the call writes it. Cached results that read storage the call writes are
    forgotten."""
    call = graph_rewrite(call, prepare.pm_code_calls, name="a kernel given as code: its arguments")
    align = target_for(device).view_alignment or 1
    bounced = [a for a in call.src[1:] if a.op is Op.SHRINK and (a.arg[0][0] * a.dtype.itemsize) % align]
    staged = [a for a in call.src[1:] if a.op not in (Op.BUFFER, Op.SHRINK) or a in bounced]
    linear, outs, var_vals = schedule(target_for(device), staged) if staged else (None, [], {})
    if linear is not None:
        run_linear(linear, var_vals=var_vals)
    made = dict(zip(staged, outs, strict=True))
    args = [made[a] if a in made else a if a.op is Op.BUFFER else
            UOp(Op.SLICE, a.dtype, (a.src[0],), (a.arg[0][0] * a.dtype.itemsize, a.arg[0][1] - a.arg[0][0], None))
            for a in call.src[1:]]
    run_linear(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (call.src[0], *args)),)))
    written = call.src[0].arg.written
    for a, w in zip(call.src[1:], written, strict=True):
        if w and a in bounced:
            assign(device, a, made[a])
    _forget({storage_base(a) for a, w in zip(call.src[1:], written, strict=True) if w})


def allreduce(partials: Sequence[UOp], op: str, how: str | None = None) -> list[UOp]:
    """The partial values `partials` (one per device, of one shape) folded by `op` ("sum", "max", "min",
    "prod", "mean"), the result as a storage view on each of their devices; `how` "naive" or "ring" forces an
    algorithm (else `collective.algorithm` picks one by size and device count)."""
    devices: list[str] = []
    for p in partials:
        if not isinstance(p.device, str):
            raise ShardingError(f"allreduce: each partial must live on one device, got one on {p.device!r}")
        devices.append(p.device)
    return collective.allreduce(realize, partials, devices, op, how)
