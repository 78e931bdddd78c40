"""Reductions: ops that combine the elements along axes into one: `sum`, `max`, `min`, `mean`, `prod`, `var`,
`std`, `argmax`, `argmin`, `any`, `all`, `logsumexp` (the scans `cumsum`/`cumprod` come from scans.py).

An op belongs here when its output drops (or keeps as size 1, with `keepdim`) the axes it combines. Each is
one REDUCE_AXIS (ADD, MUL or MAX) over elementwise ops, through `_reduce`; `axis` is an int, a sequence of ints
or None (every axis), negative counting from the end.

Semantics follow numpy for dtypes and torch where numpy differs: `sum`/`prod` of small integers and bools give
int32/uint32, of half floats accumulate in float32 and give their own dtype; `var`/`std` take `correction`
(default 1, the unbiased estimator); `argmax`/`argmin` return the first index of the extreme value as
default_int (int32), flattening when `axis` is None; their `axis` is one int (a tuple is a ShapeError).
`sum`/`prod`/`any`/`all` over an empty axis give
0/1/False/True; `max`, `min` and `argmax` over one are a ShapeError.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tolk_core.errors import ShapeError
from tolk_core.frontend.movement import normalize_axis
from tolk_core.frontend.scans import ScanMixin
from tolk_core.ir.dtype import DType, dtypes, sum_acc_dtype
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, prod, resolve

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tolk_core.frontend.tensor import Tensor


def is_half(dt: DType) -> bool:
    """float16 or bfloat16: sums and products accumulate these in float32 and give their own dtype back."""
    return dtypes.is_float(dt) and dt.itemsize == 2


class ReductionMixin(ScanMixin):
    """Reductions; mixed into `Tensor`."""

    __slots__ = ()

    def _axes(self: Tensor, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        """`axis` as sorted, distinct, non-negative axes (None: every axis)."""
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)  # normalize_axis checks each
        return tuple(sorted({normalize_axis(a, self.ndim) for a in axes}))

    def _reduce(self: Tensor, op: Op, axis: Any, keepdim: bool, dtype: DType | None = None,
                empty_ok: bool = False) -> Tensor:
        """Reduce with `op` over `axis`; an empty axis gives op's identity for ADD/MUL (or when `empty_ok`),
        else a ShapeError (the max of nothing is undefined)."""
        axes = self._axes(axis)
        x = self.cast(dtype) if dtype is not None else self
        if self.ndim == 0:
            return x
        out_shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        if op is Op.MAX and not empty_ok and any(self.shape[a] == 0 for a in axes) and resolve(prod(out_shape) != 0):
            raise ShapeError(f"cannot take {op.name.lower()} over an empty axis of shape {self.shape}")
        if not axes:
            return x
        # the shapes are known here: recorded on the nodes (no walk works them out later)
        ret = x._wrap(UOp.shaped(Op.REDUCE_AXIS, x.dtype, (x.uop,), (op, axes), out_shape))
        if keepdim:
            return ret
        kept = tuple(s for i, s in enumerate(self.shape) if i not in axes)
        return ret._wrap(UOp.shaped(Op.RESHAPE, x.dtype, (ret.uop,), kept, kept))

    def sum(self: Tensor, axis: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        """Sum over `axis`. Without `dtype`: integers and bools sum in (and give) int64/uint64, as numpy; half
        floats sum in float32 and give their own dtype, as numpy and torch do."""
        acc = dtypes.parse(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        out = self._reduce(Op.ADD, axis, keepdim, acc)
        return out.cast(self.dtype) if dtype is None and is_half(self.dtype) else out

    def prod(self: Tensor, axis: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        acc = dtypes.parse(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        out = self._reduce(Op.MUL, axis, keepdim, acc)
        return out.cast(self.dtype) if dtype is None and is_half(self.dtype) else out

    def max(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
        return self._reduce(Op.MAX, axis, keepdim)

    def min(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
        """The least element along `axis`: the max of an order-reversing map that is its own inverse and cannot
        overflow (floats: negation, which keeps NaN; integers: bitwise not, as -x overflows at the dtype's
        minimum; bools: logical not)."""
        if dtypes.is_bool(self.dtype):
            return self.logical_not().max(axis, keepdim).logical_not()
        if dtypes.is_float(self.dtype):
            return -((-self)._reduce(Op.MAX, axis, keepdim))
        return ~((~self)._reduce(Op.MAX, axis, keepdim))

    def mean(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
        axes = self._axes(axis)
        n = math.prod(self.shape[a] for a in axes)
        x = self._as_float()
        out = x.sum(axis, keepdim, dtype=dtypes.float32 if is_half(x.dtype) else None)  # numpy: float32 inside
        return (out / n if n else out * float("nan")).cast(x.dtype)

    def logsumexp(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) over `axis`, stable: the maximum m is subtracted first (log(sum(exp(x - m))) + m), so
        no exp overflows. A row of -inf gives -inf, one holding +inf gives inf, NaN propagates; an empty axis
        gives -inf (torch's). The gradient is softmax's (m is held constant: its share cancels exactly).
        Integers and bools compute in the default float; float16/bfloat16 in float32, returned in their dtype."""
        x = self._as_float()
        if is_half(x.dtype):
            return x.cast(dtypes.float32).logsumexp(axis, keepdim).cast(x.dtype)
        axes = self._axes(axis)
        if any(x.shape[a] == 0 for a in axes) if x.ndim else False:
            return x.sum(axis, keepdim) + -math.inf
        m = x.max(axis, keepdim=True).detach()
        m = (m.isfinite()).where(m, 0.0)  # +-inf or NaN: exp(x - 0) gives the answer (inf, 0 -> -inf, NaN)
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))

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
        """Index of the first maximum along `axis` (of the flattened tensor when None); nan counts as maximum.
        `axis` is one int, as in numpy and torch: a tuple raises ShapeError (flatten those axes first)."""
        if isinstance(axis, (tuple, list)):  # (a float or a bool: normalize_axis's ArgumentTypeError)
            raise ShapeError(f"argmax/argmin take one axis (an int) or None, got {axis!r}: to search several "
                             "adjacent axes at once, flatten them first (x.flatten(a, b).argmax(a))")
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
