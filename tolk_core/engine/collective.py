"""collective: the allreduce of per-device partial values, naive or ring (docs/multi-device.md).

`allreduce(realize, partials, devices, op)` folds the partials `partials[i]` (values of one shape and dtype,
partial[i] on devices[i]) by `op` and returns the result on every device, as storage views. `realize(device,
values)` is the engine's realize (passed in: this module sits below realize.py). Copies between devices go
through the host (`_copy_across_devices`), and every fold is an ordinary kernel, so its program is compiled
once per (shape, renderer) and shared by the devices.

- naive: every device receives every partial and folds them in device order, so that every replica holds the
  same bits (a float sum depends on its order).
- ring: the flattened value is cut into one chunk per device; a reduce-scatter (n-1 steps, device i passing
  its running chunk to device i+1) leaves each chunk folded on one device, and an allgather (n-1 steps)
  passes the folded chunks round; each device then joins its chunks. Used for more than 2 devices and more
  than RING_ALLREDUCE_THRESHOLD elements, where each link carries 2(n-1)/n of the value instead of (n-1).
- across ranks: when the devices are those of several processes (runtime/ranks.py, one device per rank), the
  local partial's bytes go through the joined process group's allreduce (tolk_core.collectives.world); each
  rank stores the result on its own device, and another rank's result is a placeholder it never computes.
  Inside a JIT capture this is one recorded CALL(COPY arg ("allreduce", op), out, partial), replayed through
  a persistent allreduce (engine/jit.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tolk_core import config
from tolk_core.collectives.world import world
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, concurrent, direct_fold
from tolk_core.engine.run import capturing, run_linear
from tolk_core.errors import ShardingError
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.runtime import ranks
from tolk_core.schedule.multi import concat, copy_to, shrink_axis, split_bounds

Realize = Callable[[str, Sequence[UOp]], list[UOp]]
# the folds `allreduce` takes by name; "mean" is the sum divided by the device count
FOLDS: dict[str, Op | str] = {"sum": Op.ADD, "max": Op.MAX, "min": "min", "prod": Op.MUL, "mean": Op.ADD}


def _fold(op: Op | str, a: UOp, b: UOp) -> UOp:
    return a.minimum(b) if op == "min" else a.alu(op, b)  # type: ignore[arg-type]


def algorithm(n_devices: int, numel: int) -> str:
    """The algorithm an allreduce of `numel` elements over `n_devices` uses: "ring" for more than 2 devices
    and more than RING_ALLREDUCE_THRESHOLD elements (at least one per device), else "naive"."""
    if n_devices > 2 and numel > config.get("RING_ALLREDUCE_THRESHOLD") and numel >= n_devices:
        return "ring"
    return "naive"


def allreduce(realize: Realize, partials: Sequence[UOp], devices: Sequence[str], op: Op | str,
              how: str | None = None) -> list[UOp]:
    """`partials` folded by `op` (Op.ADD, Op.MAX, Op.MUL, or a name of FOLDS), the result on each of `devices`
    as a storage view; `how` ("naive", "ring") overrides `algorithm`. Raises ShardingError for an unknown fold."""
    mean = op == "mean"
    if isinstance(op, str):
        if op not in FOLDS:
            raise ShardingError(f"allreduce op {op!r} is not one of {', '.join(FOLDS)}")
        op = FOLDS[op]
    shape = tuple(partials[0].tensor_shape)
    numel = partials[0].size
    assert isinstance(numel, int)
    if any(ranks.is_remote(d) for d in devices):
        how = "ranks"
    how = how or algorithm(len(devices), numel)
    if how == "ring" and numel < len(devices):
        how = "naive"  # a ring needs a chunk per device
    GlobalCounters.allreduces += 1
    if timed := config.get("DEBUG") >= 2:  # every launch timed and printed: the copying ways below
        print(f"allreduce {how} {op if isinstance(op, str) else op.name} {partials[0].dtype.name}{shape} over "
              f"{len(devices)} devices")
    if how == "naive" and not timed and (direct := _direct(partials, devices, op, mean)) is not None:
        # stored partials (the direct fold's condition) have a concrete shape
        return [buffers.view_as(b, shape) for b in direct]  # type: ignore[arg-type]
    outs = _naive(realize, partials, devices, op) if how == "naive" else \
        _ranks(realize, partials, devices, op) if how == "ranks" else _ring(realize, partials, devices, op)
    if mean:
        outs = [realize(d, [_mean(o, len(devices))])[0] for d, o in zip(devices, outs, strict=True)]
    return outs


def _mean(total: UOp, n: int) -> UOp:
    """`total` divided by the device count `n` (for integers C's division, toward zero)."""
    c = UOp.const(total.dtype, float(n) if dtypes.is_float(total.dtype) else n)
    return total.alu(Op.FDIV if dtypes.is_float(total.dtype) else Op.IDIV, _broadcast(c, tuple(total.tensor_shape)))


def _direct(partials: Sequence[UOp], devices: Sequence[str], op: Op | str, mean: bool) -> list[UOp] | None:
    """The naive fold computed on each device straight from the others' memory (engine/direct_fold.py), the
    partials in device order as `_naive` folds them; None where the devices cannot read each other's."""
    def build(values: list[UOp]) -> UOp:
        acc = values[0]
        for v in values[1:]:
            acc = _fold(op, acc, v)
        return _mean(acc, len(values)) if mean else acc
    return direct_fold.fold(partials, devices, ("naive", op, mean), build)


def _broadcast(c: UOp, shape: tuple) -> UOp:
    """Constant `c` in `shape`."""
    if not shape:
        return c
    return UOp(Op.EXPAND, c.dtype, (UOp(Op.RESHAPE, c.dtype, (c,), (1,) * len(shape)),), shape)


def _naive(realize: Realize, partials: Sequence[UOp], devices: Sequence[str], op: Op | str) -> list[UOp]:
    """Every partial copied to every device and folded there, in device order (equal bits everywhere)."""
    outs = []
    for d in devices:
        acc = copy_to(partials[0], d)
        for p in partials[1:]:
            acc = _fold(op, acc, copy_to(p, d))
        outs.append(realize(d, [acc])[0])
    return outs


RANK_OPS = {Op.ADD: "sum", Op.MAX: "max", "min": "min"}
"""The folds a process group reduces (ProcessGroup.allreduce's ops), by the fold this module names."""


def _ranks(realize: Realize, partials: Sequence[UOp], devices: Sequence[str], op: Op | str) -> list[UOp]:
    """The fold across processes: this rank's partial through the process group, the other ranks' results
    placeholders. Needs exactly one of `devices` on this process."""
    local = [i for i, d in enumerate(devices) if not ranks.is_remote(d)]
    if len(local) != 1:
        raise ShardingError(f"an allreduce over {tuple(devices)} spans processes, so it needs exactly one device of "
                            f"this rank (rank {ranks.place()[0]}) in the tuple, got {len(local)}: name one device "
                            "per rank (tolk_core.distributed.devices)")
    if (name := RANK_OPS.get(op)) is None:
        raise ShardingError(f"an allreduce across processes folds by {', '.join(RANK_OPS.values())} (and mean), "
                            f"not {op if isinstance(op, str) else op.name}")
    i = local[0]
    part = realize(devices[i], [partials[i]])[0]
    if (src := buffers.base_buffer(part)) is None:
        part = realize(devices[i], [UOp(Op.CONTIGUOUS, part.dtype, (part,))])[0]
        src = buffers.base_buffer(part)
        assert src is not None
    out = buffers.new_buffer(devices[i], src.arg, src.dtype)
    if capturing():  # replayed through a persistent allreduce (engine/jit.py)
        run_linear(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (
            UOp(Op.COPY, dtypes.void, (), ("allreduce", name)), out, src)),)))
    else:
        host = np.empty(src.arg, dtypes.to_np(src.dtype))
        if host.size:
            buffers.runtime_buffer(src).copyout(host.reshape(-1).view(np.uint8).data)
        total = world().allreduce(host, name, out=host)  # in place: host is this call's own array
        if total.size:
            buffers.runtime_buffer(out).copyin(total.reshape(-1).view(np.uint8).data)
    shape = tuple(s for s in partials[i].tensor_shape if isinstance(s, int))  # concrete (realize: _placeholder)
    return [buffers.view_as(out, shape) if j == i else realize(d, [p])[0]
            for j, (d, p) in enumerate(zip(devices, partials, strict=True))]


def _ring(realize: Realize, partials: Sequence[UOp], devices: Sequence[str], op: Op | str) -> list[UOp]:
    """Reduce-scatter then allgather over the ring of devices, one chunk of the flattened value per device."""
    n, shape = len(devices), tuple(partials[0].tensor_shape)
    numel = partials[0].size
    assert isinstance(numel, int)
    bounds = split_bounds(numel, n)
    flat = [UOp(Op.RESHAPE, p.dtype, (p,), (numel,)) if shape != (numel,) else p for p in partials]
    chunks = [[shrink_axis(f, 0, lo, hi) for lo, hi in bounds] for f in flat]  # chunks[device][chunk]
    for step in range(n - 1):  # reduce-scatter: after it device i holds chunk (i + 1) % n folded
        sent = [(i, (i - step) % n) for i in range(n)]
        new = [((i + 1) % n, k, _fold(op, chunks[(i + 1) % n][k], copy_to(chunks[i][k], devices[(i + 1) % n])))
               for i, k in sent]
        for dst, k, v in new:
            chunks[dst][k] = realize(devices[dst], [v])[0]
    for step in range(n - 1):  # allgather: the folded chunks passed round
        sent = [(i, (i + 1 - step) % n) for i in range(n)]
        moved = [((i + 1) % n, k, copy_to(chunks[i][k], devices[(i + 1) % n])) for i, k in sent]
        for dst, k, v in moved:
            chunks[dst][k] = realize(devices[dst], [v])[0]
    outs = []
    for d, cs in zip(devices, chunks, strict=True):
        whole = concat(cs, 0, bounds)
        outs.append(realize(d, [UOp(Op.RESHAPE, whole.dtype, (whole,), shape) if shape != (numel,) else whole])[0])
    return outs


def _allreduces_below(nodes: Sequence[UOp]) -> dict[UOp, frozenset[UOp]]:
    """The ALLREDUCE nodes each of `nodes` (a toposort, sources first) reads, itself included: one pass, where
    asking each group's sources for their own toposort walked the backward graph once per gradient."""
    below: dict[UOp, frozenset[UOp]] = {}
    none: frozenset[UOp] = frozenset()
    for u in nodes:
        acc = frozenset((u,)) if u.op is Op.ALLREDUCE else none
        for s in u.src:
            if below[s] and not below[s] <= acc:
                acc = acc | below[s]
        below[u] = acc
    return below


def run_allreduces(realize: Realize, sink: UOp) -> UOp:
    """`sink` with each group of ALLREDUCE nodes (one per device over the same partials) computed: the partials
    realized on their devices, folded by `allreduce`, and each node replaced by the view of its device's result.
    Groups run in waves, sources first: a wave holds every group whose partials read no fold still to run, and
    each device computes the partials of a whole wave in one schedule (the gradients of a data-parallel step
    share their forward and backward graph)."""
    groups: dict[tuple, list[UOp]] = {}
    nodes = sink.toposort()
    for u in nodes:
        if u.op is Op.ALLREDUCE:
            groups.setdefault(u.src, []).append(u)
    if not groups:
        return sink
    below = _allreduces_below(nodes)
    done: dict[UOp, UOp] = {}
    while todo := [g for g in groups if groups[g][0] not in done]:
        pending = {n for g in todo for n in groups[g]}
        wave = [g for g in todo if not any(below[s] & pending for s in g)]
        per_device: dict[str, list[UOp]] = {}  # partial i of a group is computed on the group's devices[i]
        for g in wave:
            for d, s in zip(groups[g][0].arg[1], g, strict=True):
                per_device.setdefault(d, []).append(s.substitute(done) if done else s)
        with concurrent.together():  # the partials of each device computed from its own thread
            views = {d: iter(realize(d, ps)) for d, ps in per_device.items()}
        for g in wave:
            nodes = groups[g]
            op, devs, _ = nodes[0].arg
            results = allreduce(realize, [next(views[d]) for d in devs], devs, op)
            for u in nodes:
                done[u] = results[u.arg[2]]
    return sink.substitute(done) if done else sink
