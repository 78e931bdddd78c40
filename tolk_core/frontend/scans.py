"""Scans: `cumsum` and `cumprod` along one axis (torch's and numpy's inclusive prefix sums and products).

An op belongs here when output element i combines input elements 0..i along an axis. Both are one blocked
scan (`_scan_last`), linear in the axis length: the axis is cut into blocks of 16; each block is scanned by
log-steps (y = y op y-shifted-by-d for d = 1, 2, 4, 8, four elementwise steps that fuse into one kernel, 16
loads per element); each block's total is realized and the totals are scanned the same way, recursively (a
16th of the length per level); the exclusive scan of the totals (the carry) is combined into every element of
its block. Cost: about 17 loads and 16 operations per element in all, 2 small kernels per level and
ceil(log16 n) levels, against n/2 per element for a triangular masked sum. Every step is elementwise or
movement, so autograd differentiates both (cumprod's gradient needs no division, zeros included).

Dtypes follow `sum`/`prod` (docs/dtypes.md): bools and signed integers accumulate in int64, unsigned ones in
uint64 (integer results wrap as numpy's); float16/bfloat16 accumulate in float32 and return their own dtype;
`dtype=` asks for another. Float results equal numpy's sequential ones within n * eps * sum|x| (another order).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tolk_core.errors import ShapeError
from tolk_core.ir.dtype import dtypes, sum_acc_dtype
from tolk_core.ir.ops import Op

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

_BLOCK = 16


def _shift_last(y: Tensor, d: int, identity: int) -> Tensor:
    """y moved d places along its last axis, the first d places filled with `identity`."""
    n = y.shape[-1]
    lead = ((0, 0),) * (y.ndim - 1)
    return y.pad(lead + ((d, 0),), identity).shrink(tuple((0, s) for s in y.shape[:-1]) + ((0, n),))


def _scan_last(x: Tensor, op: Op) -> Tensor:
    """The inclusive scan of `x` along its last axis with ADD or MUL (see the module docstring)."""
    n = x.shape[-1]
    if not isinstance(n, int):
        raise ShapeError(f"cumsum/cumprod along a symbolic axis of shape {x.shape}: the scan needs the axis length "
                         "(bind the variable first)")
    if n <= 1:
        return x
    identity = 0 if op is Op.ADD else 1
    lead = x.shape[:-1]
    blocks = -(-n // _BLOCK)
    width = _BLOCK if blocks > 1 else n
    y = x.pad(((0, 0),) * len(lead) + ((0, blocks * width - n),), identity).reshape(lead + (blocks, width))
    d = 1
    while d < width:
        y = y._alu(op, _shift_last(y, d, identity))
        d *= 2
    if blocks > 1:
        totals = y.shrink(tuple((0, s) for s in y.shape[:-1]) + ((width - 1, width),)).reshape(lead + (blocks,))
        carry = _shift_last(_scan_last(totals.contiguous(), op), 1, identity).contiguous()
        y = y._alu(op, carry.reshape(lead + (blocks, 1))._broadcast_to(y.shape))
    return y.reshape(lead + (blocks * width,)).shrink(tuple((0, s) for s in lead) + ((0, n),))


class ScanMixin:
    """Prefix sums and products; mixed into `Tensor` through ReductionMixin."""

    __slots__ = ()

    def _scan(self: Tensor, op: Op, axis: int, dtype: Any) -> Tensor:
        if isinstance(axis, (tuple, list)):  # a float or a bool: normalize_axis's ArgumentTypeError
            raise ShapeError(f"cumsum/cumprod take one axis (an int), got {axis!r}: to scan several axes at once, "
                             "flatten them first (x.flatten(a, b).cumsum(a))")
        acc = dtypes.parse(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        x = self.reshape(1) if self.ndim == 0 else self
        ax = x._axes(axis)[0]
        moved = x.cast(acc).transpose(ax, -1)
        out = _scan_last(moved, op).transpose(ax, -1) if x.shape[ax] != 0 else moved.transpose(ax, -1)
        out = out.reshape(()) if self.ndim == 0 else out
        half = dtypes.is_float(self.dtype) and self.dtype.itemsize == 2  # summed in float32, as `sum` does
        return out.cast(self.dtype) if dtype is None and half else out

    def cumsum(self: Tensor, axis: int = 0, dtype: Any = None) -> Tensor:
        """out[..., i, ...] = sum of self[..., :i + 1, ...] along `axis` (torch.cumsum, numpy.cumsum)."""
        return self._scan(Op.ADD, axis, dtype)

    def cumprod(self: Tensor, axis: int = 0, dtype: Any = None) -> Tensor:
        """out[..., i, ...] = product of self[..., :i + 1, ...] along `axis` (torch.cumprod, numpy.cumprod)."""
        return self._scan(Op.MUL, axis, dtype)
