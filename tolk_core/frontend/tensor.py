"""Tensor: the lazy front end. Every operation builds tensor-level UOps; `realize()` schedules and runs them.

Contracts:
- A Tensor holds one UOp (its value), its device name and nothing else. Nothing computes until `realize()`,
  `numpy()`, `item()` or `tolist()`; `repr` never realizes.
- Broadcasting and type promotion follow numpy/torch: shapes align on the right, a size-1 axis stretches, and
  Python scalars are weak (they take the tensor's dtype unless a float meets an integer tensor).
- Shape, axis and device mistakes raise `ShapeError` / `DeviceMismatchError` naming the shapes or devices.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tolk_core.engine import buffers as storage
from tolk_core.engine import realize as engine
from tolk_core.engine.run import capturing
from tolk_core.errors import DeviceMismatchError, JitError, ShapeError
from tolk_core.frontend.ops_index import IndexMixin
from tolk_core.frontend.ops_math import MathMixin
from tolk_core.frontend.ops_nn import NNMixin
from tolk_core.frontend.ops_reduce import ReduceMixin, is_half
from tolk_core.frontend.ops_shape import ShapeMixin
from tolk_core.frontend.random import RandomMixin
from tolk_core.ir.dtype import DType, dtypes, promote_types
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.shape import movement_shape
from tolk_core.ir.uop import UOp, prod, resolve, sint, sym_eq
from tolk_core.schedule import placements

Scalar = int | float | bool
# Filled only while `tolk_core.function` traces a body (frontend/function.py pushes and pops them around the
# trace), never at import: called with a Tensor before its data is read (a traced body must not read data)...
read_checks: list[Callable[[Tensor], None]] = []
# ... and with (target, value) by assign before it stores; a hook returning True has taken the store (the trace
# records stores into the body's parameters)
assign_hooks: list[Callable[[Tensor, Tensor], bool]] = []


class ReadGuard:
    """Attached to a Tensor (`Tensor._read_guard`) by whoever must vet reads of its data: `check(t)` raises
    when the data may not be read (a jitted call's output whose buffer a later call overwrote)."""

    def check(self, t: Tensor) -> None:
        raise NotImplementedError


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    """Compute every lazy tensor of `tensors` (one schedule per device) and point each at its storage."""
    by_device: dict[str, list[Tensor]] = {}
    for t in tensors:
        by_device.setdefault(t.device, []).append(t)
    for device, ts in by_device.items():
        for t, view in zip(ts, engine.realize(device, [t.uop for t in ts]), strict=True):
            t.uop = view
_LOG2_E, _LN_2 = math.log2(math.e), math.log(2)


def _resolve_device(device: str | None) -> str:
    from tolk_core.plugins import Device
    return Device.canonicalize(device) if device is not None else Device.DEFAULT


def _normalize_axis(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShapeError(f"axis {axis} is out of range for a tensor of {ndim} dimension(s)")
    return axis % max(ndim, 1)


def _views_storage(u: UOp) -> bool:
    """Whether `u` is storage seen through movements and bitcasts only (so a store into it is defined)."""
    while u.op in GroupOp.Movement or u.op is Op.BITCAST:
        u = u.src[0]
    return u.op is Op.BUFFER


def _views_param(u: UOp) -> bool:
    """Whether `u` views an inline call's parameter (through movements, bitcasts and states after stores)."""
    while u.op in GroupOp.Movement or u.op in (Op.BITCAST, Op.AFTER):
        u = u.src[0]
    return u.op is Op.PARAM


def _is_neg1(s: Any) -> bool:
    return isinstance(s, int) and s == -1


def _sint(x: Any) -> sint:
    """A size or offset: a Python int, or a symbolic expression of bound Variables."""
    return x if isinstance(x, UOp) else int(x)


def _as_const(value: Scalar, dt: DType) -> Scalar:
    """A Python value as a constant of `dt` (C conversion rules: floats truncate into integers)."""
    if dtypes.is_float(dt):
        return float(value)
    return bool(value) if dtypes.is_bool(dt) else int(value)


def _broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for sizes in zip(*padded, strict=True):
        non_one = {s for s in sizes if s != 1}
        if len(non_one) > 1:
            raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(non_one.pop() if non_one else 1)
    return tuple(out)


class Tensor(MathMixin, ReduceMixin, ShapeMixin, IndexMixin, NNMixin, RandomMixin):
    """A lazily evaluated n-dimensional array on one device. The core (construction, movement, arithmetic,
    basic reductions) lives here; the wider op surface comes from the mixins, one module per job."""

    # `_requires_grad`, `_grad`: autograd's; `_read_guard`: a ReadGuard (unset for most tensors)
    __slots__ = ("uop", "device", "__weakref__", "_requires_grad", "_grad", "_read_guard")
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, data: Any, device: str | None = None, dtype: Any = None):
        self.device = _resolve_device(device)
        if isinstance(data, UOp):
            self.uop = data
            if data.op is Op.CONST:
                placements.seed_constant(data)
            return
        if isinstance(data, Tensor):
            data = data.numpy()
        dt = dtypes.parse(dtype) if dtype is not None else None
        if isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            dt = dt or dtypes.from_py(data)
            self.uop = UOp.const(dt, _as_const(data, dt))
            placements.seed_constant(self.uop)
            return
        arr = np.asarray(data)
        if dt is None:
            if arr.dtype == np.float64 and not isinstance(data, np.ndarray):
                dt = dtypes.default_float  # Python floats become the default float, as in torch
            elif arr.dtype == np.int64 and not isinstance(data, np.ndarray):
                dt = dtypes.default_int
            else:
                dt = dtypes.from_np(arr.dtype)
        # ascontiguousarray makes a 0-d array 1-d: keep the shape
        arr = np.ascontiguousarray(arr.astype(dtypes.to_np(dt), copy=False)).reshape(arr.shape)
        self.uop = storage.from_numpy(arr, dt, self.device)
        placements.seed_input(storage.base_buffer(self.uop))

    # ---- construction helpers ----
    @staticmethod
    def _const(value: Scalar, shape: tuple[int, ...], dtype: DType, device: str | None) -> Tensor:
        t = Tensor(UOp.const(dtype, _as_const(value, dtype)), device)
        return t.reshape((1,) * len(shape)).expand(shape) if shape else t

    @staticmethod
    def _shape_arg(shape: tuple) -> tuple[int, ...]:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return tuple(shape)

    @staticmethod
    def full(shape: Sequence[int] | int, fill_value: Scalar, dtype: Any = None, device: str | None = None) -> Tensor:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"negative size in shape {shape}")
        dt = dtypes.parse(dtype) if dtype is not None else dtypes.from_py(fill_value)
        return Tensor._const(fill_value, shape, dt, device)

    @staticmethod
    def zeros(*shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        return Tensor.full(Tensor._shape_arg(shape), 0, dtypes.parse(dtype or dtypes.default_float), device)

    @staticmethod
    def ones(*shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        return Tensor.full(Tensor._shape_arg(shape), 1, dtypes.parse(dtype or dtypes.default_float), device)

    @staticmethod
    def empty(*shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        shape = Tensor._shape_arg(shape)
        dt = dtypes.parse(dtype or dtypes.default_float)
        device = _resolve_device(device)
        buf = storage.new_buffer(device, math.prod(shape), dt)
        placements.seed_input(buf)
        return Tensor(storage.view_as(buf, shape), device)

    @staticmethod
    def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: Any = None,
               device: str | None = None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be zero")
        dt = dtypes.parse(dtype) if dtype is not None else (
            dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.default_int)
        # uploaded rather than computed: a computed arange costs O(n^2) work or a special op, an upload O(n)
        return Tensor(np.arange(start, stop, step).astype(dtypes.to_np(dt)), device, dt)

    # ---- properties ----
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.uop.shape)

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

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"

    # ---- realization ----
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
        if capturing():
            raise JitError("cannot read tensor data while a JIT captures: the value would be baked into every "
                           "replay. Return the tensor from the jitted function and read it outside")
        if (guard := getattr(self, "_read_guard", None)) is not None:
            guard.check(self)
        for check in read_checks:
            check(self)
        placements.seed_observed(self.uop)
        realize_tensors([self])
        return storage.to_numpy(self.uop, self.shape, self.dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.numpy()
        return out.astype(dtype) if dtype is not None else out

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise ShapeError(f"item() needs a tensor of one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def assign(self, value: Any) -> Tensor:
        """Write `value` (broadcast and cast to this tensor's shape and dtype) into this tensor's storage, in
        place: other tensors viewing the same storage see the new values. A destination that is a broadcast
        (an expand of an axis of one) raises BroadcastStoreError. A value on another device is copied here. A
        tensor without storage yet (lazy) gets new storage holding the value (stored now, like any assign)."""
        if not isinstance(value, Tensor):
            value = Tensor.full(self.shape, value, self.dtype, self.device)
        value = value.cast(self.dtype)._broadcast_to(self.shape) if value.shape != self.shape else \
            value.cast(self.dtype)
        if any(hook(self, value) for hook in assign_hooks):
            return self
        if not _views_storage(self.uop):
            if not all(isinstance(d, int) for d in self.shape):  # symbolic: the value is this tensor now
                self.uop = value.to(self.device).uop
                return self
            # no storage yet: this tensor gets its own, and the value is stored there now (a lazy tensor
            # assigned in a loop keeps a graph of constant size, and never aliases the value's storage)
            self.uop = Tensor.empty(*self.shape, dtype=self.dtype, device=self.device).uop
        engine.assign(self.device, self.uop, value.uop)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if not _views_storage(self.uop) and not _views_param(self.uop):  # (a PARAM: a call body's argument)
            self.realize()  # the selection must view this tensor's own storage
        self[index].assign(value)

    def to(self, device: str) -> Tensor:
        """This tensor on `device`, lazily: the copy happens when the result is realized (a COPY node)."""
        device = _resolve_device(device)
        if device == self.device:
            return self
        return Tensor(UOp(Op.COPY, self.dtype, (self.uop, UOp(Op.DEVICE, dtypes.void, (), device))), device)

    # ---- movement ----
    def _mop(self, op: Op, arg: Any) -> Tensor:
        movement_shape(op, self.shape, arg)  # validates, raising ShapeError
        return Tensor(UOp(op, self.dtype, (self.uop,), arg), self.device)

    def reshape(self, *shape: Any) -> Tensor:
        shape = self._shape_arg(shape)
        if sum(map(_is_neg1, shape)) > 1:
            raise ShapeError(f"reshape to {shape}: only one dimension can be -1")
        if any(map(_is_neg1, shape)):
            known = prod(s for s in shape if not _is_neg1(s))
            numel = self.numel()
            if isinstance(known, UOp) or isinstance(numel, UOp):
                raise ShapeError(f"reshape of symbolic shape {self.shape} to {shape}: -1 needs concrete sizes")
            if known == 0 or numel % known:
                raise ShapeError(f"cannot reshape tensor of shape {self.shape} to {shape}")
            shape = tuple(numel // known if _is_neg1(s) else s for s in shape)
        if any(s < 0 for s in shape) or not sym_eq(prod(shape), self.numel()):
            raise ShapeError(f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) to {shape}")
        return self if shape == self.shape else self._mop(Op.RESHAPE, shape)

    def permute(self, *order: Any) -> Tensor:
        order = tuple(_normalize_axis(a, self.ndim) for a in self._shape_arg(order))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute order {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self if order == tuple(range(self.ndim)) else self._mop(Op.PERMUTE, order)

    def expand(self, *shape: Any) -> Tensor:
        shape = self._shape_arg(shape)
        if len(shape) < self.ndim:
            raise ShapeError(f"cannot expand shape {self.shape} to {shape}: fewer dimensions")
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape)
        new = tuple(o if s == -1 else s for s, o in zip(shape, x.shape, strict=True))
        for o, s in zip(x.shape, new, strict=True):
            if o != s and o != 1:
                raise ShapeError(f"cannot expand shape {self.shape} to {shape}")
        return x if new == x.shape else x._mop(Op.EXPAND, new)

    def transpose(self, d0: int = -2, d1: int = -1) -> Tensor:
        order = list(range(self.ndim))
        a, b = _normalize_axis(d0, self.ndim), _normalize_axis(d1, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        axes = {_normalize_axis(a, self.ndim) for a in ((axis,) if isinstance(axis, int) else axis)}
        return self._mop(Op.FLIP, tuple(i in axes for i in range(self.ndim))) if axes else self

    def pad(self, padding: Sequence[tuple[int, int]], value: Scalar = 0) -> Tensor:
        """Pad each axis by (before, after); `padding` has one pair per axis (torch's flat form also accepted)."""
        padding = tuple(padding)
        if padding and isinstance(padding[0], int):  # torch style: last axis first, flat pairs
            flat = padding
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
            padding = tuple([(0, 0)] * (self.ndim - len(pairs)) + list(reversed(pairs)))
        if len(padding) != self.ndim:
            raise ShapeError(f"pad needs one (before, after) pair per axis of {self.shape}, got {padding}")
        padding = tuple((_sint(b), _sint(a)) for b, a in padding)
        if any(b < 0 or a < 0 for b, a in padding):  # negative padding crops
            x = self.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(padding, self.shape, strict=True)))
            return x.pad(tuple((max(b, 0), max(a, 0)) for b, a in padding), value)
        if all(p == (0, 0) for p in padding):
            return self
        out = self._mop(Op.PAD, padding)
        if value == 0:
            return out
        mask = Tensor.full(self.shape, True, dtypes.bool, self.device)._mop(Op.PAD, padding)
        return mask.where(out, value)

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        arg = tuple((0, s) if a is None else (_sint(a[0]), _sint(a[1])) for a, s in zip(arg, self.shape, strict=True))
        if len(arg) != self.ndim:
            raise ShapeError(f"shrink needs one (start, end) per axis of {self.shape}, got {arg}")
        return self if all(a == (0, s) for a, s in zip(arg, self.shape, strict=True)) else self._mop(Op.SHRINK, arg)

    def _strided(self, steps: list[int]) -> Tensor:
        """Every steps[a]-th element along each axis a, starting at the first."""
        x = self
        for axis, step in enumerate(steps):
            if step == 1 or x.shape[axis] == 0:
                continue
            n = math.ceil(x.shape[axis] / step)
            pad = [(0, 0)] * x.ndim
            pad[axis] = (0, n * step - x.shape[axis])
            x = x.pad(pad)
            x = x.reshape(x.shape[:axis] + (n, step) + x.shape[axis + 1:])
            x = x.shrink([(0, s) for s in x.shape[:axis + 1]] + [(0, 1)] + [(0, s) for s in x.shape[axis + 2:]])
            x = x.reshape(x.shape[:axis + 1] + x.shape[axis + 2:])
        return x

    # ---- elementwise ----
    def _coerce(self, other: Any, reflected: bool = False) -> tuple[Tensor, Tensor]:
        """Both operands as Tensors of one dtype and one broadcast shape."""
        if isinstance(other, Tensor):
            if other.device != self.device:
                raise DeviceMismatchError(f"operands are on different devices: {self.device} and {other.device}")
            dt = promote_types(self.dtype, other.dtype)
            a, b = self, other
        else:
            if not isinstance(other, (bool, int, float, np.generic)):
                raise TypeError(f"cannot combine a Tensor with {type(other).__name__}")
            other = other.item() if isinstance(other, np.generic) else other
            dt = self.dtype
            if isinstance(other, float) and not dtypes.is_float(dt):
                dt = dtypes.default_float
            elif isinstance(other, int) and not isinstance(other, bool) and dtypes.is_bool(dt):
                dt = dtypes.default_int
            a, b = self, Tensor(UOp.const(dt, _as_const(other, dt)), self.device)
        a, b = a.cast(dt), b.cast(dt)
        shape = _broadcast_shape(a.shape, b.shape)
        a, b = a._broadcast_to(shape), b._broadcast_to(shape)
        return (b, a) if reflected else (a, b)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        return self if self.shape == shape else self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)

    def _alu(self, op: Op, *others: Tensor, dtype: DType | None = None) -> Tensor:
        return Tensor(UOp(op, dtype or self.dtype, (self.uop, *(o.uop for o in others))), self.device)

    def _binary(self, op: Op, other: Any, reflected: bool = False) -> Tensor:
        a, b = self._coerce(other, reflected)
        return a._alu(op, b)

    def cast(self, dtype: Any) -> Tensor:
        dt = dtypes.parse(dtype)
        return self if dt == self.dtype else self._alu(Op.CAST, dtype=dt)

    def __add__(self, other: Any) -> Tensor: return self._binary(Op.ADD, other)
    def __radd__(self, other: Any) -> Tensor: return self._binary(Op.ADD, other, True)
    def __mul__(self, other: Any) -> Tensor: return self._binary(Op.MUL, other)
    def __rmul__(self, other: Any) -> Tensor: return self._binary(Op.MUL, other, True)

    def __sub__(self, other: Any) -> Tensor:
        a, b = self._coerce(other)
        return a._alu(Op.ADD, -b)

    def __rsub__(self, other: Any) -> Tensor:
        a, b = self._coerce(other, True)
        return a._alu(Op.ADD, -b)

    def __neg__(self) -> Tensor:
        if dtypes.is_bool(self.dtype):
            raise TypeError("negation of a bool tensor: use logical_not")
        return self._alu(Op.NEG)

    def _as_float(self) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

    def __truediv__(self, other: Any) -> Tensor:
        a, b = self._coerce(other)
        a, b = a._as_float(), b._as_float()
        return a._alu(Op.FDIV, b)

    def __rtruediv__(self, other: Any) -> Tensor:
        a, b = self._coerce(other, True)
        a, b = a._as_float(), b._as_float()
        return a._alu(Op.FDIV, b)

    def maximum(self, other: Any) -> Tensor:
        a, b = self._coerce(other)
        if dtypes.is_bool(a.dtype):
            return a.cast(dtypes.uint8)._alu(Op.MAX, b.cast(dtypes.uint8)).cast(dtypes.bool)
        return a._alu(Op.MAX, b)

    def minimum(self, other: Any) -> Tensor:
        a, b = self._coerce(other)
        if dtypes.is_float(a.dtype):  # through MAX, which keeps a NaN of either operand; negation is exact
            return -((-a)._alu(Op.MAX, -b))
        return (a < b).where(a, b)

    def logical_and(self, other: Any) -> Tensor:
        a, b = self._coerce(other)
        return a.cast(dtypes.bool)._alu(Op.AND, b.cast(dtypes.bool))

    def logical_not(self) -> Tensor:
        return self.cast(dtypes.bool)._alu(Op.CMPNE, Tensor(UOp.const(dtypes.bool, True), self.device)
                                            ._broadcast_to(self.shape), dtype=dtypes.bool)

    def _cmp(self, op: Op, other: Any, reflected: bool = False) -> Tensor:
        a, b = self._coerce(other, reflected)
        return a._alu(op, b, dtype=dtypes.bool)

    def __lt__(self, other: Any) -> Tensor: return self._cmp(Op.CMPLT, other)
    def __gt__(self, other: Any) -> Tensor: return self._cmp(Op.CMPLT, other, True)
    def __le__(self, other: Any) -> Tensor: return (self > other).logical_not()
    def __ge__(self, other: Any) -> Tensor: return (self < other).logical_not()
    def __eq__(self, other: Any) -> Tensor: return self._cmp(Op.CMPEQ, other)  # type: ignore[override]
    def __ne__(self, other: Any) -> Tensor: return self._cmp(Op.CMPNE, other)  # type: ignore[override]
    __hash__ = object.__hash__

    def where(self, x: Any, y: Any) -> Tensor:
        """Elementwise `x if self else y`, broadcasting all three; scalars are weak as in arithmetic."""
        if not isinstance(x, Tensor):
            if not isinstance(y, Tensor):
                dt = dtypes.default_float if any(isinstance(v, float) for v in (x, y)) else dtypes.from_py(x)
                y = Tensor(UOp.const(dt, _as_const(y, dt)), self.device)
            y, x = y._coerce(x)
        else:
            x, y = x._coerce(y)
        shape = _broadcast_shape(self.shape, x.shape)
        cond = self.cast(dtypes.bool)._broadcast_to(shape)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return Tensor(UOp(Op.WHERE, x.dtype, (cond.uop, x.uop, y.uop)), self.device)

    def relu(self) -> Tensor:
        return self.maximum(0)

    def exp(self) -> Tensor:
        return (self._as_float() * _LOG2_E)._alu(Op.EXP2)

    def log(self) -> Tensor:
        return self._as_float()._alu(Op.LOG2) * _LN_2

    def sqrt(self) -> Tensor:
        return self._as_float()._alu(Op.SQRT)

    # ---- reductions ----
    def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        return tuple(sorted({_normalize_axis(a, self.ndim) for a in axes}))

    def _reduce(self, op: Op, axis: Any, keepdim: bool, dtype: DType | None = None, empty_ok: bool = False) -> Tensor:
        """Reduce with `op` over `axis`; an empty axis gives op's identity for ADD/MUL (or when `empty_ok`),
        else a ShapeError (the max of nothing is undefined)."""
        axes = self._axes(axis)
        x = self.cast(dtype) if dtype is not None else self
        if self.ndim == 0:
            return x
        out_shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        if op is Op.MAX and not empty_ok and any(self.shape[a] == 0 for a in axes) and resolve(prod(out_shape) != 0):
            raise ShapeError(f"cannot take {op.name.lower()} over an empty axis of shape {self.shape}")
        ret = Tensor(UOp(Op.REDUCE_AXIS, x.dtype, (x.uop,), (op, axes)), self.device) if axes else x
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        """Sum over `axis`. Without `dtype`: small integers and bools sum in (and give) int32/uint32; half
        floats sum in float32 and give their own dtype, as numpy and torch do."""
        from tolk_core.ir.dtype import sum_acc_dtype
        acc = dtypes.parse(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        out = self._reduce(Op.ADD, axis, keepdim, acc)
        return out.cast(self.dtype) if dtype is None and is_half(self.dtype) else out

    def max(self, axis: Any = None, keepdim: bool = False) -> Tensor:
        return self._reduce(Op.MAX, axis, keepdim)

    def min(self, axis: Any = None, keepdim: bool = False) -> Tensor:
        if dtypes.is_unsigned(self.dtype) or dtypes.is_bool(self.dtype):
            top = dtypes.max(self.dtype)
            return top - (top - self)._reduce(Op.MAX, axis, keepdim) if not dtypes.is_bool(self.dtype) else \
                self.logical_not().max(axis, keepdim).logical_not()
        return -((-self)._reduce(Op.MAX, axis, keepdim))

    def mean(self, axis: Any = None, keepdim: bool = False) -> Tensor:
        axes = self._axes(axis)
        n = math.prod(self.shape[a] for a in axes)
        x = self._as_float()
        out = x.sum(axis, keepdim, dtype=dtypes.float32 if is_half(x.dtype) else None)  # numpy: float32 inside
        return (out / n if n else out * float("nan")).cast(x.dtype)

    # ---- composites ----
    def matmul(self, other: Tensor) -> Tensor:
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError(f"matmul needs tensors of at least one dimension, got {self.shape} and {other.shape}")
        a = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
        b = other.reshape(other.shape[0], 1) if other.ndim == 1 else other
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul of shapes {self.shape} and {other.shape}: inner sizes {a.shape[-1]} and "
                             f"{b.shape[-2]} differ")
        batch = _broadcast_shape(a.shape[:-2], b.shape[:-2])
        n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
        a = a._broadcast_to(batch + (n, k)).reshape(batch + (n, 1, k))
        b = b._broadcast_to(batch + (k, m)).transpose(-1, -2).reshape(batch + (1, m, k))
        out = (a * b).sum(axis=-1)
        if self.ndim == 1:
            out = out.reshape(out.shape[:-2] + out.shape[-1:])
        if other.ndim == 1:
            out = out.reshape(out.shape[:-1])
        return out

    __matmul__ = matmul

    def softmax(self, axis: int = -1) -> Tensor:
        x = self._as_float()
        e = (x - x.max(axis=axis, keepdim=True)).exp()
        return e / e.sum(axis=axis, keepdim=True)



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
        return Tensor(UOp(Op.DETACH, self.dtype, (self.uop,)), self.device)

    def contiguous_backward(self) -> Tensor:
        """The same values; the gradient flowing back through here is realized (made contiguous) first."""
        return Tensor(UOp(Op.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)), self.device)
