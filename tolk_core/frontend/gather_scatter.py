"""Gathers and scatters along one axis, torch's: `gather(dim, index)`, `scatter(dim, index, src)` and
`scatter_reduce(dim, index, src, reduce, include_self)` with `scatter_add` (ONNX's GatherElements and
ScatterElements), and `one_hot(num_classes)` (a comparison with an arange along a new last axis, the same
one-hot mechanism).

An op belongs here when an index tensor of the input's rank picks, along one axis, the element each of its
positions reads or writes; on every other axis the index position is the element's own (so index sizes there
are at most the input's). It is `t[index]` (frontend/indexing.py) restricted to one axis, and shares that
module's one-hot mechanism: a comparison of each index with an arange over the axis (`along`), the select of
`pick`, and the last-write rule of `last_writes` — no loops; a gather is one fused kernel, a scatter two (the
last writer's number, then its value).
Cost: a gather reads index.numel() elements (rangeify turns its one-hot sum into a load at the index,
schedule/gather.py); a scatter makes index.numel() * size(dim) comparisons (one axis is one-hot, never the whole
tensor).

Semantics:
- Negative indices count from the end (numpy's take_along_axis and ONNX; torch refuses them). Index data given
  on the host (a list or ndarray) is bounds-checked: IndexError naming the index, axis and size. A Tensor
  index is not known before it is computed: a value out of range gathers 0 and scatters nothing.
- `scatter` with several index positions naming one element: torch leaves the winner undefined; here the last
  position in row-major order of `index` wins (as `index_put_` and numpy's `t[idx] = v`).
- `scatter_reduce` combines every value scattered to an element ("sum", "prod", "amax", "amin", "mean"), with
  the element's own value when `include_self` (torch's default); "mean" of integers floors, as torch. Elements
  nothing is scattered to keep their value. NaN propagates through amax / amin.
- Gradients (autograd, through the one-hot selects and reductions) for every op but scatter_reduce "prod":
  its product is a MUL reduction, which has no gradient rule yet (as `Tensor.prod`: autograd's GradientError).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.frontend.indexing import last_writes, pick, require_int_index
from tolk_core.frontend.movement import normalize_axis
from tolk_core.ir.dtype import dtypes

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

REDUCTIONS = ("sum", "prod", "amax", "amin", "mean")


def _index_arg(x: Tensor, dim: int, index: Any, what: str) -> tuple[int, Tensor]:
    """(dim as a non-negative axis, the index as an integer Tensor on x's device), checked against x."""
    dim = normalize_axis(dim, x.ndim)
    if not isinstance(index, type(x)):
        arr = np.asarray(index)
        arr = arr.astype(np.int64) if not arr.size else arr
        require_int_index(dtypes.from_np(arr.dtype))
        n = x.shape[dim] if x.ndim else 1
        if arr.size and (bad := arr[(arr < -n) | (arr >= n)]).size:
            raise IndexError(f"{what}: index {int(bad.flat[0])} is out of bounds for axis {dim} with size {n}")
        index = type(x)(arr, device=x.device)
    require_int_index(index.dtype)
    index = index.to(x.device) if index.device != x.device else index
    if index.ndim != x.ndim or any(i > s for a, (i, s) in enumerate(zip(index.shape, x.shape, strict=True))
                                   if a != dim):
        raise ShapeError(f"{what} along axis {dim}: the index of shape {index.shape} must have the rank of the "
                         f"tensor {x.shape} and no larger size on any other axis")
    return dim, index


def along(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The one-hot mask of `index` along `dim`: shape index.shape with x's size n inserted after `dim`,
    true at [..., j, p, ...] where index[..., j, ...] (negative: + n) is p."""
    n = x.shape[dim]
    idx = index.cast(dtypes.default_int)
    idx = (idx < 0).where(idx + n, idx).unsqueeze(dim + 1)
    pos = type(x).arange(n, device=x.device).reshape(tuple(n if a == dim + 1 else 1 for a in range(idx.ndim)))
    return idx == pos


def _region(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """x restricted to the index's extent on every axis but `dim`."""
    return x.shrink(tuple(None if a == dim else (0, s) for a, s in enumerate(index.shape)))


def _source(x: Tensor, dim: int, index: Tensor, src: Any) -> Tensor:
    """`src` (a tensor at least the index's size on every axis, or a scalar) as index's shape in x's dtype."""
    if not isinstance(src, type(x)):
        return type(x).full(index.shape, src, x.dtype, x.device)
    if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape, strict=True)):
        raise ShapeError(f"scatter along axis {dim}: src of shape {src.shape} must have the index's rank and at "
                         f"least its size {index.shape} on every axis")
    return src.shrink(tuple((0, i) for i in index.shape)).cast(x.dtype)


def _put_back(x: Tensor, dim: int, written: Tensor, new: Tensor) -> Tensor:
    """x with `new` where `written` holds (both of the index's extent off `dim`, padded out to x's shape)."""
    pads = tuple((0, 0) if a == dim else (0, s - w) for a, (s, w) in enumerate(zip(x.shape, new.shape, strict=True)))
    return written.pad(pads).where(new.pad(pads), x)


class GatherScatterMixin:
    """gather / scatter / scatter_reduce; mixed into `Tensor` (semantics in the module docstring)."""

    __slots__ = ()

    def gather(self: Tensor, dim: int, index: Any) -> Tensor:
        """torch.gather: out[..., j, ...] = self[..., index[..., j, ...], ...] along `dim`; the index's shape."""
        dim, index = _index_arg(self, dim, index, "gather")
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        mask = along(self, dim, index)
        return pick(mask, _region(self, dim, index).unsqueeze(dim), (dim + 1,))

    def scatter(self: Tensor, dim: int, index: Any, src: Any) -> Tensor:
        """torch.scatter (out of place): a copy with self[..., index[..., j, ...], ...] = src[..., j, ...];
        `src` a tensor (its leading index-sized block is read) or a scalar. Repeats: the last one wins."""
        dim, index = _index_arg(self, dim, index, "scatter")
        if self.ndim == 0:
            return self.reshape(1).scatter(0, index.reshape(1), src if not isinstance(src, type(self))
                                           else src.reshape(1)).reshape(())
        v = _source(self, dim, index, src)
        if not index.numel():
            return self
        mask = along(self, dim, index)
        written, new = last_writes(mask, v.unsqueeze(dim + 1), (dim,))
        return _put_back(self, dim, written, written.where(new, _region(self, dim, index)))

    def scatter_reduce(self: Tensor, dim: int, index: Any, src: Tensor, reduce: str,
                       include_self: bool = True) -> Tensor:
        """torch.scatter_reduce: every src value scattered to an element combines with `reduce`, together with
        the element's own value when `include_self`; untouched elements are kept."""
        if reduce not in REDUCTIONS:
            raise ArgumentError(f"scatter_reduce's reduce must be one of {', '.join(map(repr, REDUCTIONS))}, got "
                                f"{reduce!r}")
        dim, index = _index_arg(self, dim, index, "scatter_reduce")
        if self.ndim == 0:
            return self.reshape(1).scatter_reduce(0, index.reshape(1), src.reshape(1), reduce,
                                                  include_self).reshape(())
        v = _source(self, dim, index, src).unsqueeze(dim + 1)
        if not index.numel():
            return self
        mask = along(self, dim, index)
        own = _region(self, dim, index)
        written = mask.any(axis=dim)
        combined = _combine(mask, v, own, dim, reduce, include_self)
        return _put_back(self, dim, written, written.where(combined, own))

    def scatter_add(self: Tensor, dim: int, index: Any, src: Tensor) -> Tensor:
        """torch.scatter_add: `scatter_reduce(dim, index, src, "sum")`, every repeat adding."""
        return self.scatter_reduce(dim, index, src, "sum")

    def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
        """torch.nn.functional.one_hot as a method: integer labels (...) -> int64 (..., num_classes), 1 where
        the class is the label. num_classes -1 takes max(label) + 1, which reads the labels (they are
        realized; under a JIT capture that is a JitError: pass num_classes). A label outside
        [0, num_classes) gives a row of zeros; when the labels are read (-1), a negative one is an IndexError,
        as torch."""
        require_int_index(self.dtype)
        if num_classes == -1:
            if not self.numel():
                raise ArgumentError("one_hot of no labels needs num_classes (there is no max label to infer it)")
            low, high = int(self.min().item()), int(self.max().item())
            if low < 0:
                raise IndexError(f"one_hot: class values must be non-negative, got {low}")
            num_classes = high + 1
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ArgumentError(f"one_hot's num_classes must be a non-negative int or -1, got {num_classes!r}")
        classes = type(self).arange(num_classes, dtype=dtypes.int64, device=self.device)
        return (self.cast(dtypes.int64).unsqueeze(-1) == classes).cast(dtypes.int64)


def _combine(mask: Tensor, v: Tensor, own: Tensor, dim: int, reduce: str, include_self: bool) -> Tensor:
    """Per element of `own`: the `reduce` of the values `mask` sends it (along axis `dim` of `mask`/`v`), with
    `own` itself when `include_self`. Where nothing is sent the result is unused (the caller keeps `own`)."""
    dt = own.dtype
    if reduce in ("sum", "mean"):
        total = mask.where(v, 0).sum(axis=dim).cast(dt)
        total = total + own if include_self else total
        if reduce == "sum":
            return total
        count = mask.sum(axis=dim) + (1 if include_self else 0)
        count = count.maximum(1)
        return (total / count).cast(dt) if dtypes.is_float(dt) else total // count.cast(dt)
    if reduce == "prod":
        out = mask.where(v, 1).prod(axis=dim).cast(dt)
        return out * own if include_self else out
    low = reduce == "amin"
    ext = _extreme(dt, low)
    picked = mask.where(v, ext)
    out = picked.min(axis=dim) if low else picked.max(axis=dim)
    if include_self:
        out = out.minimum(own) if low else out.maximum(own)
    return out


def _extreme(dt: Any, low: bool) -> Any:
    """The identity of max (low False) or min (low True) in dtype `dt`."""
    if dtypes.is_float(dt):
        return float("inf") if low else float("-inf")
    if dtypes.is_bool(dt):
        return low
    info = np.iinfo(dtypes.to_np(dt))
    return int(info.max) if low else int(info.min)
