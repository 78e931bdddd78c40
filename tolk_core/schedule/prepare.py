"""prepare_rangeify: bring a function's tensor graph to the normal form that ranges index (docs/prepare.md).

Input and output: `SINK(STORE(destination, value), ...)`. A destination is storage (a BUFFER) or a view of
one through movements and equal-size bitcasts; a value is any tensor-level graph. Each rule below is a named
function that says what it rewrites; `rule_fires` counts how often each fired (the matchers below count into
it; DEBUG>=3 prints the counts of one call). The nodes the rules speak of: a materialisation (a *stage*) is
CONTIGUOUS; new storage (an *alloc*) is the new BUFFER the scheduler makes for a value placed On_device; a call
to a function without its own compilation is `CALL(body, *args)` with an `InlineCall` arg (`tolk_core.function`
builds it); a disk is a device whose capabilities say `disk` (`DISK:<path>`, runtime/disk.py). Device facts come
in as a `Target` (tolk_core/ir/target.py): the rules that need them take it as the matcher's context (the
matcher passes its `ctx` to a rule whose signature has a `ctx` parameter).

Rules, in the order they run:
- step 1 `store_in_place`;
- step 2 `inline_call` (refusals: CallArgumentError) and `expand_composite`, then top-down `repeated_store` and
  `resolve_returned_after`,
  `disk_copy_views_move_to_result` (also run by the engine before it performs copies, with `store_across_devices`:
  `pm_before_copies`; `disk_run` reads its normal form). `pm_mops` (below) is the INDEX-form matcher;
  rangeify's lowerer indexes every movement through its first rule (`index_through_movement`);
- step 3 `split_reduceop`, `stage_of_storage_or_copy` (a pass of its own, before the store-hazard rule adds
  materialisations that must stay), `store_bit_run` (a pass of its own, before expand_bitcast rewrites the
  destination's bitcast), then `pm_prepare`: `refuse_broadcast_store`, `drop_self_store`,
  `store_reshape_pair`, `store_into_bitcast`, `store_across_devices`, `store_hazard` (a value that reads
  its destination's storage through another view is materialised first, so the store cannot overwrite
  elements the value has yet to read), `copy_to_own_device`, `drop_detach`, `sink_sources_lose_movements`,
  `expand_bitcast`, `fold_empty`, `reduce_of_broadcast`, `store_permuted_reduction`. Calls compiled on their
  own (a kernel given as code, `KernelCode`): `code_call_arguments` (`pm_code_calls`, applied by the engine
  when it runs one).
Cross-device copies are performed by the engine (`realize._copy_across_devices`), which stores the value into new
storage on the copy's device.

Also here: `unbind` (bound Variables leave the graph for var_vals), `contiguous_view`, `expand_bitcast`, and the
helpers the rules share: `storage_base`, `identity_element`, `is_broadcast`, `storage_phase`,
`reads_storage_written`, `is_inline_call`, `is_gather`, `on_disk`.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from tolk_core import config
from tolk_core.errors import BroadcastStoreError, CallArgumentError, DiskError, ShapeError, TolkError
from tolk_core.ir import spec
from tolk_core.ir.calls import InlineCall, KernelCode, is_code_call, is_composite, is_inline_call  # noqa: F401  (re-exported names)
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import AxisType, GroupOp, Op, identity_element
from tolk_core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from tolk_core.ir.shape import apply_movement_op
from tolk_core.ir.target import Target
from tolk_core.ir.uop import UOp, prod, resolve, sint
from tolk_core.schedule import placements
from tolk_core.schedule.nested_reductions import merge_nested_reductions
from tolk_core.schedule.work import broadcast_flags

# How often each rule of this module fired, by name: the matchers below count into it (PatternMatcher's
# `fires`); split_reduceop and index_through_movement, which also run outside a matcher, count themselves.
rule_fires: Counter[str] = Counter()


class BitRunStoreError(TolkError, ValueError):
    """A store through a bitcast that changes the element size whose destination is not a run of whole elements
    of its storage (only such a run can be stored into bit by bit: the value's bits are bitcast to whole
    storage elements)."""

_VIEW_OPS = GroupOp.Movement | {Op.BITCAST}


# ---------------------------------------------------------------- helpers the rules share
def storage_base(u: UOp) -> UOp:
    """The node a view reads: `u` stripped of movements and bitcasts (`UOp.storage_base`)."""
    return u.storage_base(GroupOp.View)


def on_disk(u: UOp, target: Target | None) -> bool:
    """Whether `u` lives on a disk device (a device whose capabilities say `disk`: copy-only, no kernels), by
    `target`'s facts (no target: no disks)."""
    dev = u.device
    return target is not None and isinstance(dev, str) and target.on_disk(dev)


def is_broadcast(u: UOp) -> bool:
    """An EXPAND that stretches an axis of one element to more (a symbolic size included). An expand that only
    adds axes of one, or empties an axis, stretches none."""
    return u.op is Op.EXPAND and any(i is not o and resolve(i == 1, False) and not resolve(o <= 1, False)
                                     for i, o in zip(u.src[0].tensor_shape, u.arg, strict=True))


def _reads_storage_other_than(value: UOp, base: UOp, dest: UOp) -> bool:
    """Whether `value` reads storage `base` through any view other than exactly `dest` (a store hazard:
    elements it has yet to read could be overwritten first)."""
    nodes = value.toposort()
    reads: set[UOp] = {base}  # the nodes that read `base`, in one pass over the sources-first order
    for x in nodes:
        if x is not base and any(s in reads for s in x.src):
            if x.op is Op.REDUCE_AXIS:
                return True  # a reduction of the destination reads elements other than the one being stored
            reads.add(x)
    views = {u for u in (value, *(s for x in nodes if x.op not in _VIEW_OPS for s in x.src)) if storage_base(u) is base}
    return bool(views - {dest})


def storage_phase(u: UOp) -> sint | None:
    """The element of its storage at which view `u` starts, when `u` is a run of the
    storage's elements (contiguous_view onto storage, or onto storage ordered after effects); None otherwise.
    A parameter assumes phase 0: its argument starts at the first element of its storage."""
    cv = contiguous_view(u)
    if cv is None:
        return None
    b = cv[0].src[0] if cv[0].op is Op.AFTER else cv[0]
    return cv[1] if b.op is Op.BUFFER else None


def reads_storage_written(read: UOp, writes: tuple[UOp, ...]) -> bool:
    """Whether the value `read` reads storage that one of the store destinations
    `writes` writes (a view of the same storage, through movements, bitcasts and AFTERs)."""
    written = {w.storage_base(GroupOp.ViewOfState) for w in writes}
    return any(u in written for u in read.toposort() if u.op is Op.BUFFER)


# ---------------------------------------------------------------- the rules
def store_in_place(store: UOp, dest: UOp, value: UOp) -> UOp | None:
    """Step 1: an output whose value is materialised (a stage: CONTIGUOUS, whose new storage the
    scheduler would otherwise make) stores the value into the output's storage directly."""
    return store.replace(src=(dest, value.src[0])) if value.op is Op.CONTIGUOUS else None


def stage_of_storage_or_copy(stage: UOp, x: UOp) -> UOp | None:
    """A materialisation (STAGE: CONTIGUOUS) of storage (seen whole and in order: reshapes of a BUFFER) or of a
    copy is its source: both are in storage already. (Any other materialisation in global memory is stored
    into new storage, an ALLOC, by the scheduler: placements declare a CONTIGUOUS On_device and rangeify gives
    it a new BUFFER.)"""
    return x if x.storage_base(frozenset({Op.RESHAPE})).op is Op.BUFFER or x.op is Op.COPY else None


def copy_to_own_device(x: UOp, dev: UOp) -> UOp | None:
    """A copy to the device the value is on is the value (a value on no device, a constant, is on every one)."""
    return x if x.device in (None, dev.arg) else None


def disk_copy_views_move_to_result(copy: UOp, x: UOp, dev: UOp, ctx: Target | None = None) -> UOp | None:
    """Step 2: the movements and bitcasts of a copy from a disk move to the copy's result. The copy reads one
    run of the file's bytes (`disk_run`): the highest view of the source that is a run of whole elements of the
    storage (contiguous_view), its bytes reinterpreted as the view's type (a size-changing bitcast on a disk is
    a byte reinterpretation); the other views are applied after the copy, on the target device. A disk
    value that is computed, not viewed, raises DiskError naming the device and the operation."""
    if not on_disk(x, ctx) or x.op not in _VIEW_OPS:
        return None
    if not resolve(x.size != 0, True):
        return _filled(0, x.dtype, tuple(x.tensor_shape))  # nothing to read
    chain, base = x.view_chain(GroupOp.View)
    if base.op is not Op.BUFFER:
        raise DiskError(f"{x.device} is a disk: a disk value can only be copied, viewed or bitcast, but "
                        f"{base.op.name} computes on it; copy it to another device first (.to(...))")
    size = base.dtype.itemsize
    top, offset, nbytes, dt = len(chain), 0, base.arg * size, base.dtype
    shape: tuple[sint, ...] = (base.arg,)
    for i, v in enumerate(chain):  # the highest view that is a run of whole elements of the storage
        if (cv := contiguous_view(v)) is not None and cv[0] is base and isinstance(cv[1], int):
            top, offset, nbytes = i, cv[1] * size, v.size * v.dtype.itemsize
            dt, shape = v.dtype, tuple(v.tensor_shape)
            break
    rest = chain[:top]
    src = base if nbytes == base.arg * size else \
        UOp(Op.SHRINK, base.dtype, (base,), ((offset // size, (offset + nbytes) // size),))
    out = UOp(Op.COPY, dt, (src if dt == base.dtype else UOp(Op.BITCAST, dt, (src,)), dev))
    if tuple(out.tensor_shape) != shape:
        out = UOp(Op.RESHAPE, dt, (out,), shape)
    for v in reversed(rest):
        out = v.replace(src=(out,))
    return None if out is copy else out


def disk_run(src: UOp) -> tuple[UOp, int, int, DType] | None:
    """(storage, byte offset, byte count, type) of the bytes a copy from a disk reads, when `src` is in the form
    `disk_copy_views_move_to_result` leaves: storage, or one run of it (a SHRINK), possibly bitcast."""
    dt = src.dtype
    if src.op is Op.BITCAST:
        src = src.src[0]
    if src.op is Op.BUFFER:
        return src, 0, src.arg * src.dtype.itemsize, dt
    if src.op is Op.SHRINK and src.src[0].op is Op.BUFFER and all(isinstance(a, int) for a in src.arg[0]):
        (lo, hi), size = src.arg[0], src.dtype.itemsize
        return src.src[0], lo * size, (hi - lo) * size, dt
    return None


def inline_call(call: UOp) -> UOp | None:
    """Step 2: an inline call is its body, each parameter bound to its argument viewed as flat storage (a
    scalar parameter to the 0-d argument itself). The body's local storage needs no renaming here: new storage
    is a CONTIGUOUS the scheduler gives fresh storage per distinct (argument-bound) node, and a BUFFER in a
    body is read-only data the body closed over. An argument that does not fit its parameter raises
    CallArgumentError naming the call, the argument and the parameter."""
    if not is_inline_call(call):
        return None
    body, args = call.src[0], call.src[1:]
    binding: dict[UOp, UOp] = {}
    for p in (u for u in body.toposort() if u.op is Op.PARAM):
        slot, shape = p.arg[0], tuple(p.arg[1])
        where = f"call of {call.arg.name}: PARAM {slot}"
        if slot >= len(args):
            raise CallArgumentError(f"{where} has no argument (the call passes {len(args)})")
        a = args[slot]
        if a.dtype != p.dtype:
            raise CallArgumentError(f"{where} is {p.dtype.name}, its argument {a.op.name} is {a.dtype.name}")
        if shape == ():
            if tuple(a.shape) != ():
                raise CallArgumentError(f"{where} is a scalar, its argument {a.op.name} has shape {_fmt(a.shape)}")
            binding[p] = a
        elif not resolve(prod(a.shape) == shape[0], False):
            raise CallArgumentError(f"{where} is storage of {shape[0]} elements, its argument {a.op.name} of "
                                    f"shape {_fmt(a.shape)} has {prod(a.shape)}")
        else:
            binding[p] = a if tuple(a.shape) == shape else UOp(Op.RESHAPE, a.dtype, (a,), shape)
    out = body.substitute(binding)
    outside = {u for a in args for u in a.toposort()}
    for u in out.toposort():  # the body's materialisations keep their intent (it was declared on the traced nodes)
        if u.op is Op.CONTIGUOUS and u not in outside:
            placements.seed_contiguous(u)
    return out


def expand_composite(call: UOp) -> UOp | None:
    """Step 2: a composite the front end kept whole (`CALL(*xs)` with a `Composite` arg: sigmoid, tanh, matmul)
    is its formula over xs; from here on the graph is the one the formula would have built."""
    return call.arg.expand(*call.src) if is_composite(call) else None


def code_call_arguments(call: UOp) -> UOp | None:
    """A call compiled on its own takes as an argument that is a run of storage's elements (or of a state of it)
    from the first, of the storage's type, the storage itself, which the call writes through (contiguous_view).
    Storage the call only reads that starts elsewhere than its parameter assumes (storage_phase: a parameter
    assumes the first element) and that the call does not write through another argument
    (reads_storage_written) is stored into new storage (a materialisation), which starts as the parameter
    assumes; a run it writes, or whose storage another argument writes, is passed as the run (a SHRINK of the
    storage: the storage at an offset). Any other argument is a value of its own, materialised. An argument the
    call writes that is not a run of storage raises CallArgumentError naming it."""
    if not is_code_call(call):
        return None
    code, args = call.src[0].arg, call.src[1:]
    writes = tuple(a for a, w in zip(args, code.written, strict=True) if w)
    out = []
    for i, (a, w) in enumerate(zip(args, code.written, strict=True)):
        if a.op in (Op.BUFFER, Op.CONTIGUOUS) and not (w and a.op is Op.CONTIGUOUS):
            out.append(a)  # in the form the call takes already (a run's SHRINK maps to itself below)
            continue
        cv = contiguous_view(a)
        base = cv[0].storage_base(GroupOp.ViewOfState) if cv is not None else None
        if cv is None or base is None or cv[0].op not in (Op.BUFFER, Op.AFTER) or base.op is not Op.BUFFER or \
                base.dtype != a.dtype:
            if w:
                raise CallArgumentError(f"call of kernel {code.name}: argument {i} ({a.op.name} "
                                        f"{_fmt(a.tensor_shape)}) is written but is not a run of whole elements "
                                        "of storage of its type")
            out.append(_materialised(a))
            continue
        phase, n = cv[1], a.size
        if not isinstance(phase, int) or not isinstance(n, int):  # a symbolic run: a value of its own
            if w:
                raise CallArgumentError(f"call of kernel {code.name}: argument {i} is written at a symbolic offset")
            out.append(_materialised(a))
        elif phase == 0:
            out.append(base)
        elif not w and not reads_storage_written(a, tuple(x for x in writes if x is not a)):
            out.append(_materialised(a))
        else:
            out.append(UOp(Op.SHRINK, base.dtype, (base,), ((phase, phase + n),)))
    new = call.replace(src=(call.src[0], *out))
    return None if new is call else new


def drop_detach(x: UOp, u: UOp) -> UOp:
    """DETACH and CONTIGUOUS_BACKWARD are their source."""
    return x


def split_reduceop(red: UOp, x: UOp) -> UOp | None:
    """A large reduction over few outputs is split in two, the first materialised: reduced in one kernel,
    each of the few outputs is one long serial loop; the first stage computes out*d partial results in
    parallel and the second folds them (`_split`)."""
    if not config.get("SPLIT_REDUCEOP") or not all(isinstance(s, int) for s in (*x.tensor_shape, *red.tensor_shape)):
        return None
    op, axes = red.arg
    out_n, in_n = math.prod(red.tensor_shape), math.prod(x.tensor_shape)
    if out_n == 0 or in_n < config.get("REDUCEOP_SPLIT_THRESHOLD") * out_n:
        return None
    cap = (1 << config.get("REDUCEOP_SPLIT_SIZE")) // out_n
    broadcast = _broadcast_axes(x)
    for axis in axes:
        if axis in broadcast:
            continue
        for d in range(min(256, cap), 7, -1):
            if x.tensor_shape[axis] % d == 0:
                return _split(red, x, axis, d)
    return None


def _materialised(value: UOp) -> UOp:
    """`value` stored in new storage on its device (a CONTIGUOUS placed On_device, like a user contiguous())."""
    out = UOp(Op.CONTIGUOUS, value.dtype, (value,))
    placements.seed_contiguous(out)
    return out


def _split_reductions(sink: UOp) -> UOp:
    """split_reduceop over the graph's reductions, once: the two reductions a split makes are not split
    again (a sum of 2^24 elements is two kernels)."""
    splits = {u: out for u in sink.toposort() if u.op is Op.REDUCE_AXIS
              and (out := split_reduceop(red=u, x=u.src[0])) is not None}
    rule_fires["split_reduceop"] += len(splits)
    return sink.substitute(splits) if splits else sink


def _split(red: UOp, x: UOp, axis: int, d: int) -> UOp:
    """Reshape `axis` into (d, size/d), move the d part last, reduce the original axes (now with size/d in
    place of `axis`) in a first, materialised reduction of out*d elements, then reduce the d part."""
    op, axes = red.arg
    n = len(x.tensor_shape)
    shape = (*x.tensor_shape[:axis], d, x.tensor_shape[axis] // d, *x.tensor_shape[axis + 1:])
    split = UOp(Op.RESHAPE, x.dtype, (x,), shape)
    order = tuple(i for i in range(n + 1) if i != axis) + (axis,)
    moved = UOp(Op.PERMUTE, x.dtype, (split,), order)
    first_axes = tuple(sorted(order.index(a if a < axis else a + 1) for a in axes))
    first = _materialised(UOp(Op.REDUCE_AXIS, red.dtype, (moved,), (op, first_axes)))
    second = UOp(Op.REDUCE_AXIS, red.dtype, (first,), (op, (n,)))
    return UOp(Op.RESHAPE, red.dtype, (second,), tuple(red.tensor_shape))


def _broadcast_axes(x: UOp) -> set[int]:
    """The axes `x` is broadcast along: index it with one range per axis, push the movements down to what they
    view, and see which ranges do not survive."""
    rngs = tuple(UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, s),), (i, AxisType.PROBE))
                 for i, s in enumerate(x.tensor_shape))
    live: set[UOp] = set()
    stack: list[tuple[UOp, tuple[UOp, ...]]] = [(x, rngs)]
    seen: set[tuple[UOp, tuple[UOp, ...]]] = set()
    while stack:
        u, idxs = stack.pop()
        if (u, idxs) in seen:
            continue
        seen.add((u, idxs))
        if u.op in GroupOp.Movement:
            src_idxs, _ = apply_movement_op(u.op, tuple(u.src[0].tensor_shape), u.arg, idxs)
            stack.append((u.src[0], tuple(src_idxs)))
        elif u.op in GroupOp.ALU or u.op in (Op.CAST, Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD):
            stack.extend((s, idxs) for s in u.src)
        else:  # storage, constants, reductions: whatever indexes them is live
            live |= {r for i in idxs for r in i.toposort() if r.op is Op.RANGE}
    return {i for i, r in enumerate(rngs) if r not in live and x.tensor_shape[i] != 1}


def sink_sources_lose_movements(sink: UOp) -> UOp | None:
    """The sink's sources lose their movements (and NOOPs among them are dropped)."""
    srcs = tuple(storage_base(s) if s.op in GroupOp.Movement else s for s in sink.src if s.op is not Op.NOOP)
    return sink.replace(src=srcs) if srcs != sink.src else None


def store_reshape_pair(store: UOp, a: UOp, b: UOp) -> UOp | None:
    """A store of a reshape into a reshape of the same shape stores the sources."""
    if a.src[0].shape == b.src[0].shape:
        return store.replace(src=(a.src[0], b.src[0]))
    return None


def drop_self_store(store: UOp, dest: UOp, value: UOp) -> UOp | None:
    """A store of a storage's contents into itself is dropped."""
    return UOp(Op.NOOP) if value is dest else None


def store_into_bitcast(store: UOp, bc: UOp, value: UOp) -> UOp | None:
    """A store into a bitcast of storage stores the value bitcast to the storage's type."""
    inner = bc.src[0]
    if inner.dtype.itemsize != bc.dtype.itemsize:
        return None
    return store.replace(src=(inner, UOp(Op.BITCAST, inner.dtype, (value,))))


def store_across_devices(store: UOp, dest: UOp, value: UOp) -> UOp | None:
    """A store across devices first materialises its value on its own device: the store is of a COPY of the
    value's storage (a stage of storage or of a copy is the storage, no copy kernel) to the destination's
    device. A constant, on no device, is on every one."""
    if value.device is None or dest.device is None or value.device == dest.device:
        return None
    staged = value if stage_of_storage_or_copy(value, value) is not None else _materialised(value)
    return store.replace(src=(dest, UOp(Op.COPY, value.dtype, (staged, UOp(Op.DEVICE, dtypes.void, (), dest.device)))))


def repeated_store(store: UOp, dest: UOp, value: UOp) -> UOp | None:
    """A store of the value the store before it stored (its destination is storage ordered after a store of
    `value` into the same storage) stays, a state of its own: the value is materialised, so the second store
    does not read what the first one overwrote. (Unlike a self-store it is not dropped.)"""
    if dest.op is not Op.AFTER or value.op is Op.CONTIGUOUS:
        return None
    base = dest.storage_base(GroupOp.ViewOfState)
    if any(e.op is Op.STORE and e.src[1] is value and e.src[0].storage_base(GroupOp.ViewOfState) is base
           for e in dest.src[1:]):
        return store.replace(src=(dest, _materialised(value)))
    return None


def resolve_returned_after(a: UOp) -> UOp | None:
    """A value ordered after a call's stores into one of its outputs is that output's value: AFTER(x, *stores)
    whose stores all write x's storage is x. The engine performs an inline call's stores when the call is made
    (assignments are eager), in order, so by the time this graph runs the storage holds the stored value."""
    base = a.src[0].storage_base(GroupOp.ViewOfState)
    if base.op is not Op.BUFFER or not a.src[1:] or \
            not all(e.op is Op.STORE and e.src[0].storage_base(GroupOp.ViewOfState) is base for e in a.src[1:]):
        return None
    return a.src[0]


def _has_size_changing_bitcast(u: UOp) -> bool:
    return any(v.op is Op.BITCAST and v.dtype.itemsize != v.src[0].dtype.itemsize
               for v in u.view_chain(GroupOp.ViewOfState)[0])


def store_bit_run(store: UOp, dest: UOp, value: UOp) -> UOp | None:
    """Any other store through movements and bitcasts whose elements are a run of whole elements of storage or
    of a state of it (contiguous_view) stores the value's bits into that run: the destination becomes the run
    (a SHRINK of the storage) and the value its flat bits bitcast to the storage's type (expand_bitcast then
    makes that shifts of unsigned integers). Applies where the destination's views change the element size
    (the lowerer follows every other view); a destination through such a bitcast that is not a run raises
    BitRunStoreError naming it."""
    if not _has_size_changing_bitcast(dest):
        return None
    cv = contiguous_view(dest)
    base = cv[0].storage_base(GroupOp.ViewOfState) if cv is not None else dest
    if cv is None or cv[0].op not in (Op.BUFFER, Op.AFTER) or base.op is not Op.BUFFER:
        raise BitRunStoreError(f"cannot store through {dest.op.name} {_fmt(dest.tensor_shape)} of {dest.dtype.name}: a "
                               "store through a bitcast that changes the element size must write a run of whole "
                               "elements of its storage")
    storage, offset = cv
    n = dest.size * dest.dtype.itemsize // storage.dtype.itemsize
    run = storage if resolve(offset == 0, False) and resolve(n == storage.size, False) else \
        UOp(Op.SHRINK, storage.dtype, (storage,), ((offset, offset + n),))
    flat = value if len(value.tensor_shape) == 1 else UOp(Op.RESHAPE, value.dtype, (value,), (value.size,))
    return store.replace(src=(run, UOp(Op.BITCAST, storage.dtype, (flat,))))


def _fmt(shape: tuple) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def refuse_broadcast_store(store: UOp, dest: UOp, value: UOp) -> UOp | None:
    """Refuse a store whose destination is (a view of) a broadcast: several destination elements are one
    cell, which the store would write once per element, in no order."""
    for u in dest.view_chain(GroupOp.ViewOfState | {Op.DETACH, Op.CONTIGUOUS_BACKWARD})[0]:
        if is_broadcast(u):
            raise BroadcastStoreError(
                f"cannot store into a broadcast: EXPAND {_fmt(u.src[0].tensor_shape)} -> {_fmt(u.arg)} stretches an "
                "axis of one element to more, so several elements of the destination are one cell, which the store "
                "would write once per element, in no order")
    return None


def store_hazard(store: UOp, dest: UOp, value: UOp) -> UOp | None:
    """A value that reads its destination's storage through another view is materialised first."""
    if value.op is Op.CONTIGUOUS or dest.op is Op.BUFFER and value is dest:
        return None
    base = storage_base(dest)
    if base.op is Op.BUFFER and _reads_storage_other_than(value, base, dest):
        return store.replace(src=(dest, _materialised(value)))
    return None


def reduce_of_broadcast(u: UOp) -> UOp | None:
    """A reduction whose input holds one value along an axis it keeps (broadcast there: the gradient of a sum,
    a constant) reduces one copy and broadcasts the result: computed inline it would fold the same elements
    once per copy (a `ones` upstream gradient made attention's dP = dO·Vᵀ 128 times the work)."""
    x = u.src[0]
    if not x.shape or x.op is Op.CONST:
        return None
    keep = [a for a, f in enumerate(broadcast_flags(x)) if f and a not in u.arg[1] and
            isinstance(x.shape[a], int) and x.shape[a] > 1]
    if not keep:
        return None
    one = tuple((0, 1) if a in keep else (0, s) for a, s in enumerate(x.shape))
    inner = u.replace(src=(UOp(Op.SHRINK, x.dtype, (x,), one),))
    return UOp(Op.EXPAND, u.dtype, (inner,), u.tensor_shape)


def store_permuted_reduction(u: UOp) -> UOp | None:
    """A reduction read through a permutation and then broadcast is materialised in the permuted order.
    Broadcast to its consumer it is stored anyway (docs/placements.md, the inline-reduction cap); stored in the
    order the consumer reads it, the consumer's loads are contiguous where they were strided by the permutation
    (attention's P @ V read back as heads x head size merged into one axis by the output projection: the
    projection then gets codegen's matmul plan, 4x faster at MiniLM's size, docs/performance.md). Only a
    permutation that keeps the innermost axis innermost: the producing kernel's stores stay contiguous too."""
    x = u.src[0]
    if not any(isinstance(i, int) and i == 1 and (not isinstance(o, int) or o != 1)
               for i, o in zip(x.tensor_shape, u.arg, strict=True)):
        return None
    chain, base = x.view_chain(GroupOp.Movement)
    if base.op is not Op.REDUCE_AXIS or any(m.op not in (Op.RESHAPE, Op.PERMUTE) for m in chain):
        return None
    perms = [k for k, m in enumerate(chain) if m.op is Op.PERMUTE]
    if not perms or any(not _moves_axes(chain[k]) or chain[k].arg[-1] != len(chain[k].arg) - 1 for k in perms):
        return None
    # the permuted value itself, before reshapes merge its axes (merged, the producer's index would divide).
    # Not declared On_device: the cap stores it where it would have stored the reduction, so the other
    # placement decisions see the same kernel boundaries
    perm = chain[perms[0]]
    out = UOp(Op.CONTIGUOUS, perm.dtype, (perm,))
    for m in reversed(chain[:perms[0]]):
        out = m.replace(src=(out,))
    return u.replace(src=(out,))


def _moves_axes(m: UOp) -> bool:
    """Whether PERMUTE `m` changes the order of its axes longer than one (not just where unit axes sit)."""
    shape = m.src[0].tensor_shape
    kept = [a for a in m.arg if resolve(shape[a] != 1, True)]
    return kept != sorted(kept)


def fold_empty(u: UOp) -> UOp | None:
    """A reduction of an empty axis to a non-empty result is the identity; any other value with an empty
    axis is 0."""
    shape = u.shape
    if shape is None or u.op in (Op.CONST, Op.BUFFER) or u.op in GroupOp.Movement and u.src[0].op is Op.CONST:
        return None
    if u.op is Op.REDUCE_AXIS and resolve(prod(shape) != 0, False) and \
            not resolve(u.src[0].size != 0, True):
        return _filled(identity_element(u.arg[0], u.dtype), u.dtype, shape)
    if not resolve(prod(shape) != 0, True) and len(shape):
        return _filled(0, u.dtype, shape)
    return None


def _filled(value: Any, dt: DType, shape: tuple[sint, ...]) -> UOp:
    c = UOp.const(dt, value)
    return UOp(Op.EXPAND, dt, (UOp(Op.RESHAPE, dt, (c,), (1,) * len(shape)),), tuple(shape)) if shape else c


# ---------------------------------------------------------------- pm_mops
# The INDEX form pm_mops rewrites: `INDEX(x, *idxs)` reads x at one index expression per axis of x (arg None);
# `INDEX(x, *idxs, gate)` with arg "gated" is valid only where `gate` holds. A selection `WHERE(c, index, 0)` is
# what a padded view makes. rangeify's _Lowerer walks the same form procedurally: it calls
# `index_through_movement` for every movement it indexes (`index_of_movement`, counted as such) and
# `store_target` gates a store through a padded view by the same validity (`store_through_selection`). The forms
# of `index_reshape_fewer_indices`, `movement_after_effects` and `end_of_movement` do not arise there today
# (every index has one expression per axis, tensor graphs hold no AFTER and ENDs are kernel-level); their rules
# are exercised on INDEX-form graphs built by hand.
def is_gather(idxs: tuple[UOp, ...]) -> bool:
    """An index by a value with axes (a gather): left whole by pm_mops."""
    return any(i.shape is not None and len(i.shape) > 0 for i in idxs)


def index_through_movement(m: UOp, idxs: tuple[UOp, ...]) -> tuple[tuple[UOp, ...], UOp | None]:
    """The mapping of pm_mops' `index_of_movement` for rangeify's lowerer: the indices of movement `m`'s source
    that `idxs` of its output map to, and the condition under which they read it (None: always). Counted as
    index_of_movement (the rule itself is counted by its matcher)."""
    rule_fires["index_of_movement"] += 1
    return apply_movement_op(m.op, tuple(m.src[0].tensor_shape), m.arg, idxs)


def index_of_movement(idx: UOp, m: UOp) -> UOp | None:
    """An INDEX of a movement indexes the movement's source; a padded read is a selection of it and of 0."""
    idxs, gate = idx.src[1:], None
    if idx.arg == "gated":
        idxs, gate = idxs[:-1], idxs[-1]
    if len(idxs) != len(m.tensor_shape) or is_gather(idxs):
        return None
    src_idxs, valid = apply_movement_op(m.op, tuple(m.src[0].tensor_shape), m.arg, tuple(idxs))  # counted as a rule
    if valid is not None and gate is not None:
        valid = gate.alu(Op.AND, valid)
    gated = valid if valid is not None else gate
    out = UOp(Op.INDEX, idx.dtype, (m.src[0], *src_idxs) + ((gated,) if gated is not None else ()),
              "gated" if gated is not None else None)
    return out if valid is None else UOp(Op.WHERE, idx.dtype, (valid, out, UOp.const(idx.dtype, 0)))


def index_reshape_fewer_indices(idx: UOp, r: UOp) -> UOp | None:
    """An index with fewer indices than reshape `r` has axes (the trailing axes left whole) indexes r's source,
    when the reshape leaves those trailing axes alone."""
    idxs, x = idx.src[1:], r.src[0]
    k = len(r.tensor_shape) - len(idxs)
    if idx.arg is not None or k <= 0 or is_gather(idxs) or len(x.tensor_shape) < k or \
            tuple(x.tensor_shape[len(x.tensor_shape) - k:]) != tuple(r.tensor_shape[len(r.tensor_shape) - k:]):
        return None
    lead_in, lead_out = tuple(x.tensor_shape[:len(x.tensor_shape) - k]), tuple(r.tensor_shape[:len(idxs)])
    src_idxs, _ = apply_movement_op(Op.RESHAPE, lead_in, lead_out, tuple(idxs))
    return UOp(Op.INDEX, idx.dtype, (x, *src_idxs))


def store_through_selection(store: UOp, sel: UOp, value: UOp) -> UOp | None:
    """A store through a selection of an index and of 0 (a padded view) stores through the index made valid
    only where the selection's conditions hold; a selection of such a selection gates on both conditions."""
    conds, u = [], sel
    while u.op is Op.WHERE and u.src[2].op is Op.CONST and u.src[2].arg == 0:
        conds.append(u.src[0])
        u = u.src[1]
    if u.op is not Op.INDEX or not conds:
        return None
    idxs = u.src[1:]
    if u.arg == "gated":
        conds.append(idxs[-1])
        idxs = idxs[:-1]
    gate = conds[0]
    for c in conds[1:]:
        gate = gate.alu(Op.AND, c)
    return store.replace(src=(UOp(Op.INDEX, u.dtype, (u.src[0], *idxs, gate), "gated"), value))


def movement_after_effects(m: UOp, a: UOp) -> UOp | None:
    """A movement or an index of storage ordered after effects (AFTER) is the movement or index of its source
    ordered after them; an index of a value ordered after effects is the index of the value, ordered after."""
    moved = m.replace(src=(a.src[0], *m.src[1:]))
    return UOp(Op.AFTER, moved.dtype, (moved, *a.src[1:]))


def end_of_movement(end: UOp, m: UOp) -> UOp:
    """An END of a movement is the end of the movement's source."""
    return end.replace(src=(m.src[0], *end.src[1:]))


# ---------------------------------------------------------------- expand_bitcast
def _uint(itemsize: int) -> DType:
    return {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[itemsize]


def _bits(x: UOp, dt: DType) -> UOp:
    """`x` reinterpreted as `dt` of the same size (no node when the types are equal)."""
    return x if x.dtype == dt else UOp(Op.BITCAST, dt, (x,))


def _shrink_last(x: UOp, i: int) -> UOp:
    return UOp(Op.SHRINK, x.dtype, (x,), tuple((0, s) for s in x.tensor_shape[:-1]) + ((i, i + 1),))


def expand_bitcast(bc: UOp, ctx: Target | None = None) -> UOp | None:
    """A BITCAST to a type of another size as shifts and casts of unsigned integers, lane by lane along the
    last axis, least significant first; None where the sizes are equal (or on a disk, which has no kernels)."""
    x, new, old = bc.src[0], bc.dtype, bc.src[0].dtype
    if new.itemsize == old.itemsize or not x.shape or on_disk(x, ctx):
        return None
    ux, unew = _bits(x, _uint(old.itemsize)), _uint(new.itemsize)
    *lead, last = x.shape
    if new.itemsize > old.itemsize:  # widening: groups of narrow lanes shifted into place and summed
        rate = new.itemsize // old.itemsize
        grouped = UOp(Op.RESHAPE, ux.dtype, (ux,), (*lead, last // rate, rate))
        total = None
        for i in range(rate):
            lane = UOp(Op.CAST, unew, (_shrink_last(grouped, i),))
            lane = lane.alu(Op.SHL, _filled(8 * i * old.itemsize, unew, tuple(lane.tensor_shape)))
            total = lane if total is None else total + lane
        assert total is not None  # rate >= 2 lanes were summed
        return _bits(UOp(Op.RESHAPE, unew, (total,), (*lead, last // rate)), new)
    rate = old.itemsize // new.itemsize  # narrowing: each wide lane shifted and cast into its narrow lanes
    wide = UOp(Op.RESHAPE, ux.dtype, (ux,), (*lead, last, 1))
    stacked = None
    for i in range(rate):
        shift = _filled(8 * i * new.itemsize, ux.dtype, wide.tensor_shape)
        lane = UOp(Op.CAST, unew, (wide.alu(Op.SHR, shift),))
        padded = UOp(Op.PAD, unew, (lane,), tuple((0, 0) for _ in lead) + ((0, 0), (i, rate - 1 - i)))
        stacked = padded if stacked is None else stacked + padded
    assert stacked is not None  # rate >= 2 lanes were stacked
    return _bits(UOp(Op.RESHAPE, unew, (stacked,), (*lead, last * rate)), new)


# ---------------------------------------------------------------- contiguous_view
def contiguous_view(u: UOp) -> tuple[UOp, sint] | None:
    """(b, offset) when the elements of `u`, in row-major order, are the elements of `b` from `offset` on, in
    order, where `u` is `b` viewed through movements and bitcasts that neither reorder, skip, repeat nor pad
    elements; None otherwise, and when `u` is empty or its size symbolic. `offset` counts elements of b's type.
    A bitcast between types of different sizes is looked through only where the run starts and ends on whole
    elements of its source at a constant offset; otherwise b is that bitcast.

    Found by indexing the flattened view with one range over its elements, pushing the index through the
    movements and reading off `range + offset`; an index the simplifier leaves with divisions it does not
    recombine is a miss, and the caller treats `u` as a value of its own.
    """
    n, found = u.size, _run(u)
    while found is not None and (b := found[0]).op is Op.BITCAST and isinstance(off := found[1], int):
        new, old, src = b.dtype.itemsize, b.src[0].dtype.itemsize, b.src[0]
        if (off * new) % old or (n * new) % old:
            break  # the run splits elements of the bitcast's source
        n, start = n * new // old, off * new // old
        flat = src if len(src.tensor_shape) == 1 else UOp(Op.RESHAPE, src.dtype, (src,), (src.size,))
        found = _run(UOp(Op.SHRINK, src.dtype, (flat,), ((start, start + n),)))
    return found


def _run(u: UOp) -> tuple[UOp, sint] | None:
    """contiguous_view through movements and equal-size bitcasts only (b stops at any other bitcast)."""
    n = u.size
    if not isinstance(n, int) or n == 0:
        return None
    r = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (0, AxisType.VIEW))
    idxs, strides = [], [prod(u.tensor_shape[i + 1:]) for i in range(len(u.tensor_shape))]
    for st, size in zip(strides, u.tensor_shape, strict=True):
        idxs.append((r // st) % size)
    b = u
    while b.op in _VIEW_OPS:
        if b.op is Op.BITCAST:
            if b.dtype.itemsize != b.src[0].dtype.itemsize:
                break
        else:
            new_idxs, valid = apply_movement_op(b.op, tuple(b.src[0].tensor_shape), b.arg, tuple(idxs))
            if valid is not None and not resolve(valid, False):
                return None  # padding: elements that are not b's
            idxs = list(new_idxs)
        b = b.src[0]
    flat = UOp.const(dtypes.index, 0)
    for i, st in zip(idxs, [prod(b.tensor_shape[i + 1:]) for i in range(len(b.tensor_shape))], strict=True):
        flat = flat + i * st
    offset = (flat - r).simplify()
    nodes = offset.toposort()
    bound = {x.src[0] for x in nodes if x.op is Op.BIND}
    if any(x.op is Op.RANGE or (x.op is Op.DEFINE_VAR and x not in bound) for x in nodes):
        return None  # the offset reads the range (not a run) or an unbound variable
    return b, (offset.arg if offset.op is Op.CONST else offset)


_STORE = UPat(Op.STORE, src=(UPat.var("dest"), UPat.var("value")), name="store")
# step 1: outputs stored in place
pm_outputs_in_place = PatternMatcher([(_STORE, store_in_place)], rule_fires)
# step 3, first: materialisations of storage or of copies are their source (before the store-hazard rule adds
# its own materialisations, which must stay)
pm_stage = PatternMatcher([(UPat(Op.CONTIGUOUS, src=(UPat.var("x"),), name="stage"), stage_of_storage_or_copy)],
                          rule_fires)
# pm_mops: movements move towards storage (over the INDEX form above)
pm_mops = PatternMatcher([
    (UPat(Op.INDEX, src=(UPat(GroupOp.Movement, name="m"),), allow_any_len=True, name="idx"), index_of_movement),
    (UPat(Op.INDEX, src=(UPat(Op.RESHAPE, name="r"),), allow_any_len=True, name="idx"), index_reshape_fewer_indices),
    (UPat(Op.STORE, src=(UPat(Op.WHERE, name="sel"), UPat.var("value")), name="store"), store_through_selection),
    (UPat(GroupOp.Movement | {Op.INDEX}, src=(UPat(Op.AFTER, name="a"),), allow_any_len=True, name="m"),
     movement_after_effects),
    (UPat(Op.END, src=(UPat(GroupOp.Movement, name="m"),), allow_any_len=True, name="end"), end_of_movement),
], rule_fires)
# step 2: inline calls inlined (the matcher autograd applies too), composites expanded; disk copies read runs of bytes
pm_inline_calls = PatternMatcher([(UPat(Op.CALL, name="call"), inline_call)], rule_fires)
pm_calls = pm_inline_calls + PatternMatcher([(UPat(Op.CALL, name="call"), expand_composite)], rule_fires)
pm_disk_copies = PatternMatcher([
    (UPat(Op.COPY, src=(UPat.var("x"), UPat(Op.DEVICE, name="dev")), name="copy"), disk_copy_views_move_to_result),
], rule_fires)
# step 2, after inlining: a call's stores have run (a repeated store of one value keeps its own state first)
pm_returned_after = PatternMatcher([
    (_STORE, repeated_store),
    (UPat(Op.AFTER, name="a"), resolve_returned_after),
], rule_fires)
# what the engine applies before it performs copies: disk copies read runs, stores across devices copy
pm_before_copies = pm_disk_copies + PatternMatcher([(_STORE, store_across_devices)], rule_fires)
# step 3, before expand_bitcast rewrites a destination's bitcasts into values: bit-run stores
pm_bit_run_stores = PatternMatcher([(_STORE, store_bit_run)], rule_fires)
# step 3: a call compiled on its own takes storage, runs of it, or values materialised into new storage
pm_code_calls = PatternMatcher([(UPat(Op.CALL, name="call"), code_call_arguments)], rule_fires)
# step 3: from the leaves up
pm_prepare = PatternMatcher([
    (_STORE, refuse_broadcast_store),
    (_STORE, drop_self_store),
    (UPat(Op.STORE, src=(UPat(Op.RESHAPE, name="a"), UPat(Op.RESHAPE, name="b")), name="store"), store_reshape_pair),
    (UPat(Op.STORE, src=(UPat(Op.BITCAST, name="bc"), UPat.var("value")), name="store"), store_into_bitcast),
    (_STORE, store_across_devices),
    (_STORE, store_hazard),
    (UPat(Op.COPY, src=(UPat.var("x"), UPat(Op.DEVICE, name="dev"))), copy_to_own_device),
    (UPat((Op.DETACH, Op.CONTIGUOUS_BACKWARD), src=(UPat.var("x"),), name="u"), drop_detach),
    (UPat(Op.SINK, name="sink"), sink_sources_lose_movements),
    (UPat(Op.BITCAST, name="bc"), expand_bitcast),
    (UPat(GroupOp.ALU | {Op.REDUCE_AXIS, Op.CAST, Op.BITCAST, Op.CONTIGUOUS}, name="u"), fold_empty),
    (UPat(Op.REDUCE_AXIS, name="u"), reduce_of_broadcast),
    (UPat(Op.EXPAND, name="u"), store_permuted_reduction),
], rule_fires)


def prepare_rangeify(sink: UOp, target: Target | None = None) -> UOp:
    """`SINK(STORE(dest, value), ...)` in the normal form rangeify indexes (see the module docstring), for the
    device facts of `target` (which of the graph's devices are disks; None: no disks)."""
    before = Counter(rule_fires)
    keep = placements.carry_intent  # a node rebuilt on rewritten sources keeps its declared placement
    out = graph_rewrite(sink, pm_outputs_in_place, name="prepare_rangeify step 1", on_rebuild=keep)
    out = graph_rewrite(out, pm_calls, name="prepare_rangeify step 2: inline calls, composites", on_rebuild=keep)
    out = graph_rewrite(out, pm_returned_after, bottom_up=True, name="prepare_rangeify step 2: returned after",
                        on_rebuild=keep)
    out = graph_rewrite(out, pm_disk_copies, ctx=target, name="prepare_rangeify step 2: disk copies", on_rebuild=keep)
    out = merge_nested_reductions(out)
    out = _split_reductions(out)
    out = graph_rewrite(out, pm_stage, name="prepare_rangeify step 3: stages", on_rebuild=keep)
    out = graph_rewrite(out, pm_bit_run_stores, name="prepare_rangeify step 3: bit-run stores", on_rebuild=keep)
    out = graph_rewrite(out, pm_prepare, ctx=target, name="prepare_rangeify step 3", on_rebuild=keep)
    if config.get("DEBUG") >= 3 and (fired := rule_fires - before):
        print("prepare_rangeify fired: " + ", ".join(f"{k} x{v}" for k, v in sorted(fired.items())))
    return spec.check(out, "prepared", "prepare_rangeify")


# ---------------------------------------------------------------- unbind
SIZED_MOVEMENTS = frozenset({Op.RESHAPE, Op.EXPAND, Op.PAD, Op.SHRINK})


def _binds_in(arg: Any, out: list[UOp]) -> None:
    """The BINDs in a movement's argument: sizes, or pairs of sizes, each an int or a symbolic UOp. Ints are
    skipped without a call: every realize walks every movement of its graph here."""
    if isinstance(arg, UOp):
        out.extend(u for u in arg.toposort() if u.op is Op.BIND)
    elif isinstance(arg, tuple):
        for a in arg:
            if type(a) is not int:
                _binds_in(a, out)


def _strip(arg: Any, mapping: dict[UOp, UOp]) -> Any:
    if isinstance(arg, UOp):
        return arg.substitute(mapping)
    if isinstance(arg, tuple):
        return tuple(_strip(a, mapping) for a in arg)
    return arg


def unbind(sink: UOp) -> tuple[UOp, dict[str, int]]:
    """`sink` with every bound Variable (in sources and movement arguments) replaced by the Variable itself,
    and the bound values by name, so one compiled kernel serves every value.

    Binding one Variable to two values in one graph raises ShapeError naming both.
    """
    nodes = sink.toposort()
    binds: list[UOp] = []
    for u in nodes:  # one pass (every realize makes it): plain int sizes and (int, int) pairs skipped inline
        op = u.op
        if op is Op.BIND:
            binds.append(u)
        elif op in SIZED_MOVEMENTS:
            for a in u.arg:
                if type(a) is not int and not (type(a) is tuple and type(a[0]) is int and type(a[1]) is int):
                    _binds_in(a, binds)
    if not binds:
        return sink, {}
    var_vals: dict[str, int] = {}
    for b in binds:
        var, val = b.unbind()
        if var_vals.setdefault(var.arg[0], val) != val:
            raise ShapeError(f"variable {var.arg[0]!r} is bound to both {var_vals[var.arg[0]]} and {val}")
    mapping = {b: b.src[0] for b in binds}
    rebuilt: dict[UOp, UOp] = {}
    for u in nodes:
        src = tuple(rebuilt[s] for s in u.src)
        rebuilt[u] = mapping.get(u) or (u if src == u.src and not isinstance(u.arg, (tuple, UOp)) else
                                        UOp(u.op, u.dtype, src, _strip(u.arg, mapping)))
        if rebuilt[u] is not u and u not in mapping:
            placements.carry_intent(u, rebuilt[u])
    return rebuilt[sink], var_vals
