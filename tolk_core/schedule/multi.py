"""multi: sharded values pushed through the ops that read them, shard by shard (docs/multi-device.md).

A sharded value is one node, `MULTI(s_0, ..., s_{n-1})` with arg `(devices, axis, bounds)`: shard `s_i` is
computed on `devices[i]`. With `axis` None every shard is the whole value (replicated); otherwise `s_i` is the
part `bounds[i] = (lo, hi)` of the whole value along `axis` (the bounds tile the axis in order; the last shard
may be smaller). `ALLREDUCE(p_0, ..., p_{n-1})` with arg `(op, devices, i)` is the fold by `op` (Op.ADD,
Op.MAX, Op.MUL) of the per-device partials `p_j`, on `devices[i]`: the engine runs it as a collective.

`shard_graph(sink)` is the one rewrite pass, sources first, that leaves every op of a graph above its MULTIs
per device: an op reading MULTIs becomes a MULTI of the op on each shard. Elementwise ops take equally
sharded or replicated operands (a replicated one, or an unsharded value without a device, is cut to each
shard's bounds); movements that keep the sharded axis whole move each shard; a reduction over the sharded
axis reduces each shard and folds the partials with an ALLREDUCE (a matmul over a sharded contraction axis is
such a reduction of a product); a COPY to one device gathers the shards there. Operands sharded differently,
and movements that cut the sharded axis, allgather first (one DEBUG>=1 line each).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tolk_core import config
from tolk_core.errors import DeviceMismatchError, ShardingError
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp

Bounds = tuple[tuple[int, int], ...]
# ops applied to each shard as they are, their operands cut to the shards' layout
_ELEMENTWISE = GroupOp.ALU | {Op.CAST, Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD}


def split_bounds(size: int, n: int) -> Bounds:
    """The bounds of `n` shards of an axis of `size`: ceil(size / n) elements each, the last one smaller (so
    (10, 4) -> 3, 3, 3, 1). Raises ShardingError when some shard would be empty."""
    step = -(-size // n)
    bounds = tuple((min(i * step, size), min((i + 1) * step, size)) for i in range(n))
    if n > size or any(lo >= hi for lo, hi in bounds):
        raise ShardingError(f"an axis of size {size} cannot be split into {n} shards of ceil({size}/{n}) = {step} "
                            f"elements (a shard would be empty); shard an axis of at least {n} elements"
                            + ("" if n > size else f" whose size {size} leaves no shard empty"))
    return bounds


def multi(shards: Sequence[UOp], devices: tuple[str, ...], axis: int | None, bounds: Bounds | None) -> UOp:
    """The MULTI of `shards` on `devices`, sharded along `axis` with `bounds` (None, None: replicated)."""
    return UOp(Op.MULTI, shards[0].dtype, tuple(shards), (devices, axis, bounds))


def shrink_axis(x: UOp, axis: int, lo: int, hi: int) -> UOp:
    """`x` cut to [lo, hi) along `axis` (itself when that is the whole axis)."""
    shape = x.tensor_shape
    if (lo, hi) == (0, shape[axis]):
        return x
    return UOp(Op.SHRINK, x.dtype, (x,), tuple((lo, hi) if i == axis else (0, s) for i, s in enumerate(shape)))


def copy_to(x: UOp, device: str) -> UOp:
    """`x` on `device`: a COPY, unless `x` is there already or has no device (a constant is computed where read)."""
    if x.device is None or x.device == device:
        return x
    return UOp(Op.COPY, x.dtype, (x, UOp(Op.DEVICE, dtypes.void, (), device)))


_BITS = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def concat(parts: Sequence[UOp], axis: int, bounds: Bounds) -> UOp:
    """The parts joined along `axis` (part i at `bounds[i]`), bit for bit: each part is seen as unsigned
    integers of its width, padded with zero bits to the whole axis, and the padded parts ORed together (each
    element is one part's bits ORed with zeros), then seen as the parts' dtype again. Adding zero-padded parts
    instead would turn a -0.0 into 0.0 (-0.0 + 0.0 is 0.0) and could change NaN payloads."""
    size, dt = bounds[-1][1], parts[0].dtype
    bits = dtypes.bool if dt == dtypes.bool else _BITS[dt.itemsize]
    out = None
    for p, (lo, hi) in zip(parts, bounds, strict=True):
        pad = tuple((lo, size - hi) if i == axis else (0, 0) for i in range(len(p.tensor_shape)))
        raw = p.bitcast(bits)
        padded = UOp(Op.PAD, bits, (raw,), pad) if lo or size - hi else raw
        out = padded if out is None else out.alu(Op.OR, padded)
    assert out is not None
    return out.bitcast(dt)


def gather(m: UOp, device: str) -> UOp:
    """The whole value of MULTI `m` on `device`: a replicated value's shard there (or its first shard, copied), a
    sharded one's shards copied there and joined."""
    devices, axis, bounds = m.arg
    if axis is None:
        return copy_to(m.src[devices.index(device)] if device in devices else m.src[0], device)
    return concat([copy_to(s, device) for s in m.src], axis, bounds)


def allgather(m: UOp, why: str) -> UOp:
    """MULTI `m` replicated: every shard gathered on every device (a DEBUG>=1 line says why)."""
    devices, axis, _ = m.arg
    if axis is None:
        return m
    if config.get("DEBUG") >= 1:
        print(f"multi: allgather of {m.dtype.name}{tuple(m.tensor_shape)} sharded on axis {axis} over "
              f"{len(devices)} devices: {why}")
    return multi([gather(m, d) for d in devices], devices, None, None)


def cut(x: UOp, devices: tuple[str, ...], axis: int | None, bounds: Bounds | None, what: str) -> list[UOp]:
    """Operand `x` of `what` as one part per device in the layout (axis, bounds): its own shards when it has
    that layout, a replicated value's cut to the bounds, an unsharded value read (or copied) by each device;
    a value sharded otherwise is allgathered first."""
    if x.op is Op.MULTI:
        if x.arg[0] != devices:
            raise DeviceMismatchError(f"{what} has operands sharded over different devices: {x.arg[0]} and {devices}")
        if x.arg[1:] == (axis, bounds):
            return list(x.src)
        if x.arg[1] is not None:
            x = allgather(x, f"an operand of {what} sharded on axis {axis} with bounds {bounds}")
        shards = list(x.src)
    else:  # an unsharded value: a constant (no device) read by each shard, or a value copied to each device
        shards = [copy_to(x, d) if isinstance(x.device, str) else x for d in devices]
    if axis is None or bounds is None:
        return shards
    return [shrink_axis(s, axis, lo, hi) for s, (lo, hi) in zip(shards, bounds, strict=True)]


def _elementwise(u: UOp, srcs: tuple[UOp, ...]) -> UOp:
    """`u` (elementwise) on each shard: the layout of its first sharded operand, the others cut to it."""
    multis = [s for s in srcs if s.op is Op.MULTI]
    devices = multis[0].arg[0]
    axis, bounds = next((m.arg[1:] for m in multis if m.arg[1] is not None), (None, None))
    parts = [cut(s, devices, axis, bounds, u.op.name) for s in srcs]
    return multi([u.replace(src=tuple(p[i] for p in parts)) for i in range(len(devices))], devices, axis, bounds)


def _reshape_axis(old: tuple, new: tuple, axis: int) -> int | None:
    """The axis of shape `new` that is axis `axis` of `old` kept whole by a reshape (same size, same number of
    elements before it), else None."""
    before = math.prod(old[:axis])
    for j, s in enumerate(new):
        if s == old[axis] and math.prod(new[:j]) == before:
            return j
    return None


def _sized(shape: tuple, axis: int, size: int) -> tuple:
    return tuple(size if i == axis else s for i, s in enumerate(shape))


def _movement(u: UOp, m: UOp) -> UOp:
    """Movement `u` of MULTI `m` on each shard, where it keeps the sharded axis whole; else of `m` allgathered."""
    devices, axis, bounds = m.arg
    if axis is None:
        return multi([u.replace(src=(s,)) for s in m.src], devices, None, None)
    shape, arg = m.tensor_shape, u.arg
    new_axis: int | None = None
    if u.op is Op.RESHAPE:
        new_axis = _reshape_axis(tuple(shape), tuple(arg), axis)
    elif u.op is Op.PERMUTE:
        new_axis = tuple(arg).index(axis)
    elif u.op is Op.EXPAND or (u.op is Op.PAD and tuple(arg[axis]) == (0, 0)) or \
            (u.op is Op.SHRINK and tuple(arg[axis]) == (0, shape[axis])) or (u.op is Op.FLIP and not arg[axis]):
        new_axis = axis
    if new_axis is None:
        return _movement(u, allgather(m, f"{u.op.name} {arg} cuts the sharded axis"))
    shards = []
    for s, (lo, hi) in zip(m.src, bounds, strict=True):
        if u.op in (Op.RESHAPE, Op.EXPAND):
            a: Any = _sized(tuple(arg), new_axis, hi - lo)
        elif u.op is Op.SHRINK:
            a = tuple((0, hi - lo) if i == axis else r for i, r in enumerate(arg))
        else:
            a = arg
        shards.append(u.replace(src=(s,), arg=a))
    return multi(shards, devices, new_axis, bounds)


def _reduce(u: UOp, m: UOp) -> UOp:
    """REDUCE_AXIS `u` of MULTI `m` on each shard; over the sharded axis the partials are folded by an ALLREDUCE
    on every device (the result replicated)."""
    devices, axis, bounds = m.arg
    op, axes = u.arg
    partials = tuple(u.replace(src=(s,)) for s in m.src)
    if axis is None or axis not in axes:
        return multi(partials, devices, axis, bounds)
    folded = [UOp(Op.ALLREDUCE, u.dtype, partials, (op, devices, i)) for i in range(len(devices))]
    return multi(folded, devices, None, None)


def _push(u: UOp, srcs: tuple[UOp, ...]) -> UOp:
    """`u`, whose sources `srcs` hold a MULTI, as per-device ops (a MULTI), or gathered (a COPY to one device)."""
    if u.op in _ELEMENTWISE or (u.op is Op.BITCAST and u.dtype.itemsize == srcs[0].dtype.itemsize):
        return _elementwise(u, srcs)
    if u.op in GroupOp.Movement and srcs[0].op is Op.MULTI:
        return _movement(u, srcs[0])
    if u.op is Op.REDUCE_AXIS:
        return _reduce(u, srcs[0])
    if u.op is Op.COPY and srcs[0].op is Op.MULTI:
        return gather(srcs[0], srcs[1].arg)
    raise ShardingError(f"{u.op.name} has no sharded form yet: gather the operand to one device first "
                        "(.to(device)); docs/multi-device.md lists the ops that run on shards")


def shard_graph(sink: UOp) -> UOp:
    """`sink` with every op above a MULTI pushed into its shards (see the module docstring); a graph without a
    MULTI is returned as it is. The SINK's own sources may stay MULTIs: the engine realizes them per device."""
    nodes = sink.toposort()
    if not any(u.op is Op.MULTI for u in nodes):
        return sink
    done: dict[UOp, UOp] = {}
    for u in nodes:
        srcs = tuple(done.get(s, s) for s in u.src)
        if u.op not in (Op.MULTI, Op.SINK, Op.ALLREDUCE) and any(s.op is Op.MULTI for s in srcs):
            done[u] = _push(u, srcs)
        elif srcs != u.src:
            done[u] = u.replace(src=srcs)
    return done.get(sink, sink)


def layout(u: UOp) -> tuple[tuple[str, ...], int | None, Bounds | None]:
    """(devices, axis, bounds) of sharded value `u` (a graph over MULTIs), found by pushing its ops into the
    shards (nothing runs); a value with no MULTI is replicated over no devices."""
    root = shard_graph(UOp(Op.SINK, dtypes.void, (u,))).src[0]
    return root.arg if root.op is Op.MULTI else ((), None, None)
