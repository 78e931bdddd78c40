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
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, concurrent, direct_fold
from tolk_core.errors import ShardingError
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
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
    how = how or algorithm(len(devices), numel)
    if how == "ring" and numel < len(devices):
        how = "naive"  # a ring needs a chunk per device
    GlobalCounters.allreduces += 1
    if config.get("DEBUG") >= 2:
        print(f"allreduce {how} {op if isinstance(op, str) else op.name} {partials[0].dtype.name}{shape} over "
              f"{len(devices)} devices")
    if how == "naive" and (direct := _direct(partials, devices, op, mean)) is not None:
        # stored partials (the direct fold's condition) have a concrete shape
        return [buffers.view_as(b, shape) for b in direct]  # type: ignore[arg-type]
    outs = _naive(realize, partials, devices, op) if how == "naive" else _ring(realize, partials, devices, op)
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


def run_allreduces(realize: Realize, sink: UOp) -> UOp:
    """`sink` with each group of ALLREDUCE nodes (one per device over the same partials) computed: the partials
    realized on their devices, folded by `allreduce`, and each node replaced by the view of its device's result.
    Groups run in waves, sources first: a wave holds every group whose partials read no fold still to run, and
    each device computes the partials of a whole wave in one schedule (the gradients of a data-parallel step
    share their forward and backward graph)."""
    groups: dict[tuple, list[UOp]] = {}
    for u in sink.toposort():
        if u.op is Op.ALLREDUCE:
            groups.setdefault(u.src, []).append(u)
    done: dict[UOp, UOp] = {}
    while todo := [g for g in groups if groups[g][0] not in done]:
        pending = {n for g in todo for n in groups[g]}
        wave = [g for g in todo if not any(u in pending for s in g for u in s.toposort() if u.op is Op.ALLREDUCE)]
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
