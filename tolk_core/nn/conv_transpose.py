"""Transposed convolution, torch's: `conv_transpose1d/2d/3d(x, weight, bias, stride, padding, output_padding,
groups, dilation)` (re-exported by nn.functional) and the layers `ConvTranspose1d/2d/3d` (re-exported by nn),
weight layout (C_in, C_out/groups, *kernel). ONNX's ConvTranspose is this op.

Plan: a transposed convolution is the gradient of a convolution with respect to its input, which is itself a
convolution (`Tensor.conv2d`, N-d) of a rearranged input with a rearranged kernel:
1. the input is dilated by the stride: stride-1 zeros between neighbouring elements of every spatial axis (a
   new axis of size 1 padded to `stride`, flattened, the trailing zeros shrunk away);
2. each spatial axis is padded by dilation*(k-1) - padding before and that plus output_padding after (a
   negative amount crops, as `Tensor.pad` does);
3. the kernel is flipped on its spatial axes and its channel axes swapped within each group:
   (C_in, C_out/g, *k) -> (g, C_in/g, C_out/g, *k) -> (g, C_out/g, C_in/g, *k) -> (C_out, C_in/g, *k);
4. a stride-1 convolution with that kernel, the same dilation and groups, then the bias.
Output size per axis: (L - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1. Everything is
movement ops and the convolution's reduce, so gradients (input, weight, bias) come from autograd.
torch's rules: output_padding must be smaller than stride or dilation (ArgumentError otherwise); channels
must divide by groups (ShapeError).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.frontend.nn_ops import spatial_arg
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn.module import Module, param, uniform_init


def _dilated(x: Tensor, strides: tuple[int, ...]) -> Tensor:
    """x with stride-1 zeros inserted between the elements of each of its trailing len(strides) axes."""
    nd = len(strides)
    for i, s in enumerate(strides):
        axis = x.ndim - nd + i
        n = x.shape[axis]
        if s == 1 or n == 0:
            continue
        y = x.unsqueeze(axis + 1).pad(tuple((0, s - 1) if a == axis + 1 else (0, 0) for a in range(x.ndim + 1)))
        y = y.reshape(x.shape[:axis] + (n * s,) + x.shape[axis + 1:])
        x = y.shrink(tuple((0, (n - 1) * s + 1) if a == axis else None for a in range(x.ndim)))
    return x


def _transposed_kernel(weight: Tensor, groups: int) -> Tensor:
    """(C_in, C_out/g, *k) -> (C_out, C_in/g, *k), spatially flipped: the kernel of the equivalent convolution."""
    cin, cout_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    w = weight.reshape((groups, cin // groups, cout_g) + kernel).transpose(1, 2)
    w = w.reshape((groups * cout_g, cin // groups) + kernel)
    return w.flip(tuple(range(2, w.ndim)))


def conv_transpose(nd: int, x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                   padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """torch's F.conv_transpose{nd}d on a batched (N, C_in, *spatial) or unbatched input (module docstring)."""
    if weight.ndim != nd + 2 or x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"conv_transpose{nd}d needs a {nd + 2}-d weight (C_in, C_out/groups, *kernel) and a "
                         f"{nd + 2}-d (or {nd + 1}-d unbatched) input, got {weight.shape} and {x.shape}")
    if x.ndim == nd + 1:
        return conv_transpose(nd, x.unsqueeze(0), weight, bias, stride, padding, output_padding, groups,
                              dilation).squeeze(0)
    st, pd = spatial_arg(stride, nd, "stride"), spatial_arg(padding, nd, "padding")
    op, dl = spatial_arg(output_padding, nd, "output_padding"), spatial_arg(dilation, nd, "dilation")
    if min(*st, *dl) < 1 or min(*pd, *op) < 0:
        raise ArgumentError(f"conv_transpose{nd}d stride {st} and dilation {dl} must be positive, padding {pd} "
                            f"and output_padding {op} non-negative")
    if any(o >= max(s, d) for o, s, d in zip(op, st, dl, strict=True)):
        raise ArgumentError(f"conv_transpose{nd}d output_padding {op} must be smaller than the stride {st} or the "
                            f"dilation {dl} on each axis (torch's rule)")
    cin, kernel = weight.shape[0], weight.shape[2:]
    if x.shape[1] != cin or cin % groups:
        raise ShapeError(f"conv_transpose{nd}d of input {x.shape} with weight {weight.shape} and groups={groups}: "
                         f"the input has {x.shape[1]} channels, the weight expects {cin}, divisible by {groups}")
    pads = tuple((d * (k - 1) - p, d * (k - 1) - p + o) for k, p, o, d in zip(kernel, pd, op, dl, strict=True))
    y = _dilated(x, st).pad(((0, 0), (0, 0)) + pads)
    out = y.conv2d(_transposed_kernel(weight, groups), None, groups=groups, dilation=dl)
    return out if bias is None else out + bias.reshape((1, -1) + (1,) * nd)


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """torch's F.conv_transpose1d: (N, C_in, L) or (C_in, L) with weight (C_in, C_out/groups, k)."""
    return conv_transpose(1, x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """torch's F.conv_transpose2d: (N, C_in, H, W) or (C_in, H, W) with weight (C_in, C_out/groups, kh, kw)."""
    return conv_transpose(2, x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """torch's F.conv_transpose3d: (N, C_in, D, H, W) or unbatched, weight (C_in, C_out/groups, kd, kh, kw)."""
    return conv_transpose(3, x, weight, bias, stride, padding, output_padding, groups, dilation)


class _ConvTransposeNd(Module):
    """torch's ConvTranspose{nd}d: weight (C_in, C_out/groups, *kernel) and bias (C_out,) drawn from
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with torch's fan_in = C_out/groups * prod(kernel) (its fan of the
    weight's second axis)."""

    nd = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 device: str | None = None):
        if in_channels % groups or out_channels % groups:
            raise ArgumentError(f"ConvTranspose{self.nd}d channels {in_channels} -> {out_channels} must both "
                                f"divide by groups={groups}")
        kernel = spatial_arg(kernel_size, self.nd, "kernel_size")
        bound = 1 / math.sqrt(out_channels // groups * math.prod(kernel))
        self.weight = param(uniform_init(bound, in_channels, out_channels // groups, *kernel), device)
        self.bias = param(uniform_init(bound, out_channels), device) if bias else None
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation

    def forward(self, x: Tensor) -> Tensor:
        return conv_transpose(self.nd, x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                              self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """torch's ConvTranspose1d over (N, C, L) or (C, L)."""

    nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """torch's ConvTranspose2d over (N, C, H, W) or (C, H, W)."""

    nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """torch's ConvTranspose3d over (N, C, D, H, W) or (C, D, H, W)."""

    nd = 3
