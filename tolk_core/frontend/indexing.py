"""Indexing: `Tensor.__getitem__`, numpy indexing with ints, slices (any step), None, Ellipsis and integer
tensors. (Writing through an index, `t[i] = v`, is `Tensor.__setitem__`: a selection here, then `assign`.)

An op belongs here when it selects elements by index values given by the caller.

Basic indices (ints, slices, None) are movement ops: shrink, flip, a strided reshape, reshape. Integer tensors
(also lists and integer numpy arrays) gather with numpy's advanced-indexing rules: the index tensors broadcast
together to a shape B; B replaces the indexed axes in place when they are adjacent, else it goes first. A gather
is a one-hot comparison of each index with an arange over its axis, a select and a sum over the axis, so it fuses
with its producers and consumers into one kernel. Negative indices count from the end; indices outside
[-size, size) select nothing and give 0 (nothing reads out of bounds). Boolean masks are not supported (their
result shape depends on the data).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.errors import DTypeError, ShapeError
from tolk_core.frontend.arguments import check_devices
from tolk_core.frontend.movement import broadcast_shape
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.uop import UOp, sint

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def _require_int_index(dt: DType) -> None:
    """Index tensors hold integers: DTypeError otherwise."""
    if not dtypes.is_int(dt):
        raise DTypeError(f"tensors used as indices must hold integers, got {dt.name}"
                         + (" (boolean masks are not supported)" if dtypes.is_bool(dt) else ""))


class IndexingMixin:
    """Indexing; mixed into `Tensor`."""

    __slots__ = ()

    def __getitem__(self: Tensor, index: Any) -> Tensor:
        entries = list(index) if isinstance(index, tuple) else [index]
        entries = [self._index_tensor(i) if isinstance(i, (list, np.ndarray, type(self))) else i for i in entries]
        if sum(i is Ellipsis for i in entries) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consumed = sum(i is not None and i is not Ellipsis for i in entries)
        if consumed > self.ndim:
            raise ShapeError(f"too many indices ({consumed}) for a tensor of shape {self.shape}")
        fill = [slice(None)] * (self.ndim - consumed)
        if (at := next((k for k, i in enumerate(entries) if i is Ellipsis), None)) is not None:
            entries = entries[:at] + fill + entries[at + 1:]
        else:
            entries += fill
        x, gathers, insert_at = self._basic_index(entries)
        return x._gather(gathers, insert_at) if gathers else x

    def _index_tensor(self: Tensor, idx: Any) -> Tensor | np.ndarray:
        """An index of integers: a Tensor as it is (its values are not known before it is computed: an index out
        of range selects nothing, giving 0), host data (list, ndarray) as an integer ndarray, bounds-checked
        against its axis by `_basic_index` (IndexError, as numpy)."""
        if isinstance(idx, type(self)):
            _require_int_index(idx.dtype)
            check_devices("indexing", (self, idx))
            return idx
        arr = np.asarray(idx)
        if not arr.size:  # an empty list has numpy's float dtype: it selects nothing, as integers
            return arr.astype(np.int64)
        _require_int_index(dtypes.from_np(arr.dtype))
        return arr

    def _basic_index(self: Tensor, entries: list[Any]) -> tuple[Tensor, list[tuple[int, Tensor]], int | None]:
        """Apply ints, slices and None; tensor entries keep their axis. Returns the view; per tensor entry (its
        axis in the view, the index tensor); and where the gathered axes go in the result: numpy counts ints as
        advanced indices too, and if the advanced entries are adjacent the broadcast axes replace them in place
        (at the returned position among the view's other axes), else (None) they go first."""
        shrink: list[tuple[sint, sint]] = []
        flips: list[int] = []
        steps: list[int] = []
        out_shape: list[int | None] = []  # per view axis: the axis of this tensor it is, or None (a new axis)
        gathers: list[tuple[int, Tensor]] = []
        advanced: list[int] = []
        axis, insert_at = 0, None
        for k, idx in enumerate(entries):
            if idx is None:
                out_shape.append(None)
                continue
            size = self.shape[axis]
            if isinstance(idx, np.ndarray):  # indices given as host data: checked here, where their axis is known
                if idx.size and ((bad := idx[(idx < -size) | (idx >= size)]).size):
                    raise IndexError(f"index {int(bad.flat[0])} is out of bounds for axis {axis} with size {size}")
                idx = type(self)(idx, device=self.device)
            if isinstance(idx, type(self)) or (isinstance(idx, (int, np.integer)) and not isinstance(idx, bool)):
                insert_at = len(out_shape) if not advanced else insert_at
                advanced.append(k)
            if isinstance(idx, type(self)):
                gathers.append((len(out_shape), idx))
                shrink.append((0, size))
                steps.append(1)
                out_shape.append(axis)
            elif isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
                i = int(idx)
                if not -size <= i < size:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
                i %= size
                shrink.append((i, i + 1))
                steps.append(1)
            elif isinstance(idx, slice) and any(isinstance(v, UOp) for v in (idx.start, idx.stop, size)):
                if idx.step not in (None, 1):  # symbolic bounds: a plain window, no steps or negatives
                    raise ShapeError(f"a slice with symbolic bounds takes no step, got {idx}")
                shrink.append((0 if idx.start is None else idx.start, size if idx.stop is None else idx.stop))
                steps.append(1)
                out_shape.append(axis)
            elif isinstance(idx, slice):
                start, stop, step = idx.indices(size)
                n = len(range(start, stop, step))
                if step > 0:
                    shrink.append((start, start + (n - 1) * step + 1) if n else (0, 0))
                else:
                    shrink.append((start - (n - 1) * -step, start + 1) if n else (0, 0))
                    flips.append(axis)
                steps.append(abs(step))
                out_shape.append(axis)
            else:
                raise TypeError(f"unsupported index {idx!r}: use ints, slices, None, ..., or integer tensors")
            axis += 1
        x = self.shrink(shrink).flip(flips) if flips else self.shrink(shrink)
        if any(s != 1 for s in steps):
            x = x._strided(steps)
        x = x.reshape(tuple(1 if a is None else x.shape[a] for a in out_shape))
        adjacent = advanced == list(range(advanced[0], advanced[0] + len(advanced))) if advanced else False
        return x, gathers, insert_at if adjacent else None

    def _gather(self: Tensor, gathers: list[tuple[int, Tensor]], insert_at: int | None) -> Tensor:
        """Advanced indexing of this view by (axis, index tensor) pairs; the broadcast index axes go first, or
        at `insert_at` among the remaining axes."""
        axes = [a for a, _ in gathers]
        try:
            bshape = broadcast_shape(*(t.shape for _, t in gathers))
        except ShapeError:
            raise ShapeError("index tensors of shapes " + ", ".join(str(t.shape) for _, t in gathers)
                             + " cannot be broadcast together") from None
        rest = [a for a in range(self.ndim) if a not in axes]
        nb, k = len(bshape), len(axes)
        x = self.permute(axes + rest)  # (n_1..n_k, R...)
        tail = (1,) * (k + len(rest))
        mask = None
        for j, (a, idx) in enumerate(gathers):
            n = self.shape[a]
            idx = idx.cast(dtypes.default_int)
            idx = (idx < 0).where(idx + n, idx)._broadcast_to(bshape).reshape(bshape + tail)
            pos = type(self).arange(n, device=self.device).reshape((1,) * (nb + j) + (n,) + tail[j + 1:])
            hit = idx == pos
            mask = hit if mask is None else mask.logical_and(hit)
        assert mask is not None  # gathers holds one index tensor at least
        picked = mask.where(x.reshape((1,) * nb + x.shape), 0)
        out = picked.sum(axis=tuple(range(nb, nb + k))).cast(self.dtype)
        if insert_at:
            out = out.permute(list(range(nb, nb + insert_at)) + list(range(nb)) + list(range(nb + insert_at, out.ndim)))
        return out
