"""Making tensors from nothing or from another tensor's shape: `full`, `zeros`, `ones`, `empty`, `arange`, `eye`,
`full_like`, `zeros_like`, `ones_like` (random tensors are in random.py).

An op belongs here when it creates a tensor whose values come from its arguments, not from another tensor's
values. Constants are one CONST reshaped and expanded to the shape (no upload, no storage until a kernel needs
one); `empty` is storage with undefined contents; an integer `arange` is computed where it is read (an IOTA,
the integers along its axis, scaled and shifted: no storage, and a one-hot comparison of indices against it is
a gather rangeify turns into a load, docs/performance.md "Gathers"), a float one is uploaded; `eye` is a padded
column of ones read with a row length one longer than the rows.

Also the two helpers every Tensor constructor needs: `resolve_device` and `as_const`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.engine import buffers as storage
from tolk_core.errors import ShapeError
from tolk_core.frontend.arguments import as_sizes, new_shape
from tolk_core.frontend.sharding import resolve_devices
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule import multi, placements

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Scalar, Tensor


# canonical names already resolved under one registry snapshot (the registry object itself is kept, so a rebuilt
# registry is seen by identity): every op's new Tensor resolves its device, almost always an already canonical
# name, and canonicalization is a pure function of the snapshot
_resolved: tuple[object, dict[str, str]] = (None, {})


def resolve_device(device: str | None) -> str:
    """The canonical name of `device` (e.g. "cpu:0" -> "CPU"), or the default device when None."""
    from tolk_core.plugins import Device  # (the plugins load at first use, not when the front end is imported)
    if device is None:
        return Device.DEFAULT
    global _resolved
    registry, names = _resolved
    if registry is not (current := Device.registry):
        registry, names = _resolved = (current, {})
    if (canon := names.get(device)) is None:
        canon = names[device] = Device.canonicalize(device)
    return canon


def as_const(value: Scalar, dt: DType) -> Scalar:
    """A Python value as a constant of `dt` (C conversion rules: floats truncate into integers). A Python int
    that integer `dt` cannot hold raises ScalarOverflowError, as numpy 2 does, instead of wrapping."""
    dtypes.check_fits(dt, value)
    if dtypes.is_float(dt):
        return float(value)
    return bool(value) if dtypes.is_bool(dt) else int(value)


def _int_span(values: np.ndarray, start: Scalar) -> tuple[int, int]:
    """The least and greatest of the integers `values` as Python ints (`start` twice when there are none)."""
    return (int(values.min()), int(values.max())) if values.size else (int(start), int(start))


class ConstructionMixin:
    """Constructors; mixed into `Tensor`."""

    __slots__ = ()

    @classmethod
    def _const(cls: type[Tensor], value: Scalar, shape: tuple[int, ...], dtype: DType, device: str | None) -> Tensor:
        t = cls(UOp.const(dtype, as_const(value, dtype)), device)
        return t.reshape((1,) * len(shape)).expand(shape) if shape else t

    @staticmethod
    def _shape_arg(shape: tuple, what: str = "shape") -> tuple[int, ...]:
        """A shape given as separate sizes (`zeros(2, 3)`) or as one sequence (`zeros((2, 3))`); each size an
        int (numpy integers taken as ints) or symbolic, else ArgumentTypeError."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return as_sizes(shape, what)  # type: ignore[return-value]  # a bound Variable's size is a UOp

    @classmethod
    def full(cls: type[Tensor], shape: Sequence[int] | int, fill_value: Scalar, dtype: Any = None,
             device: str | None = None) -> Tensor:
        dims = new_shape(shape)
        dt = dtypes.parse(dtype) if dtype is not None else dtypes.from_py(fill_value)
        return cls._const(fill_value, dims, dt, device)

    @classmethod
    def zeros(cls: type[Tensor], *shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        return cls.full(cls._shape_arg(shape), 0, dtypes.parse(dtype or dtypes.default_float), device)

    @classmethod
    def ones(cls: type[Tensor], *shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        return cls.full(cls._shape_arg(shape), 1, dtypes.parse(dtype or dtypes.default_float), device)

    @classmethod
    def empty(cls: type[Tensor], *shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        dims = new_shape(cls._shape_arg(shape))
        dt = dtypes.parse(dtype or dtypes.default_float)
        device = resolve_device(device)
        buf = storage.new_buffer(device, math.prod(dims), dt)
        placements.seed_input(buf)
        return cls(storage.view_as(buf, dims), device)

    @classmethod
    def arange(cls: type[Tensor], start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: Any = None,
               device: str | None = None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be zero")
        values = np.arange(start, stop, step)
        floats = any(isinstance(v, float) for v in (start, stop, step))
        if dtype is None:
            dt = dtypes.default_float if floats else dtypes.int_dtype_of(*_int_span(values, start))
        else:
            dt = dtypes.parse(dtype)
            if not floats:  # the values are Python ints: one that dt cannot hold is refused, not wrapped
                for v in _int_span(values, start):
                    dtypes.check_fits(dt, v)
        span = 0 if floats else max(abs(int(start)), abs(int(stop)), len(values) * abs(int(step)))
        if not floats and dtypes.is_int(dt) and span < 2 ** 62:
            if device is None or isinstance(device, str):
                return cls._iota(len(values), int(start), int(step), dt, device)
            # replicated: each device computes its own (an upload, or one device's values sharded, would be
            # copied to the others on every jitted call: docs/multi-device.md)
            names = resolve_devices(device)
            parts = [cls._iota(len(values), int(start), int(step), dt, d).uop for d in names]
            return cls(multi.multi(parts, names, None, None), names)
        # floats are uploaded (computed in float32 they would round unlike numpy's)
        return cls(values.astype(dtypes.to_np(dt)), device, dt)

    @classmethod
    def _iota(cls: type[Tensor], n: int, start: int, step: int, dt: DType, device: str | None) -> Tensor:
        """`start + step * i` for i in [0, n), in integer dtype `dt`: an IOTA scaled and shifted, computed in
        int32 when every intermediate fits it, else int64, then cast (the values themselves fit `dt`)."""
        wide = dtypes.int32 if max(abs(start), abs(start + step * n), n) < 2 ** 31 else dtypes.int64
        t = cls(UOp(Op.IOTA, wide, (UOp(Op.DEVICE, dtypes.void, (), resolve_device(device)),), n), device)
        t = t * step if step != 1 else t
        t = t + start if start else t
        return t.cast(dt) if dt != wide else t

    @classmethod
    def eye(cls: type[Tensor], n: int, m: int | None = None, dtype: Any = None, device: str | None = None) -> Tensor:
        """The (n, m) identity matrix (m defaults to n)."""
        m = n if m is None else m
        if n < 0 or m < 0:
            raise ShapeError(f"eye needs non-negative sizes, got ({n}, {m})")
        s = max(n, m)
        dt = dtypes.parse(dtype or dtypes.default_float)
        # a (s, s+1) block whose first column is 1, read flat in rows of s: element (i, j) lands in column j - i
        ones = cls.full((s, 1), 1, dt, device).pad(((0, 0), (0, s)))
        return ones.reshape(s * (s + 1)).shrink(((0, s * s),)).reshape(s, s).shrink(((0, n), (0, m)))

    def full_like(self: Tensor, fill_value: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        return type(self).full(self.shape, fill_value, dtype or self.dtype, device or self.device)

    def zeros_like(self: Tensor, dtype: Any = None, device: str | None = None) -> Tensor:
        return self.full_like(0, dtype, device)

    def ones_like(self: Tensor, dtype: Any = None, device: str | None = None) -> Tensor:
        return self.full_like(1, dtype, device)
