"""Neural-network composites: `matmul` (`@`), `dot`, `softmax`, `log_softmax`, `layernorm`, `conv2d` (with its
sliding-window view).

An op belongs here when it is a composite of movement, elementwise ops and reductions that models use as one
unit. `matmul` broadcasts the batch axes, then multiplies and sums along the shared axis (one reduce kernel).
`conv2d` is torch's cross-correlation (`F.conv2d(x, w, b, stride, padding, dilation, groups)`): the input is
padded, viewed as sliding windows with movement ops only (`_windows`), multiplied with the weight and summed,
so the whole forward pass (bias included) is one reduce kernel.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tolk_core.errors import ArgumentTypeError, ShapeError
from tolk_core.frontend.arguments import as_operand, check_devices
from tolk_core.frontend.movement import broadcast_shape

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    t = (v, v) if isinstance(v, int) else tuple(v)
    if len(t) != 2 or any(not isinstance(i, int) for i in t):
        raise ShapeError(f"conv2d {what} must be an int or a pair of ints, got {v!r}")
    return t


def _matmul_operand(t: Tensor, other: object) -> Tensor:
    """The other operand of a matmul with `t`: a Tensor on `t`'s device, or an ndarray made one."""
    other = as_operand(t, other)
    if not isinstance(other, type(t)):
        raise ArgumentTypeError(f"matmul of a Tensor with {type(other).__name__}: the other operand must be a "
                                "Tensor or an ndarray")
    check_devices("matmul", (t, other))
    return other


class NNMixin:
    """Neural-network composites; mixed into `Tensor`."""

    __slots__ = ()

    def matmul(self: Tensor, other: Tensor) -> Tensor:
        """Matrix product with numpy's rules: batch axes broadcast; a 1-d operand is a row (left) or a column
        (right) vector whose axis is dropped from the result. `other` may be an ndarray (made a Tensor on this
        device); a Tensor on another device is a DeviceMismatchError."""
        other = _matmul_operand(self, other)
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError(f"matmul needs tensors of at least one dimension, got {self.shape} and {other.shape}")
        a = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
        b = other.reshape(other.shape[0], 1) if other.ndim == 1 else other
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul of shapes {self.shape} and {other.shape}: inner sizes {a.shape[-1]} and "
                             f"{b.shape[-2]} differ")
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
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

    def __rmatmul__(self: Tensor, other: Tensor) -> Tensor:
        """`other @ self` for an ndarray `other` (numpy defers to Tensor's operators)."""
        return _matmul_operand(self, other).matmul(self)

    def dot(self: Tensor, other: Tensor) -> Tensor:
        """Matrix product (tinygrad's dot; for two vectors also torch.dot)."""
        return self.matmul(other)

    def softmax(self: Tensor, axis: int = -1) -> Tensor:
        x = self._as_float()
        e = (x - x.max(axis=axis, keepdim=True)).exp()
        return e / e.sum(axis=axis, keepdim=True)

    def log_softmax(self: Tensor, axis: int = -1) -> Tensor:
        x = self._as_float()
        shifted = x - x.max(axis=axis, keepdim=True)
        return shifted - shifted.exp().sum(axis=axis, keepdim=True).log()

    def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (biased variance, no affine parameters)."""
        y = self._as_float() - self._as_float().mean(axis, keepdim=True)
        return y * (y.square().mean(axis, keepdim=True) + eps).rsqrt()

    def _windows_last(self: Tensor, k: int, stride: int, dilation: int) -> Tensor:
        """(..., L) -> (..., o, k) with out[..., i, j] = x[..., i*stride + j*dilation], by movement ops only."""
        size = self.shape[-1]
        o = (size - dilation * (k - 1) - 1) // stride + 1
        row = size + dilation
        # e copies of x read flat in rows one dilation longer: row j starts at x[j*dilation]
        e = math.ceil(k * row / size)
        lead = self.shape[:-1]
        rep = self.unsqueeze(-2).expand(lead + (e, size)).reshape(lead + (e * size,))
        rep = rep.shrink(tuple((0, s) for s in lead) + ((0, k * row),)).reshape(lead + (k, row))
        rep = rep.shrink(tuple((0, s) for s in lead) + ((0, k), (0, (o - 1) * stride + 1)))
        rep = rep._strided([1] * (len(lead) + 1) + [stride])
        return rep.transpose(-1, -2)

    def _windows(self: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
        """Sliding windows over the last len(kernel) axes: (..., *spatial) -> (..., *out, *kernel)."""
        n = len(kernel)
        x, lead = self, self.ndim - n
        for i in range(n):  # each pass turns the first remaining spatial axis into (out, k) at the end
            x = x.permute(tuple(a for a in range(x.ndim) if a != lead) + (lead,))
            x = x._windows_last(kernel[i], stride[i], dilation[i])
        # now (..., o1, k1, o2, k2, ...): outputs first, then kernel axes
        order = tuple(range(lead)) + tuple(lead + 2 * i for i in range(n)) + tuple(lead + 2 * i + 1 for i in range(n))
        return x.permute(order)

    def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
               stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
               padding: int | Sequence[int] = 0) -> Tensor:
        """2-D cross-correlation of (N, C_in, H, W) with weight (C_out, C_in/groups, kh, kw), as torch's conv2d.

        `padding` is an int, (pad_h, pad_w), or (left, right, top, bottom)."""
        if self.ndim != 4 or weight.ndim != 4:
            raise ShapeError(f"conv2d needs a 4-d input and weight, got {self.shape} and {weight.shape}")
        (n, cin, _, _), (cout, cin_g, kh, kw) = self.shape, weight.shape
        if cin != cin_g * groups or cout % groups:
            raise ShapeError(f"conv2d of input {self.shape} with weight {weight.shape} and groups={groups}: "
                             f"input channels {cin} must be {groups} x {cin_g} and {cout} output channels divisible "
                             f"by {groups}")
        st, dl = _pair(stride, "stride"), _pair(dilation, "dilation")
        if isinstance(padding, int):
            pads = ((padding, padding), (padding, padding))
        elif len(padding) == 2:
            pads = ((padding[0], padding[0]), (padding[1], padding[1]))
        elif len(padding) == 4:
            pads = ((padding[2], padding[3]), (padding[0], padding[1]))
        else:
            raise ShapeError(f"conv2d padding must be an int, (pad_h, pad_w) or (left, right, top, bottom), "
                             f"got {padding!r}")
        if min(*st, *dl) < 1:
            raise ShapeError(f"conv2d stride {st} and dilation {dl} must be positive")
        x = self.pad(((0, 0), (0, 0)) + pads)
        h, w = x.shape[2:]
        if h < dl[0] * (kh - 1) + 1 or w < dl[1] * (kw - 1) + 1:
            raise ShapeError(f"conv2d kernel {(kh, kw)} (dilation {dl}) is larger than the padded input {(h, w)}")
        win = x._windows((kh, kw), st, dl)  # (N, C_in, oh, ow, kh, kw)
        oh, ow = win.shape[2:4]
        win = win.reshape(n, groups, 1, cin_g, oh, ow, kh, kw)
        out = (win * weight.reshape(1, groups, cout // groups, cin_g, 1, 1, kh, kw)).sum(axis=(3, 6, 7))
        out = out.reshape(n, cout, oh, ow)
        return out if bias is None else out + bias.reshape(1, cout, 1, 1)
