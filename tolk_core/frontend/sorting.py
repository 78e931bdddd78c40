"""Ordering along one axis: `sort(dim, descending, stable)` and `topk(k, dim, largest, sorted)`, torch's
(ONNX's TopK), each returning (values, indices) with int64 indices.

An op belongs here when an element's output position is its rank among the elements of its axis.

Algorithm (rank by comparison count): along the axis of size n, element i's rank is the number of elements j
that go before it: those strictly before it in the order, and those equal to it with j < i. Ranks are then a
permutation of 0..n-1 (ties broken by the lower index first: a stable sort, ONNX's TopK rule), and output
position r holds the element whose rank is r, selected one-hot (frontend/indexing.py's `pick`, bit-exact, so
-0.0 and NaN payloads survive; the gradient flows to the selected element). Everything is elementwise ops and
reductions, correct for any n, with no data-dependent control flow: cost O(n^2) comparisons per row for the
ranks and O(n * m) for the m outputs (m = n for sort, k for topk), fused into reduce kernels that hold O(n) per
row in memory (the n x n comparison grid is never stored). Suited to the axis sizes of models (up to some
thousands); a very long axis costs quadratic time.

Order: NaN is larger than every number (torch, numpy), so it comes last ascending and first descending; -0.0
and 0.0 are equal (kept in index order). Bools order False < True. `stable` is accepted for torch's signature;
the sort is always stable. `topk(sorted=False)` returns them sorted too (torch leaves that order unspecified).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tolk_core.errors import ArgumentError
from tolk_core.frontend.indexing import pick
from tolk_core.frontend.movement import normalize_axis
from tolk_core.ir.dtype import dtypes

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def _goes_before(a: Tensor, b: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
    """(a strictly before b in the order, a tied with b) elementwise, NaN counting as the largest value."""
    if dtypes.is_bool(a.dtype):
        a, b = a.cast(dtypes.uint8), b.cast(dtypes.uint8)
    before = a > b if descending else a < b
    tie = a == b
    if dtypes.is_float(a.dtype):
        na, nb = a != a, b != b
        before = before | ((na & nb.logical_not()) if descending else (nb & na.logical_not()))
        tie = tie | (na & nb)
    return before, tie


def ranks(x: Tensor, descending: bool) -> Tensor:
    """Each element's position in the stable order of its last axis: an int64 tensor of x's shape."""
    n = x.shape[-1]
    mine, theirs = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, j]: element i, element j
    before, tie = _goes_before(theirs, mine, descending)
    pos = type(x).arange(n, dtype=dtypes.int64, device=x.device)
    earlier = pos.reshape(1, n) < pos.reshape(n, 1)  # [i, j]: j < i
    return (before | (tie & earlier)).sum(axis=-1, dtype=dtypes.int64)


def _first_ranked(x: Tensor, m: int, descending: bool) -> tuple[Tensor, Tensor]:
    """The m first elements of the order along the last axis, and their indices (int64)."""
    n = x.shape[-1]
    rank = ranks(x, descending)
    out_pos = type(x).arange(m, dtype=dtypes.int64, device=x.device).reshape(m, 1)
    hit = rank.unsqueeze(-2) == out_pos  # [..., r, i]: element i has rank r
    idx = type(x).arange(n, dtype=dtypes.int64, device=x.device)
    return pick(hit, x.unsqueeze(-2), (x.ndim,)), pick(hit, idx, (x.ndim,))


class SortingMixin:
    """sort / topk; mixed into `Tensor` (algorithm and order in the module docstring)."""

    __slots__ = ()

    def _ordered(self: Tensor, dim: int, m: int, descending: bool) -> tuple[Tensor, Tensor]:
        """The first m of the order along `dim` (values, int64 indices), `dim` moved back into place."""
        if self.ndim == 0:
            values, indices = self.reshape(1)._ordered(0, m, descending)
            return values.reshape(()), indices.reshape(())
        axis = normalize_axis(dim, self.ndim)
        x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
        values, indices = _first_ranked(x, m, descending)
        if axis != self.ndim - 1:
            values, indices = values.transpose(axis, -1), indices.transpose(axis, -1)
        return values, indices

    def sort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = True) -> tuple[Tensor, Tensor]:
        """torch.sort: (values, int64 indices) along `dim`, stable; NaN sorts as the largest value."""
        n = self.shape[normalize_axis(dim, self.ndim)] if self.ndim else 1
        return self._ordered(dim, n, descending)

    def argsort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
        """torch.argsort: the int64 indices of `sort`."""
        return self.sort(dim, descending, stable)[1]

    def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
        """torch.topk: the k largest (or smallest) along `dim` in order, with int64 indices; ties: lower index
        first. ArgumentError when k is outside [0, size of dim]."""
        n = self.shape[normalize_axis(dim, self.ndim)] if self.ndim else 1
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n:
            raise ArgumentError(f"topk's k must be an int in [0, {n}] (the size of axis {dim} of {self.shape}), "
                                f"got {k!r}")
        return self._ordered(dim, k, largest)
