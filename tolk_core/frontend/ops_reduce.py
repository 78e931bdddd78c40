"""Reductions of `Tensor` beyond sum/max/min/mean: prod, var, std, argmax, argmin, any, all.

Semantics follow torch where numpy differs: `var`/`std` take `correction` (default 1, the unbiased
estimator); `argmax`/`argmin` return the first index of the extreme value as default_int (int32), flattening
when `axis` is None. `prod`/`any`/`all` over an empty axis give 1/False/True; argmax over one is a ShapeError.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tolk_core.errors import ShapeError
from tolk_core.ir.dtype import DType, dtypes, sum_acc_dtype
from tolk_core.ir.ops import Op

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def is_half(dt: DType) -> bool:
    """float16 or bfloat16: sums and products accumulate these in float32 and give their own dtype back."""
    return dtypes.is_float(dt) and dt.itemsize == 2


class ReduceMixin:
    """Composite reductions; mixed into `Tensor`."""

    __slots__ = ()

    def prod(self: Tensor, axis: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        acc = dtypes.parse(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        out = self._reduce(Op.MUL, axis, keepdim, acc)
        return out.cast(self.dtype) if dtype is None and is_half(self.dtype) else out

    def any(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
        return self.cast(dtypes.bool)._reduce(Op.MAX, axis, keepdim, empty_ok=True)

    def all(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
        return self.logical_not().any(axis, keepdim).logical_not()

    def var(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        x = self._as_float()
        n = math.prod(self.shape[a] for a in self._axes(axis))
        sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        return sq / max(n - correction, 0)

    def std(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first maximum along `axis` (of the flattened tensor when None); nan counts as maximum."""
        if axis is None:
            out = self.flatten().argmax(0)
            return out.reshape((1,) * self.ndim) if keepdim else out
        axis = self._axes(axis)[0]
        n = self.shape[axis] if self.ndim else 1
        if n == 0:
            raise ShapeError(f"argmax/argmin over an empty axis {axis} of shape {self.shape}")
        x = self.reshape(1) if self.ndim == 0 else self
        hit = x == x.max(axis, keepdim=True)
        if dtypes.is_float(x.dtype):
            hit = hit | (x != x)
        # countdown n..1 along the axis: the largest hit is the first index
        countdown = type(self).arange(n, 0, -1, device=self.device).reshape(
            tuple(n if a == axis else 1 for a in range(x.ndim)))
        first = hit.where(countdown, 0).max(axis, keepdim=keepdim)
        return (n - first).reshape(()) if self.ndim == 0 else n - first

    def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first minimum: argmax of an order-reversing map (-x, ~x, not x) that cannot overflow."""
        flipped = -self if dtypes.is_float(self.dtype) else ~self
        return flipped.argmax(axis, keepdim)
