"""Shape-level constructors and combinators of `Tensor`: eye, *_like, squeeze, unsqueeze, flatten, cat, stack.

All are movement ops over existing values or constants: `eye` is a padded column of ones read with a row
length one longer than the rows (no upload), `cat` pads every input to the full size and adds them (one fused
kernel). `squeeze` of an axis whose size is not 1 leaves it, as torch does.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tolk_core.errors import DeviceMismatchError, ShapeError
from tolk_core.ir.dtype import dtypes, least_upper_dtype

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


class ShapeMixin:
    """Constructors and shape combinators; mixed into `Tensor`."""

    __slots__ = ()

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype: Any = None, device: str | None = None) -> Tensor:
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

    def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
        """Drop size-1 axes: all of them, or those among `dim` (other sizes there are kept, as in torch)."""
        axes = self._axes(dim) if dim is not None else tuple(range(self.ndim))
        return self.reshape(tuple(s for a, s in enumerate(self.shape) if not (a in axes and s == 1)))

    def unsqueeze(self: Tensor, dim: int) -> Tensor:
        """A new size-1 axis at `dim` (-ndim-1 <= dim <= ndim)."""
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise ShapeError(f"unsqueeze axis {dim} is out of range for a tensor of {self.ndim} dimension(s)")
        dim %= self.ndim + 1
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axes(start_dim)[0], self._axes(end_dim)[0]
        if s > e:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} in shape {self.shape}")
        return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def cat(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
        """Concatenate this tensor and `others` along `dim` (usable as `Tensor.cat(a, b, dim=...)`)."""
        ts = (self, *others)
        for t in ts:
            if t.ndim != self.ndim:
                raise ShapeError(f"cat needs tensors of one rank, got shapes {', '.join(str(t.shape) for t in ts)}")
            if t.device != self.device:
                raise DeviceMismatchError(f"cat of tensors on different devices: {self.device} and {t.device}")
        if self.ndim == 0:
            raise ShapeError("cat of 0-d tensors: use stack")
        axis = self._axes(dim)[0]
        for t in ts:
            if any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=True)) if i != axis):
                raise ShapeError(f"cat along axis {axis}: shapes {', '.join(str(t.shape) for t in ts)} differ "
                                 "off that axis")
        dt = least_upper_dtype(*(t.dtype for t in ts))
        total, offset, out = sum(t.shape[axis] for t in ts), 0, None
        for t in ts:
            pad = [(0, 0)] * self.ndim
            pad[axis] = (offset, total - offset - t.shape[axis])
            offset += t.shape[axis]
            part = t.cast(dt).pad(pad)
            out = part if out is None else (out | part if dtypes.is_bool(dt) else out + part)
        return out

    def stack(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
        """Stack this tensor and `others` (all of one shape) along a new axis `dim`."""
        ts = (self, *others)
        if any(t.shape != self.shape for t in ts):
            raise ShapeError(f"stack needs tensors of one shape, got {', '.join(str(t.shape) for t in ts)}")
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise ShapeError(f"stack axis {dim} is out of range for tensors of {self.ndim} dimension(s)")
        return ts[0].unsqueeze(dim).cat(*(t.unsqueeze(dim) for t in ts[1:]), dim=dim)
