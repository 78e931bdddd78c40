"""Tensor: the lazy front end. Every operation builds tensor-level UOps; `realize()` schedules and runs them.

Contracts:
- A Tensor holds one UOp (its value), its device name and nothing else. Nothing computes until `realize()`,
  `numpy()`, `item()` or `tolist()`; `repr` never realizes.
- Broadcasting and type promotion follow numpy/torch: shapes align on the right, a size-1 axis stretches, and
  Python scalars are weak (they take the tensor's dtype unless a float meets an integer tensor).
- Shape, axis and device mistakes raise `ShapeError` / `DeviceMismatchError` naming the shapes or devices.

This module holds the class and what every tensor is: its state (uop, device), its properties, realization
and reading its data, writing into its storage (`assign`, `t[i] = v`), moving it to another device, and the
autograd entry points. The op surface comes from one mixin per subject, one module each; an op goes in the
module whose docstring describes it:

- construction.py: tensors from arguments (`full`, `zeros`, `arange`, `eye`, `*_like`, ...)
- movement.py: rearranging elements (`reshape`, `permute`, `pad`, `shrink`, `cat`, ...)
- elementwise.py: one element from the elements at the same index (arithmetic, comparisons, maths, casts)
- reductions.py: combining along axes (`sum`, `max`, `mean`, `argmax`, ...)
- indexing.py: `t[index]`
- gather_scatter.py: gathers and scatters along one axis (`gather`, `scatter`, `scatter_reduce`)
- sorting.py: ordering along an axis (`sort`, `argsort`, `topk`)
- einsum.py: Einstein summation (`Tensor.einsum`)
- nn_ops.py: model-level composites (`matmul`, `softmax`, `conv2d`, ...)
- random.py: seeded random tensors
- interop.py: memory shared with numpy, torch and DLPack (`__array__`, `__dlpack__`, `from_dlpack`)

The mixins build new tensors with `type(self)(uop, device)` and never import this module at run time. Their
underscore methods (`_alu`, `_coerce`, `_mop`, `_reduce`, `_axes`, `_broadcast_to`, `_as_float`, ...) are the
building blocks the mixins share with each other through `self`; nothing outside the front end calls them.
"""
from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tolk_core.engine import buffers as storage
from tolk_core.engine import realize as engine
from tolk_core.engine.run import capturing
from tolk_core.errors import JitError, ShapeError
from tolk_core.frontend.construction import ConstructionMixin, as_const, resolve_device
from tolk_core.frontend.einsum import EinsumMixin
from tolk_core.frontend.elementwise import ElementwiseMixin
from tolk_core.frontend.gather_scatter import GatherScatterMixin
from tolk_core.frontend.indexing import IndexingMixin
from tolk_core.frontend.interop import InteropMixin
from tolk_core.frontend.movement import MovementMixin
from tolk_core.frontend.nn_ops import NNMixin
from tolk_core.frontend.random import RandomMixin
from tolk_core.frontend.reductions import ReductionMixin
from tolk_core.frontend.sharding import ShardingMixin, resolve_devices
from tolk_core.frontend.sorting import SortingMixin
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp, prod, sint
from tolk_core.runtime import ranks
from tolk_core.schedule import placements

Scalar = int | float | bool
# the ops whose node may be a constant or storage seen through views: `_wrap` takes `_adopt`'s path for them
_STORED_OR_CONST = GroupOp.Movement | {Op.BITCAST, Op.BUFFER, Op.CONST}
# Filled only while `tolk_core.function` traces a body (frontend/function.py pushes and pops them around the
# trace), never at import: called with a Tensor before its data is read (a traced body must not read data)...
read_checks: list[Callable[[Tensor], None]] = []
# ... with (host data as given, its new storage) by every upload from host data (the JIT records which
# storage a NumPy argument went into, to upload it again on every replay) ...
upload_hooks: list[Callable[[Any, UOp], None]] = []
# ... and with (target, value) by assign before it stores; a hook returning True has taken the store (the trace
# records stores into the body's parameters)
assign_hooks: list[Callable[[Tensor, Tensor], bool]] = []


# id -> a weak reference to every Tensor made with a value that is not storage (keyed by id: Tensor.__eq__ builds
# a graph, so tensors cannot be set members). A write into storage first realizes those that read it
# (`before_write`). Registering is on every op's path, so it is a plain dict of weak references without callbacks
# (a WeakValueDictionary entry costs a Python-level KeyedRef and a callback per tensor freed): entries of freed
# tensors stay until `_live_lazy` reads the registry or it outgrows `_lazy_purge_at`, when they are dropped (an
# id reused by a new tensor overwrites its entry, so every live entry is its own tensor's).
_lazy: dict[int, weakref.ReferenceType[Tensor]] = {}
_lazy_purge_at = [4096]


def _register_lazy(t: Tensor) -> None:
    _lazy[id(t)] = weakref.ref(t)
    if len(_lazy) > _lazy_purge_at[0]:
        _live_lazy()


def _live_lazy() -> list[Tensor]:
    """Every live registered tensor; drops the entries of freed ones (amortised: the next purge waits until the
    registry has doubled)."""
    live = {k: r for k, r in _lazy.items() if r() is not None}
    _lazy.clear()
    _lazy.update(live)
    _lazy_purge_at[0] = max(4096, 2 * len(live))
    return [t for r in live.values() if (t := r()) is not None]


def storage_of(u: UOp) -> UOp:
    """The BUFFER (or PARAM) under `u`'s movements and bitcasts: what a store into `u` writes."""
    while u.op in GroupOp.Movement or u.op is Op.BITCAST:
        u = u.src[0]
    return u


def before_write(buf: UOp, keep: UOp) -> None:
    """Eager semantics for lazy values: every live lazy Tensor whose graph reads storage `buf` is computed
    now, before a write changes `buf`, so it keeps the values it was built from (as in numpy and torch). The
    value being stored (`keep`) is not: the store computes it, and `after_write` points it at the result.
    Costs nothing but this scan when no lazy reader exists."""
    before_writes([buf], [keep])


def before_writes(bufs: Sequence[UOp], keep: Sequence[UOp]) -> None:
    """`before_write` of every storage of `bufs` at once (one scan of the lazy tensors), none of the values
    being stored (`keep`) computed: for stores whose values read none of the other stores' storage."""
    written, kept = set(bufs), {id(u) for u in keep}
    readers = [t for t in _live_lazy() if id(t.uop) not in kept and not views_storage(t.uop)
               and any(u in written for u in t.uop.toposort())]
    if readers:
        realize_tensors(readers)


def after_write(target: Tensor, value: UOp) -> None:
    """Live lazy Tensors whose value is the one just stored now read it from the store's destination, through
    a CONTIGUOUS (so they stay lazy readers: a later write into that storage first copies them out, and a write
    into one of them gives it storage of its own, not the destination's)."""
    after_writes([(target, value)])


def after_writes(stored: Sequence[tuple[Tensor, UOp]]) -> None:
    """`after_write` of every (target, value) stored, in order, with one scan of the lazy tensors (a value
    stored twice follows its first target, as one by one)."""
    target_of: dict[int, Tensor] = {}
    for target, value in stored:
        target_of.setdefault(id(value), target)
    holders: dict[int, list[Tensor]] = {}
    for t in _live_lazy():
        if id(t.uop) in target_of:
            holders.setdefault(id(t.uop), []).append(t)
    for key, ts in holders.items():
        snapshot = target_of[key].contiguous().uop
        for t in ts:
            t.uop = snapshot


def assign_together(pairs: Sequence[tuple[Tensor, Any]]) -> None:
    """`target.assign(value)` for every (target, value) pair, in order, with the same result, but as one
    schedule where that gives it: every target views storage of its own (distinct from the others'), on one
    device with every value, no value reads another target's storage (so no store can change what another
    value reads, whichever order the kernels run in), and no assign hook is active (a trace records assigns one
    by one). Otherwise one by one. For updates of many tensors at once (an optimizer's step)."""
    prepared = [(t, t._stored_value(v)) for t, v in pairs]
    if not assign_hooks and len(prepared) > 1 and (devices := _sharded_independent(prepared)) is not None:
        engine.assign_sharded_all(devices, [(t.uop, v.uop) for t, v in prepared])
        return
    bases = [storage_of(t.uop) for t, _ in prepared]
    if assign_hooks or len(prepared) < 2 or not _independent(prepared, bases):
        for t, v in prepared:
            t.assign(v)
        return
    before_writes(bases, [v.uop for _, v in prepared])
    engine.assign_all(prepared[0][0].device, [(t.uop, v.uop) for t, v in prepared])
    after_writes([(t, v.uop) for t, v in prepared])


def _sharded_independent(pairs: list[tuple[Tensor, Tensor]]) -> tuple[str, ...] | None:
    """The devices of `pairs` where `assign_together` may store them in one pass per device: every target
    sharded (or replicated) over the same devices with storage of its own for each shard (distinct from every
    other shard's), every value on those devices, and no value reading another target's storage; else None."""
    devices = pairs[0][0].device
    if not isinstance(devices, tuple) or any(t.device != devices or v.device != devices or t.uop.op is not Op.MULTI
                                             or not all(views_storage(s) for s in t.uop.src) for t, v in pairs):
        return None
    owned = [{storage_of(s) for s in t.uop.src} for t, _ in pairs]
    written = set().union(*owned)
    if len(written) != sum(len(t.uop.src) for t, _ in pairs):
        return None
    reads_other = any(u.op is Op.BUFFER and u in written and u not in own
                      for (_, v), own in zip(pairs, owned, strict=True) for u in v.uop.toposort())
    return None if reads_other else devices


def assign_stages(stages: Sequence[Sequence[tuple[Tensor, Any]]]) -> None:
    """Store `stages` of (target, value) pairs where every value is an expression of the storage before the
    first store, and a value may read other pairs' targets (an optimizer's new parameter reads the moments
    stored with it). As one schedule when the conditions of `assign_together` but the last hold and the
    scheduler keeps each read of a target before its store (it merges the kernels of one shape: docs/training.md,
    "Optimizer updates"); otherwise stage by stage, each as `assign_together`, which the caller's order of
    stages must make equal: no value reads a target of its own stage or of an earlier one."""
    prepared = [(t, t._stored_value(v)) for stage in stages for t, v in stage]
    bases = [storage_of(t.uop) for t, _ in prepared]
    if not assign_hooks and len(prepared) > 1 and _independent(prepared, bases, cross_reads=True):
        before_writes(bases, [v.uop for _, v in prepared])
        if engine.assign_all(prepared[0][0].device, [(t.uop, v.uop) for t, v in prepared], cross_reads=True):
            after_writes([(t, v.uop) for t, v in prepared])
            return
    for stage in stages:
        assign_together(stage)


def _independent(pairs: list[tuple[Tensor, Tensor]], bases: list[UOp], cross_reads: bool = False) -> bool:
    """Whether `assign_together` may store `pairs` in one schedule (see there); `bases` is each target's
    storage. `cross_reads`: values may read other targets' storage (`assign_stages`)."""
    device = pairs[0][0].device
    if len(set(bases)) < len(bases) or any(b.op is not Op.BUFFER for b in bases) or \
            any(t.device != device or v.device != device or not views_storage(t.uop) for t, v in pairs):
        return False
    if cross_reads:
        return True
    written = set(bases)
    return not any(u.op is Op.BUFFER and u in written and u is not own
                   for (_, v), own in zip(pairs, bases, strict=True) for u in v.uop.toposort())


class ReadGuard:
    """Attached to a Tensor (`Tensor._read_guard`) by whoever must vet reads of its data: `check(t)` raises
    when the data may not be read (a jitted call's output whose buffer a later call overwrote). The read
    (check, then copy out) holds `lock`, so that no writer of the data runs between the two."""

    lock: contextlib.AbstractContextManager = contextlib.nullcontext()

    def check(self, t: Tensor) -> None:
        raise NotImplementedError


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    """Compute every lazy tensor of `tensors` (one schedule per device) and point each at its storage."""
    by_device: dict[str, list[Tensor]] = {}
    for t in tensors:
        by_device.setdefault(t.device, []).append(t)
    for device, ts in by_device.items():
        # a sharded tensor's device is the tuple of its shards' devices: computed shard by shard
        views = engine.realize_sharded(device, [t.uop for t in ts]) if isinstance(device, tuple) else \
            engine.realize(device, [t.uop for t in ts])
        for t, view in zip(ts, views, strict=True):
            t.uop = view
            _lazy.pop(id(t), None)


def views_storage(u: UOp) -> bool:
    """Whether `u` is storage seen through movements and bitcasts only (so a store into it is defined)."""
    while u.op in GroupOp.Movement or u.op is Op.BITCAST:
        u = u.src[0]
    return u.op is Op.BUFFER


def views_param(u: UOp) -> bool:
    """Whether `u` views an inline call's parameter (through movements, bitcasts and states after stores):
    a value inside a `tolk_core.function` body that a store may write through."""
    while u.op in GroupOp.Movement or u.op in (Op.BITCAST, Op.AFTER):
        u = u.src[0]
    return u.op is Op.PARAM


def _python_data_dtype(arr: np.ndarray, dt: DType | None) -> DType:
    """The dtype of a tensor made from Python data (nested lists of scalars) that numpy read as `arr`, `dt`
    when given: Python floats become the default float (as in torch), Python ints default_int unless a value
    needs int64 or uint64 (`dtypes.int_dtype_of`). An int that a given integer `dt` cannot hold raises
    ScalarOverflowError, as numpy 2 does."""
    if arr.dtype == object:  # numpy keeps ints beyond uint64 as Python objects
        ints = [v for v in arr.flat if isinstance(v, int) and not isinstance(v, bool)]
        if ints:
            dtypes.int_dtype_of(min(ints), max(ints))  # raises: they fit no integer dtype
    span = (int(arr.min()), int(arr.max())) if arr.dtype.kind in "iu" and arr.size else None
    if dt is None:
        if arr.dtype == np.float64:
            return dtypes.default_float
        if arr.dtype.kind in "iu":
            return dtypes.int_dtype_of(*span) if span else dtypes.default_int
        return dtypes.from_np(arr.dtype)
    for v in span or ():
        dtypes.check_fits(dt, v)
    return dt


class Tensor(ConstructionMixin, MovementMixin, ElementwiseMixin, ReductionMixin, IndexingMixin, GatherScatterMixin,
             SortingMixin, EinsumMixin, NNMixin, RandomMixin, InteropMixin, ShardingMixin):
    """A lazily evaluated n-dimensional array on one device. Its state, data access and storage writes live
    here; its ops come from the mixins, one module per subject (see the module docstring)."""

    # `_requires_grad`, `_grad`: autograd's; `_read_guard`: a ReadGuard (unset for most tensors)
    __slots__ = ("uop", "device", "__weakref__", "_requires_grad", "_grad", "_read_guard")
    _read_guard: ReadGuard
    # typed as one name, which it is for every tensor but a sharded one: that one's is the tuple of its shards'
    # devices (docs/multi-device.md), which the code that handles sharded tensors tests for
    device: str
    uop: UOp
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, data: Any, device: str | Sequence[str] | None = None, dtype: Any = None):
        if device is not None and not isinstance(device, str):  # several devices: sharded (docs/multi-device.md)
            self.device = resolve_devices(device)  # type: ignore[assignment]
            if not isinstance(data, UOp):  # data replicated: uploaded to the first device (of this process, when
                # the devices span ranks), copied to the others
                data = Tensor(data, ranks.local_of(tuple(self.device)), dtype).shard(self.device).uop
            self._adopt(data)
            return
        self.device = resolve_device(device)
        if isinstance(data, UOp):
            self._adopt(data)
            return
        if isinstance(data, Tensor):
            data = data.numpy()
        dt = dtypes.parse(dtype) if dtype is not None else None
        if isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            dt = dt or dtypes.from_py(data)
            self.uop = UOp.const(dt, as_const(data, dt))
            placements.seed_constant(self.uop)
            return
        arr = np.asarray(data)
        if isinstance(data, np.ndarray):
            dt = dt or dtypes.from_np(arr.dtype)  # an array keeps its dtype, or converts as numpy's astype does
        else:
            dt = _python_data_dtype(arr, dt)
        # ascontiguousarray makes a 0-d array 1-d: keep the shape
        arr = np.ascontiguousarray(arr.astype(dtypes.to_np(dt), copy=False)).reshape(arr.shape)
        self.uop = storage.from_numpy(arr, dt, self.device)
        buf = storage.base_buffer(self.uop)
        assert buf is not None  # from_numpy gives a view of new storage
        placements.seed_input(buf)
        for hook in upload_hooks:
            hook(data, buf)

    def _adopt(self, u: UOp) -> None:
        self.uop = u
        if u.op is Op.CONST:
            placements.seed_constant(u)
        elif not views_storage(u):
            _register_lazy(self)

    def _wrap(self, u: UOp) -> Tensor:
        """A new tensor of node `u` on this tensor's device, which is canonical already: the ops' fast path (a
        Tensor built from a UOp and a device name resolves the name first). `_adopt` inlined for the common
        case, a computed value (neither storage nor a constant), which is registered as lazy."""
        t = object.__new__(type(self))
        t.device = self.device
        if u.op in _STORED_OR_CONST:
            t._adopt(u)
            return t
        t.uop = u
        _lazy[id(t)] = weakref.ref(t)
        if len(_lazy) > _lazy_purge_at[0]:
            _live_lazy()
        return t

    # ---- properties ----
    @property
    def shape(self) -> tuple[int, ...]:
        # typed as ints, which every size is but a bound Variable's (a UOp): the shape arithmetic of the front end
        # treats sizes as ints, and symbolic sizes pass through it unchanged
        # the front end asks for shapes dozens of times per op: the node's cached shape first
        try:
            shape = self.uop._shape
        except AttributeError:
            shape = self.uop.tensor_shape
        return shape if shape is not None else self.uop.tensor_shape  # type: ignore[return-value]

    @property
    def is_sharded(self) -> bool:
        """Whether this tensor lives on several devices (its `device` the tuple of them: docs/multi-device.md)."""
        return isinstance(self.device, tuple)

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> sint:
        """The element count; a symbolic expression when the shape holds bound Variables."""
        return prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        """The truth of the one element (as torch; this reads the data). A tensor of any other size raises
        ShapeError: its truth is ambiguous (use `.any()` or `.all()`)."""
        if self.numel() != 1:
            raise ShapeError(f"the truth value of a tensor of shape {self.shape} is ambiguous: only a one-element "
                             "tensor has one; use .any() or .all()")
        return bool(self.item())

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"

    # ---- realization and data ----
    def realize(self, *others: Tensor) -> Tensor:
        for t in (self, *others):
            placements.seed_realize(t.uop)
        realize_tensors([self, *others])
        return self

    def contiguous(self) -> Tensor:
        out = UOp(Op.CONTIGUOUS, self.dtype, (self.uop,))
        placements.seed_contiguous(out)
        return Tensor(out, self.device)

    def numpy(self) -> np.ndarray:
        """A copy of the data (`np.asarray(t)` shares it where it can: frontend/interop.py)."""
        if isinstance(self.device, tuple):  # sharded: its shards computed (the devices at the same time, as
            # realize does: docs/multi-device.md), then gathered on its first device of this process (the devices
            # may span ranks: docs/distributed.md)
            local, value = ranks.local_of(self.device), self.uop
            if value.op is not Op.MULTI or not all(views_storage(s) for s in value.src):
                value = self.realize().uop  # stored shards need no realize (it would walk the rewrite)
            if value.op is Op.MULTI and value.arg[1] is None and local in value.arg[0]:
                # replicated: that device holds the whole value, read as it is (a gather would schedule a kernel
                # and copy; a data-parallel step's loss is one: docs/multi-device.md)
                return Tensor(value.src[value.arg[0].index(local)], local).numpy()
            return self.realize().to(local).numpy()
        with self._reading():
            return storage.to_numpy(self.uop, self.shape, self.dtype)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """The checks of a read of the data, then the realize; the read happens inside (under the read guard's
        lock, so no jitted call overwrites the data mid-read)."""
        if capturing():
            raise JitError("cannot read tensor data while a JIT captures: the value would be baked into every "
                           "replay. Return the tensor from the jitted function and read it outside")
        guard = getattr(self, "_read_guard", None)
        with guard.lock if guard is not None else contextlib.nullcontext():
            if guard is not None:
                guard.check(self)
            for check in read_checks:
                check(self)
            placements.seed_observed(self.uop)
            realize_tensors([self])
            yield

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise ShapeError(f"item() needs a tensor of one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    # ---- writing into storage, devices ----
    def assign(self, value: Any) -> Tensor:
        """Write `value` (broadcast and cast to this tensor's shape and dtype) into this tensor's storage, in
        place: other tensors viewing the same storage see the new values, while a lazy value built from that
        storage before (`r = t * 2`) keeps the values it was built from (it is computed first). A destination
        that is a broadcast (an expand of an axis of one) raises BroadcastStoreError. A value on another device
        is copied here. A tensor without storage yet (lazy) gets new storage holding the value (stored now, like
        any assign)."""
        value = self._stored_value(value)
        if any(hook(self, value) for hook in assign_hooks):
            return self
        if isinstance(self.device, tuple):
            return self._assign_sharded(value)
        if not views_storage(self.uop):
            if not all(isinstance(d, int) for d in self.shape):  # symbolic: the value is this tensor now
                self.uop = value.to(self.device).uop
                return self
            # no storage yet: this tensor gets its own, and the value is stored there now (a lazy tensor
            # assigned in a loop keeps a graph of constant size, and never aliases the value's storage)
            self.uop = Tensor.empty(*self.shape, dtype=self.dtype, device=self.device).uop
            _lazy.pop(id(self), None)
        before_write(storage_of(self.uop), value.uop)
        engine.assign(self.device, self.uop, value.uop)
        after_write(self, value.uop)
        return self

    def _stored_value(self, value: Any) -> Tensor:
        """`value` as `assign` stores it into this tensor: a Tensor of this tensor's dtype and shape."""
        if not isinstance(value, Tensor):
            value = Tensor.full(self.shape, value, self.dtype, self.device)
        return value.cast(self.dtype)._broadcast_to(self.shape) if value.shape != self.shape else \
            value.cast(self.dtype)

    def _assign_sharded(self, value: Tensor) -> Tensor:
        """`assign` into a sharded tensor (its storage made first if it is lazy): `engine.assign_sharded`."""
        devices: tuple[str, ...] = self.device  # type: ignore[assignment]
        if self.uop.op is not Op.MULTI or not all(views_storage(s) for s in self.uop.src):
            self.realize()
        engine.assign_sharded(devices, self.uop, value.uop)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        """`t[index] = value`: `index_put_(index, value)` (frontend/indexing.py): integer-array indices scatter,
        the last write winning where an element is selected twice."""
        self.index_put_(index, value)

    def to(self, device: str | Sequence[str] | None) -> Tensor:
        """This tensor on `device` (None: the default device), lazily: the copy happens when the result is realized
        (a COPY node). A sequence of devices replicates it on each (`shard(devices)`); a sharded tensor moved to
        one device is gathered there."""
        if device is not None and not isinstance(device, str):  # several devices: replicated there
            devices = resolve_devices(device)
            if devices == self.device:
                return self
            return (self.to(ranks.local_of(devices)) if isinstance(self.device, tuple) else self).shard(devices)
        device = resolve_device(device)
        if device == self.device:
            return self
        return Tensor(UOp(Op.COPY, self.dtype, (self.uop, UOp(Op.DEVICE, dtypes.void, (), device))), device)

    def to_(self, device: str | Sequence[str] | None) -> Tensor:
        """Move this tensor to `device` in place: the same Tensor object now views new storage there holding
        its values (copied now; a tuple of devices replicates it). Whether it requires grad is kept; its `.grad` (on
        the old device) is dropped.
        For `Module.to`, so that whoever holds the tensor (an optimizer) follows it."""
        moved = self.to(device).contiguous().realize()
        self.uop, self.device = moved.uop, moved.device
        self.grad = None
        return self

    # ---- autograd (logic in frontend/autograd.py) ----
    @property
    def requires_grad(self) -> bool:
        """Whether `backward()` accumulates a gradient into this tensor's `.grad` (a lazy tensor is realized
        when marked)."""
        return getattr(self, "_requires_grad", False)

    @requires_grad.setter
    def requires_grad(self, on: bool) -> None:
        from tolk_core.frontend import autograd
        self._requires_grad = autograd.track(self, on)

    def requires_grad_(self, on: bool = True) -> Tensor:
        self.requires_grad = on
        return self

    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (a lazy Tensor until realized), or None."""
        return getattr(self, "_grad", None)

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        self._grad = value

    def backward(self, gradient: Tensor | None = None) -> None:
        """Accumulate d(self)/d(t) into `t.grad` for every tensor t marked requires_grad that self depends on."""
        from tolk_core.frontend import autograd
        autograd.backward(self, gradient)

    def detach(self) -> Tensor:
        """The same values, with no gradient flowing back through them."""
        return self._wrap(UOp.shaped(Op.DETACH, self.dtype, (self.uop,), None, self.shape))

    def contiguous_backward(self) -> Tensor:
        """The same values; the gradient flowing back through here is realized (made contiguous) first."""
        return Tensor(UOp(Op.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)), self.device)
