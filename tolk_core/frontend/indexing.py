"""Indexing: `Tensor.__getitem__`, numpy indexing with ints, slices (any step), None, Ellipsis, integer
tensors and host data (lists, tuples, integer and boolean ndarrays), and writing through them: `t[i] = v` and
`index_put_` (basic indices: a view, then `assign`; advanced indices: a scatter, the last write winning where an
element is selected twice, or with `accumulate` adding).

An op belongs here when it selects elements by index values given by the caller.

Basic indices (ints, slices, None) are movement ops: shrink, flip, a strided reshape, reshape. Integer tensors
(also lists, tuples and integer numpy arrays, in any position) gather with numpy's advanced-indexing rules: the
index tensors broadcast together to a shape B; B replaces the indexed axes in place when they are adjacent (an
int counting as an advanced index), else it goes first. A gather is a one-hot comparison of each index with an
arange over its axis, a select and a sum over the axis, so it fuses with its producers and consumers into one
kernel; rangeify turns that sum into a load at the index (schedule/gather.py), so it costs the elements it
selects, not the axis's length times them. Negative indices count from the end. Host data is bounds-checked
(IndexError, as numpy); a Tensor's values are not known before it is computed, so a Tensor index outside
[-size, size) selects nothing: it gathers 0 and writes nothing (nothing reads or writes out of bounds). A host
boolean mask over k axes (its shape must be theirs) is the k integer arrays of its true positions, as numpy's
`nonzero`; a boolean Tensor mask is an UnsupportedError (the result's shape would depend on its values): `where`
/ `masked_fill` keep the shape, `x[mask.numpy()]` reads the mask first.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.errors import DTypeError, ShapeError, UnsupportedError
from tolk_core.frontend.arguments import check_devices
from tolk_core.frontend.movement import broadcast_shape
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, sint

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def require_int_index(dt: DType) -> None:
    """Index tensors hold integers: DTypeError otherwise (also for gather / scatter's index)."""
    if not dtypes.is_int(dt):
        raise DTypeError(f"tensors used as indices must hold integers, got {dt.name}")


class IndexingMixin:
    """Indexing; mixed into `Tensor`."""

    __slots__ = ()

    def __getitem__(self: Tensor, index: Any) -> Tensor:
        if type(index) is int and (x := self._int_index(index)) is not None:
            return x
        x, gathers, insert_at = self._basic_index(self._entries(index))
        return x._gather(gathers, insert_at) if gathers else x

    def _int_index(self: Tensor, i: int) -> Tensor | None:
        """`self[i]` for a plain int in range along a first axis of plain sizes: the nodes the general path
        builds (a SHRINK of the row, a RESHAPE dropping its axis), built directly (a recurrent model reads
        `xs[t]` every step); None otherwise, for the general path to handle or refuse."""
        shape = self.shape
        if not shape or type(n := shape[0]) is not int or not -n <= i < n or \
                not all(type(d) is int for d in shape):
            return None
        i %= n
        u = self.uop
        row = u if n == 1 else UOp.shaped(Op.SHRINK, u.dtype, (u,), ((i, i + 1),) + tuple((0, d) for d in shape[1:]),
                                          (1,) + shape[1:])
        return self._wrap(UOp.shaped(Op.RESHAPE, u.dtype, (row,), shape[1:], shape[1:]))

    def index_put_(self: Tensor, index: Any, value: Any, accumulate: bool = False) -> Tensor:
        """Write `value` into the elements `self[index]` selects, in place, and return self. `index` is
        anything `__getitem__` takes; `value` broadcasts to the selection's shape and is cast to this tensor's
        dtype. An element selected several times (a repeated integer index) gets, without `accumulate`, the
        value of its last selection in the index order, as numpy's `t[idx] = v` does; with `accumulate` every
        selection adds its value, as numpy's `np.add.at(t, idx, v)` and torch's `index_put_(accumulate=True)`
        (floats add in their own order, so sums of several values may round differently). An index tensor's
        value out of range selects nothing (nothing is written there). `t[index] = value` is
        `t.index_put_(index, value)`. The write is a store into this tensor's storage like `assign`; a lazy
        tensor is realized first."""
        from tolk_core.frontend.tensor import views_param, views_storage
        if not views_storage(self.uop) and not views_param(self.uop):  # (a PARAM: a call body's argument)
            self.realize()  # the selection must view this tensor's own storage
        x, gathers, insert_at = self._basic_index(self._entries(index))
        if isinstance(value, float) and dtypes.is_float(self.dtype):  # a weak scalar: in this dtype, not float32
            value = np.asarray(value, dtype=dtypes.to_np(self.dtype))
        v = value if isinstance(value, type(self)) else type(self)(np.asarray(value) if isinstance(
            value, (list, tuple, np.ndarray)) else value, device=self.device)
        v = v.to(self.device).cast(self.dtype)
        if not gathers:
            x.assign(x + v if accumulate else v)
        else:
            x.assign(x._scattered(gathers, insert_at, v, accumulate))
        return self

    def _scattered(self: Tensor, gathers: list[tuple[int, Tensor]], insert_at: int | None, value: Tensor,
                   accumulate: bool) -> Tensor:
        """This view with `value` (broadcast to the shape `_gather` gives) written at the elements the
        (axis, index tensor) pairs select, as a new lazy value: the last write wins, or with `accumulate`
        every write adds. One-hot like `_gather`: position b of the broadcast index shape B writes element p
        where every index tensor's value at b is p's coordinate on its axis."""
        axes, bshape, mask = self._index_hits(gathers)
        rest = [a for a in range(self.ndim) if a not in axes]
        nb, k = len(bshape), len(axes)
        sel = [self.shape[a] for a in rest]
        at = insert_at or 0
        sel_shape = tuple(sel[:at]) + bshape + tuple(sel[at:])
        try:
            v = value._broadcast_to(sel_shape) if value.shape != sel_shape else value
        except ShapeError:
            raise ShapeError(f"a value of shape {value.shape} cannot be broadcast to the selection's shape "
                             f"{sel_shape}") from None
        if at:  # the index axes first, as in the one-hot layout
            v = v.permute(list(range(at, at + nb)) + list(range(at)) + list(range(at + nb, v.ndim)))
        v = v.reshape(bshape + (1,) * k + tuple(sel))
        x = self.permute(axes + rest)  # (n_1..n_k, R...)
        if not math.prod(bshape):
            return self
        baxes = tuple(range(nb))
        if accumulate:
            new = mask.any(axis=baxes).where(x + mask.where(v, 0).sum(axis=baxes).cast(x.dtype), x)
        else:
            written, value = last_writes(mask, v, baxes)
            new = written.where(value, x)
        perm = axes + rest
        return new.permute([perm.index(a) for a in range(self.ndim)])

    def _index_hits(self: Tensor, gathers: list[tuple[int, Tensor]]) -> tuple[list[int], tuple[int, ...], Tensor]:
        """For (axis, index tensor) pairs: the axes, the broadcast index shape B, and the one-hot mask of shape
        (B..., n_1..n_k, 1 per other axis): true where every index tensor's value at that position of B is
        the coordinate on its axis (a negative index counts from the end)."""
        axes = [a for a, _ in gathers]
        try:
            bshape = broadcast_shape(*(t.shape for _, t in gathers))
        except ShapeError:
            raise ShapeError("index tensors of shapes " + ", ".join(str(t.shape) for _, t in gathers)
                             + " cannot be broadcast together") from None
        nb = len(bshape)
        tail = (1,) * self.ndim
        mask = None
        for j, (a, idx) in enumerate(gathers):
            n = self.shape[a]
            idx = idx.cast(dtypes.default_int)
            idx = (idx < 0).where(idx + n, idx)._broadcast_to(bshape).reshape(bshape + tail)
            pos = type(self).arange(n, device=self.device).reshape((1,) * (nb + j) + (n,) + tail[j + 1:])
            hit = idx == pos
            mask = hit if mask is None else mask.logical_and(hit)
        assert mask is not None  # gathers holds one index tensor at least
        return axes, tuple(bshape), mask

    def _entries(self: Tensor, index: Any) -> list[Any]:
        """`index` as one entry per axis of this tensor (None entries add axes): Ellipsis and missing trailing
        entries become full slices, host integer data becomes integer arrays, and a host boolean mask over k
        axes becomes the k integer arrays of its true positions (numpy's `nonzero`)."""
        entries = list(index) if isinstance(index, tuple) else [index]
        entries = [self._index_tensor(i) if isinstance(i, (list, tuple, np.ndarray, type(self))) else i
                   for i in entries]
        if sum(i is Ellipsis for i in entries) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consumed = sum(_width(i) for i in entries)
        if consumed > self.ndim:
            raise ShapeError(f"too many indices ({consumed}) for a tensor of shape {self.shape}")
        fill = [slice(None)] * (self.ndim - consumed)
        if (at := next((k for k, i in enumerate(entries) if i is Ellipsis), None)) is not None:
            entries = entries[:at] + fill + entries[at + 1:]
        else:
            entries += fill
        return self._masks_expanded(entries)

    def _masks_expanded(self: Tensor, entries: list[Any]) -> list[Any]:
        """Each host boolean mask among `entries` replaced by the integer arrays of its true positions, after
        checking that its shape is that of the axes it covers (IndexError, as numpy)."""
        out: list[Any] = []
        axis = 0
        for i in entries:
            if isinstance(i, np.ndarray) and i.dtype == np.bool_:
                covered = self.shape[axis:axis + i.ndim]
                if i.shape != covered:
                    raise IndexError(f"boolean index of shape {i.shape} does not match axis {axis} of size "
                                     f"{covered[0] if covered else 0} (the axes it covers have shape {covered})")
                out += [p.astype(np.int64) for p in np.nonzero(i)]
            else:
                out.append(i)
            axis += _width(i)
        return out

    def _index_tensor(self: Tensor, idx: Any) -> Tensor | np.ndarray:
        """An index of integers: a Tensor as it is (its values are not known before it is computed: an index out
        of range selects nothing, giving 0), host data (list, tuple, ndarray) as an integer ndarray,
        bounds-checked against its axis by `_basic_index` (IndexError, as numpy), or a boolean ndarray (a mask,
        expanded by `_masks_expanded`). A boolean Tensor is an UnsupportedError: its result's shape would depend
        on its values."""
        if isinstance(idx, type(self)):
            if dtypes.is_bool(idx.dtype):
                raise UnsupportedError(
                    f"indexing with a boolean Tensor mask (shape {idx.shape}) is not supported: the result's shape "
                    "depends on the mask's values, which are not known before they are computed. Keep the shape "
                    "with mask.where(x, 0) or x.masked_fill(mask.logical_not(), 0) (and x.masked_fill(mask, v) for "
                    "writes), or index with host data: x[mask.numpy()]")
            require_int_index(idx.dtype)
            check_devices("indexing", (self, idx))
            return idx
        arr = np.asarray(idx)
        if not arr.size and arr.dtype != np.bool_:  # an empty list has numpy's float dtype: as integers
            return arr.astype(np.int64)
        if arr.dtype == np.bool_:
            if not arr.ndim:
                raise TypeError("a boolean scalar index is not supported: use None to add an axis")
            return arr
        require_int_index(dtypes.from_np(arr.dtype))
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
        axes, bshape, mask = self._index_hits(gathers)
        rest = [a for a in range(self.ndim) if a not in axes]
        nb, k = len(bshape), len(axes)
        x = self.permute(axes + rest)  # (n_1..n_k, R...)
        out = pick(mask, x.reshape((1,) * nb + x.shape), tuple(range(nb, nb + k)))
        if insert_at:
            out = out.permute(list(range(nb, nb + insert_at)) + list(range(nb)) + list(range(nb + insert_at, out.ndim)))
        return out


def _width(entry: Any) -> int:
    """How many axes of the indexed tensor an index entry covers: none for None and Ellipsis, a boolean mask's
    rank, else one."""
    if entry is None or entry is Ellipsis:
        return 0
    return entry.ndim if isinstance(entry, np.ndarray) and entry.dtype == np.bool_ else 1


_BITS = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def last_writes(mask: Tensor, v: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """For writes of `v` (broadcast against `mask`) where `mask` holds, the write positions being `axes` of
    `mask`: (whether each element, `axes` reduced away, is written at all; the value of its last write in
    row-major order of those positions, 0 where none). `axes` are adjacent and not empty. Numbers the positions
    1.. and keeps the largest that hits (so a hit of the largest number is the last write)."""
    count = math.prod(mask.shape[a] for a in axes)
    shape = tuple(mask.shape[a] if a in axes else 1 for a in range(mask.ndim))
    order = type(mask).arange(1, count + 1, device=mask.device).reshape(shape)
    last = mask.where(order, 0).max(axis=axes, keepdim=True)  # 1 + the last position writing, 0: none
    written = last.reshape(tuple(s for a, s in enumerate(last.shape) if a not in axes)) > 0
    return written, pick(order == last, v, axes)


def pick(mask: Tensor, x: Tensor, axes: tuple[int, ...]) -> Tensor:
    """The element of `x` where `mask` holds along `axes` (at most one per output), 0 where none does; bit for
    bit, so -0.0 and NaN payloads survive. Integers and bools sum exactly. A float sum would not: its
    accumulator starts at +0.0 and +0.0 + -0.0 is +0.0, so floats are summed as their unsigned bits (one term
    at most is nonzero, so the sum is that term). Bits carry no gradient: when a tensor that requires grad is
    in `x`'s graph the float sum (differentiable) gives the value and the bits only restore a -0.0 it lost,
    through -(0 - v), which is -0.0 for v = +0.0 and has v's gradient."""
    if not dtypes.is_float(x.dtype) or x.dtype.itemsize not in _BITS:
        return mask.where(x, 0).sum(axis=axes).cast(x.dtype)
    bits = mask.where(x.bitcast(_BITS[x.dtype.itemsize]), 0)._reduce(Op.ADD, axes, False).bitcast(x.dtype)
    from tolk_core.frontend import autograd
    if not autograd.may_flow(x.uop):
        return bits
    value = mask.where(x, 0).sum(axis=axes).cast(x.dtype)
    negative_zero = (bits == 0) & (bits.reciprocal() < 0)
    return negative_zero.where(-(0.0 - value), value)
