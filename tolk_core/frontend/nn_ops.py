"""Neural-network composites: `matmul` (`@`), `dot`, `softmax`, `log_softmax`, `layernorm`, `conv2d` (N-d, with
its sliding-window view), `max_pool2d` / `avg_pool2d` (any number of pooled axes) and
`scaled_dot_product_attention`.

An op belongs here when it is a composite of movement, elementwise ops and reductions that models use as one
unit. `matmul` broadcasts the batch axes, then multiplies and sums along the shared axis (one reduce kernel).
`conv2d` is torch's cross-correlation (`F.conv2d(x, w, b, stride, padding, dilation, groups)`): the input is
padded, viewed as sliding windows with movement ops only (`_windows`), multiplied with the weight and summed,
so the whole forward pass (bias included) is one reduce kernel; a strided one is a sum of stride-1 convolutions of
its input's phases (frontend/strided_conv.py). Pooling reads the same windows over an input
padded with -inf (max) or zeros (average; the divisor, how many positions each window covers, depends on shapes
only and is computed on the host).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.errors import ArgumentTypeError, ShapeError
from tolk_core.frontend import autograd, strided_conv
from tolk_core.frontend import softmax as softmax_op
from tolk_core.frontend.arguments import as_operand, check_devices
from tolk_core.frontend.composite import as_node
from tolk_core.frontend.products import batch_shape, matmul_formula, matmul_node, product_nodes
from tolk_core.frontend.reductions import is_half
from tolk_core.ir.dtype import dtypes, promote_types
from tolk_core.ir.uop import UOp, prod

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def spatial_arg(v: int | Sequence[int], nd: int, what: str) -> tuple[int, ...]:
    """An int or a sequence of `nd` ints (a size per spatial axis) as a tuple of `nd` ints."""
    t = (v,) * nd if isinstance(v, int) else tuple(v)
    if len(t) != nd or any(not isinstance(i, int) for i in t):
        raise ShapeError(f"{what} must be an int or {nd} ints (one per spatial axis), got {v!r}")
    return t


def _matmul_operand(t: Tensor, other: object) -> Tensor:
    """The other operand of a matmul with `t`: a Tensor on `t`'s device, or an ndarray made one."""
    other = as_operand(t, other)
    if not isinstance(other, type(t)):
        raise ArgumentTypeError(f"matmul of a Tensor with {type(other).__name__}: the other operand must be a "
                                "Tensor or an ndarray")
    check_devices("matmul", (t, other))
    return other


def _conv_vjp(x: Tensor, pads: tuple[tuple[int, int], ...], weight: Tensor, win: Tensor, groups: int,
              dilation: tuple[int, ...]) -> Callable[[UOp], list[tuple[UOp, UOp]]]:
    """The gradient of a stride-1 convolution's reduction (N, groups, C_out/groups, 1, *out, 1...) of the
    windows `win` (N, groups, 1, C_in/groups, *out, *kernel) of input `x` padded by `pads` ((before, after) per
    spatial axis) by `weight`, as two convolutions' worth of reductions: d/dx is the gradient convolved with
    the flipped, transposed weight, padded by the dilated kernel's extent less the forward's padding (a
    negative amount crops), so that its windows cover exactly `x`; it runs through the convolution's own fast
    plan, where the node-by-node rules would give every input element a sum of scattered window copies
    (docs/training.md, "Convolution gradients"). d/dweight: `_conv_weight_grad`."""
    nd = weight.ndim - 2
    (cout, cin_g), kernel = weight.shape[:2], weight.shape[2:]
    n, out_sp = x.shape[0], win.shape[4:4 + nd]
    # the forward graph's nodes, not the Tensors: a Tensor kept alive here would count as a live lazy value
    # (computed before every write into what it reads), and an assigned weight Tensor moves to a new node
    new, device, xu, wu, winu = type(x), x.device, x.uop, weight.uop, win.uop
    reach = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
    # torch's flat (before, after) pairs from the last axis back
    back = [v for r, (b, a) in reversed(list(zip(reach, pads, strict=True))) for v in (r - b, r - a)]

    def vjp(g: UOp) -> list[tuple[UOp, UOp]]:
        gt, w = new(g, device), new(wu, device)
        wt = w.reshape((groups, cout // groups, cin_g) + kernel).transpose(1, 2)
        wt = wt.reshape((groups * cin_g, cout // groups) + kernel).flip(tuple(range(2, 2 + nd)))
        dx = gt.reshape((n, cout) + out_sp).conv2d(wt, groups=groups, dilation=dilation, padding=back)
        return [(xu, dx.uop), (wu, _conv_weight_grad(new(winu, device), gt, w.shape, groups).uop)]
    return vjp


def _conv_weight_grad(win: Tensor, g: Tensor, wshape: tuple[int, ...], groups: int) -> Tensor:
    """d/dweight of a convolution: the windows `win` (N, groups, 1, C_in/groups, *out, *kernel) times its
    gradient `g` (N, groups, C_out/groups, 1, *out, 1...), summed over the batch and the output positions,
    as a matmul with the output channels innermost: the gradient is stored channels-last first (one O(output)
    copy) and the sum is stored as (groups, *kernel, C_in/groups, C_out/groups), so the reduction's loads and
    its stores are contiguous in the output channel, the axis the CPU plan splits into vector lanes (stored in
    the weight's own layout, its innermost output axis is the kernel's width: scalar code, ~1 GFLOP/s)."""
    nd = len(wshape) - 2
    n, out_sp = win.shape[0], win.shape[4:4 + nd]
    cout_g = wshape[0] // groups
    a = win.permute((1, *range(4 + nd, 4 + 2 * nd), 3, 2, 0, *range(4, 4 + nd)))  # (groups, *k, ci, 1, n, *out)
    gt = g.reshape((n, groups * cout_g) + out_sp).permute((0, *range(2, 2 + nd), 1)).contiguous()
    b = gt.reshape((n, *out_sp, groups, cout_g)).permute((nd + 1, nd + 2, 0, *range(1, 1 + nd)))
    b = b.reshape((groups,) + (1,) * (nd + 1) + (cout_g, n) + out_sp)
    dw = (a * b).sum(axis=tuple(range(-(nd + 1), 0))).contiguous()  # (groups, *kernel, ci, co)
    return dw.permute((0, nd + 2, nd + 1, *range(1, 1 + nd))).reshape(wshape)


def _conv_formula(x: Tensor, weight: Tensor, groups: int, st: tuple[int, ...], dl: tuple[int, ...],
                  pads: tuple[tuple[int, int], ...]) -> Tensor:
    """The cross-correlation `Tensor.conv2d` computes, without the bias, its arguments checked: the formula of a
    conv node (`composite.as_node`)."""
    nd = weight.ndim - 2
    n, (cout, cin_g), kernel = x.shape[0], weight.shape[:2], weight.shape[2:]
    src, xp = x, x.pad(pads)
    by_phase = strided_conv.splits_by_phase(kernel, st, dl)
    if any(isinstance(v, int) and v > 0 for pair in pads for v in pair):
        # the input is stored first: a producing convolution would otherwise be computed inside the PAD's
        # gates, in scalar code. A CPU-style device reads it through the PAD (the plan hoists the gates to
        # the bounds of the row's pieces); the GPU plans keep gated loads lane by lane, so there the padded
        # input is stored, one O(input) copy (docs/performance.md, "Convolutions"); the phase copy of a
        # strided convolution is that copy already
        src = x.contiguous()
        stored = by_phase or _hoists_pad_gates(x.device)
        xp = src.pad(pads) if stored else src.pad(pads).contiguous()
    if any(s < d * (k - 1) + 1 for s, k, d in zip(xp.shape[2:], kernel, dl, strict=True)):
        raise ShapeError(f"conv{nd}d kernel {kernel} (dilation {dl}) is larger than the padded input "
                         f"{xp.shape[2:]}")
    if by_phase:
        out_sp = tuple((s - k) // t + 1 for s, k, t in zip(xp.shape[2:], kernel, st, strict=True))
        return strided_conv.phase_conv(xp, weight, groups, st, out_sp)
    win = xp._windows(kernel, st, dl)  # (N, C_in, *out, *kernel)
    out_sp = win.shape[2:2 + nd]
    win = win.reshape((n, groups, 1, cin_g) + out_sp + kernel)
    if _by_columns(out_sp, cin_g, kernel, st, x.device):
        red = _column_conv(win, weight, groups)
    else:
        w = weight.reshape((1, groups, cout // groups, cin_g) + (1,) * nd + kernel)
        red = (win * w).sum(axis=(3,) + tuple(range(4 + nd, 4 + 2 * nd)), keepdim=True)
    if all(v == 1 for v in st):
        autograd.define_gradient(red.uop, _conv_vjp(src, pads[2:], weight, win, groups, dl))
    return red.reshape((n, cout) + out_sp)


# a convolution of a small image and a deep reduction goes through its stored windows (im2col): the direct plan
# tiles a row of the output, and a row of 7 fills a vector poorly (resnet50's 7 x 7 x 512 3x3 layers: 34 GFLOP/s
# direct, 81 through the windows, at load 2); with 64 input channels at 7 x 7, or 256 at 14 x 14, the copy costs
# more than it saves (direct against windows: 0.19 against 0.53 ms, 1.7 against 4.6). Only CPU-style devices:
# the GPU plans have their own tiles for a short row
COLUMNS_MOST_POSITIONS = 64   # output positions at most
COLUMNS_LEAST_DEPTH = 2048    # C_in/groups x kernel positions at least


def _by_columns(out_sp: tuple[Any, ...], cin_g: int, kernel: tuple[int, ...], st: tuple[int, ...],
                device: str | tuple[str, ...]) -> bool:
    """Whether a stride-1 convolution is computed from its stored windows (`_column_conv`) on `device`."""
    if not all(isinstance(v, int) for v in out_sp) or any(v != 1 for v in st):
        return False
    return math.prod(out_sp) <= COLUMNS_MOST_POSITIONS and cin_g * math.prod(kernel) >= COLUMNS_LEAST_DEPTH \
        and _hoists_pad_gates(device)


def _column_conv(win: Tensor, weight: Tensor, groups: int) -> Tensor:
    """The convolution of windows `win` (N, groups, 1, C_in/groups, *out, *kernel) by `weight`, through the windows
    stored with each output position's C_in/groups x kernel values contiguous (one copy of kernel-size x the
    input), then summed as a matmul of the weight's rows and those columns (the CPU plan's packed panels, B
    stored along k); the same shape (N, groups, C_out/groups, 1, *out, 1...) as the direct reduction."""
    n, cin_g = win.shape[0], win.shape[3]
    nd = (win.ndim - 4) // 2
    out_sp, kernel = win.shape[4:4 + nd], win.shape[4 + nd:]
    depth, positions = cin_g * math.prod(kernel), math.prod(out_sp)
    order = (0, 1, 2) + tuple(range(4, 4 + nd)) + (3,) + tuple(range(4 + nd, 4 + 2 * nd))
    cols = win.permute(order).contiguous().reshape(n, groups, 1, positions, depth)
    w = weight.reshape(1, groups, weight.shape[0] // groups, 1, depth)
    red = (cols * w).sum(axis=4)  # (N, groups, C_out/groups, positions)
    return red.reshape((n, groups, weight.shape[0] // groups, 1) + out_sp + (1,) * nd)


def _max_pool(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool) -> Tensor:
    """`Tensor.max_pool2d`'s formula: the max over each window (of a max_pool node)."""
    win, _ = x._pool_windows(kernel_size, stride, padding, dilation, ceil_mode, float("-inf"))
    nd = win.ndim - x.ndim
    return win.max(axis=tuple(range(-nd, 0)))


def _hashable(arg: int | Sequence[int] | None) -> int | tuple[int, ...] | None:
    """A size argument as part of a composite's key (a list given as a tuple)."""
    return arg if arg is None or isinstance(arg, int) else tuple(arg)


def _hoists_pad_gates(device: str | tuple[str, ...]) -> bool:
    """Whether kernels on `device` read a padded input well through its gates: a CPU-style renderer (no work
    groups), whose plan splits a padded row into an ungated interior and masked borders (codegen/borders.py)."""
    if not isinstance(device, str):
        return False
    from tolk_core.plugins import Device  # (the plugins load at first use, not when the front end is imported)
    return not Device[device].renderer.has_local


def spatial_pads(padding: int | Sequence[int], nd: int) -> tuple[tuple[int, int], ...]:
    """Convolution padding as (before, after) per spatial axis: from an int, one int per axis (both sides), or
    2*nd flat (before, after) pairs listed from the last axis back (torch's F.pad order)."""
    if not isinstance(padding, int) and len(padding) == 2 * nd:
        flat = tuple(padding)
        return tuple((flat[2 * i], flat[2 * i + 1]) for i in reversed(range(nd)))
    return tuple((p, p) for p in spatial_arg(padding, nd, "padding"))


# avg_pool2d's divisor grids by (shapes, pooling, dtype, device)
_divisors: dict[tuple, Tensor] = {}


def _window_counts(size: int, out: int, k: int, stride: int, pad: int, include_pad: bool) -> np.ndarray:
    """How many positions each of `out` pooling windows covers along one axis: those inside the input, or with
    `include_pad` inside the padded input (never past it: torch's divisor for ceil_mode windows)."""
    start = np.arange(out) * stride - pad
    end = np.minimum(start + k, size + pad)
    if not include_pad:
        start, end = np.maximum(start, 0), np.minimum(end, size)
    return (end - start).astype(np.float64)


class NNMixin:
    """Neural-network composites; mixed into `Tensor`."""

    __slots__ = ()

    def matmul(self: Tensor, other: Tensor) -> Tensor:
        """Matrix product with numpy's rules: batch axes broadcast; a 1-d operand is a row (left) or a column
        (right) vector whose axis is dropped from the result. `other` may be an ndarray (made a Tensor on this
        device); a Tensor on another device is a DeviceMismatchError."""
        if type(other) is not type(self) or other.device != self.device:
            other = _matmul_operand(self, other)
        sa, sb = self.shape, other.shape
        if not sa or not sb:
            raise ShapeError(f"matmul needs tensors of at least one dimension, got {sa} and {sb}")
        a = self.reshape(1, sa[0]) if len(sa) == 1 else self
        b = other.reshape(sb[0], 1) if len(sb) == 1 else other
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul of shapes {sa} and {sb}: inner sizes {a.shape[-1]} and {b.shape[-2]} differ")
        dt = a.uop.dtype if a.uop.dtype is b.uop.dtype else promote_types(a.dtype, b.dtype)
        au, bu, sa2, sb2 = a.cast(dt).uop, b.cast(dt).uop, a.shape, b.shape
        batch_shape(sa2, sb2)  # validates the batch axes, raising ShapeError
        # numpy's matmul keeps the operands' dtype: integers accumulate in it (a sum would widen to int64), bools
        # are an OR of ANDs; half floats sum in float32 (`sum`)
        kind = dt.kind
        if kind == "b" or is_half(dt):
            wrapped = self._wrap(product_nodes(au, bu, sa2, sb2))
            out = wrapped.max(axis=-1) if kind == "b" else wrapped.sum(axis=-1)
        elif type(self.device) is str and all(type(d) is int for d in sa2 + sb2) and \
                not autograd.gradients_expected():
            out = self._wrap(matmul_node(au, bu, sa2, sb2))  # one node until prepare (frontend/products.py)
        else:  # the formula's nodes: symbolic sizes; shards (the sharding pass maps the IR's own ops); or a
            # training graph, whose backward would build the formula again to differentiate the node
            out = self._wrap(matmul_formula(au, bu))
        if len(sa) == 1:
            out = out.reshape(out.shape[:-2] + out.shape[-1:])
        if len(sb) == 1:
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
        return softmax_op.softmax(self._as_float(), axis)  # its gradient as a whole: frontend/softmax.py

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
        """Sliding windows over the last len(kernel) axes: (..., *spatial) -> (..., *out, *kernel). Built by
        movement ops chosen by the shape alone, so remembered per shape (`_chained`)."""
        return self._chained(("windows", tuple(kernel), tuple(stride), tuple(dilation)),
                             lambda x: x._build_windows(kernel, stride, dilation))

    def _build_windows(self: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...],
                       dilation: tuple[int, ...]) -> Tensor:
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
        """N-d cross-correlation as torch's conv1d/conv2d/conv3d; the weight's rank sets the dimension (as
        tinygrad's conv2d): input (N, C_in, *spatial) or unbatched (C_in, *spatial), weight
        (C_out, C_in/groups, *kernel). `stride`, `dilation`: an int or one per spatial axis. `padding`: an int,
        one per spatial axis, or (before, after) flat pairs from the last axis back ((left, right, top, bottom)
        in 2-d)."""
        nd = weight.ndim - 2
        if nd < 1 or self.ndim not in (nd + 1, nd + 2):
            raise ShapeError(f"conv{max(nd, 1)}d needs a {nd + 2}-d input (or {nd + 1}-d unbatched) for a "
                             f"{weight.ndim}-d weight, got {self.shape} and {weight.shape}")
        if self.ndim == nd + 1:
            return self.unsqueeze(0).conv2d(weight, bias, groups, stride, dilation, padding).squeeze(0)
        cin, (cout, cin_g) = self.shape[1], weight.shape[:2]
        if cin != cin_g * groups or cout % groups:
            raise ShapeError(f"conv{nd}d of input {self.shape} with weight {weight.shape} and groups={groups}: "
                             f"input channels {cin} must be {groups} x {cin_g} and {cout} output channels divisible "
                             f"by {groups}")
        st, dl = spatial_arg(stride, nd, "stride"), spatial_arg(dilation, nd, "dilation")
        pads = ((0, 0), (0, 0)) + spatial_pads(padding, nd)
        if min(*st, *dl) < 1:
            raise ShapeError(f"conv{nd}d stride {st} and dilation {dl} must be positive")
        static = (groups, st, dl, pads)
        out = as_node("conv", _conv_formula, (self, weight), static) if self.dtype == weight.dtype else None
        out = out if out is not None else _conv_formula(self, weight, *static)
        return out if bias is None else out + bias.reshape((1, cout) + (1,) * nd)

    def _pool_windows(self: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
                      padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool,
                      value: float) -> tuple[Tensor, tuple[tuple[int, int], ...]]:
        """Windows (..., *out, *kernel) over the last len(kernel) axes (an int kernel: 2 axes), padded with
        `value`; with ceil_mode the last window may start in the padding on the right, as long as it starts
        inside the input or the left padding (torch's rule). Also the (before, after) padding of each axis."""
        nd = 2 if isinstance(kernel_size, int) else len(kernel_size)
        k = spatial_arg(kernel_size, nd, "kernel_size")
        st = k if stride is None else spatial_arg(stride, nd, "stride")
        pd, dl = spatial_arg(padding, nd, "padding"), spatial_arg(dilation, nd, "dilation")
        if self.ndim < nd or min(*k, *st, *dl) < 1 or any(2 * p > kk for p, kk in zip(pd, k, strict=True)):
            raise ShapeError(f"pooling of {self.shape} by kernel {k}, stride {st}, padding {pd}, dilation {dl}: "
                             "sizes must be positive, padding at most half the kernel, and the input needs "
                             f"{nd} spatial axes")
        pads = []
        for size, kk, s, p, d in zip(self.shape[-nd:], k, st, pd, dl, strict=True):
            span = size + 2 * p - d * (kk - 1) - 1
            if span < 0:
                raise ShapeError(f"pooling kernel {k} (dilation {dl}) is larger than the padded input "
                                 f"{self.shape[-nd:]}")
            out = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= size + p:
                out -= 1
            pads.append((p, (out - 1) * s + d * (kk - 1) + 1 - size - p))
        # a padded window's input is stored first (as conv2d's): a convolution producing it would otherwise be
        # computed inside the pad's gates, in scalar code (resnet50's 7x7 stem under its padded max pool: 91% of
        # the model's time at 0.1 GFLOP/s, docs/performance.md "Pretrained models")
        src = self.contiguous() if any(a or b for a, b in pads) else self
        x = src.pad(((0, 0),) * (self.ndim - nd) + tuple(pads), value)
        if st == k and all(d == 1 for d in dl):  # windows that tile the input: a reshape, no sliding view
            lead, outs = x.shape[:-nd], tuple(size // kk for size, kk in zip(x.shape[-nd:], k, strict=True))
            tiles = x.reshape(lead + tuple(v for o, kk in zip(outs, k, strict=True) for v in (o, kk)))
            order = tuple(range(len(lead))) + tuple(len(lead) + 2 * i for i in range(nd)) + \
                tuple(len(lead) + 2 * i + 1 for i in range(nd))
            return tiles.permute(order), tuple(pads)
        return x._windows(k, st, dl), tuple(pads)

    def max_pool2d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                   ceil_mode: bool = False) -> Tensor:
        """Max over sliding windows of the last 2 axes (a kernel tuple of n sizes: the last n axes), padded with
        -inf: torch's F.max_pool2d (stride defaults to the kernel; no return_indices)."""
        static = (_hashable(kernel_size), _hashable(stride), _hashable(padding), _hashable(dilation), ceil_mode)
        node = as_node("max_pool", _max_pool, (self,), static)  # one node, its gradient one node too
        return node if node is not None else _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode)

    def max_pool2d_with_indices(self: Tensor, kernel_size: int | Sequence[int] = 2,
                                stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
                                dilation: int | Sequence[int] = 1, ceil_mode: bool = False) -> tuple[Tensor, Tensor]:
        """max_pool2d and where each maximum is, as torch's return_indices: an int64 index into the flattened
        spatial axes of the input (h * W + w in 2-d), of the first maximum of the window (the first NaN where
        the window holds one; torch's CPU kernel takes the last). The indices are windows of an index grid
        taken as the values' windows are, and the window's argmax selects one."""
        win, _ = self._pool_windows(kernel_size, stride, padding, dilation, ceil_mode, float("-inf"))
        nd = win.ndim - self.ndim
        spatial, size = self.shape[-nd:], prod(self.shape[-nd:])
        if not isinstance(size, int):
            raise ShapeError(f"max pooling with indices needs concrete spatial sizes, got {spatial}")
        grid = type(self).arange(size, dtype=dtypes.int64, device=self.device).reshape(spatial)
        iwin, _ = grid._pool_windows(kernel_size, stride, padding, dilation, ceil_mode, -1)
        flat = win.flatten(-nd)
        k = flat.shape[-1]
        pick = type(self).arange(k, device=self.device) == flat.argmax(-1).unsqueeze(-1)
        index = pick.where(iwin.flatten(-nd), 0).sum(-1)
        return flat.max(-1), index.expand(flat.shape[:-1]).cast(dtypes.int64)

    def avg_pool2d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None) -> Tensor:
        """Mean over sliding windows of the last 2 axes (a kernel tuple of n sizes: the last n axes): torch's
        F.avg_pool2d. The divisor counts the zero padding when `count_include_pad`, never the part of a
        ceil_mode window past the padding; `divisor_override` replaces it. The divisor depends on shapes only:
        it is computed on the host and uploaded once per shape."""
        win, pads = self._pool_windows(kernel_size, stride, padding, 1, ceil_mode, 0.0)
        nd = win.ndim - self.ndim
        total = win.sum(axis=tuple(range(-nd, 0)))
        if divisor_override is not None:
            return total / divisor_override
        out = total.shape[-nd:]
        k = spatial_arg(kernel_size, nd, "kernel_size")
        st = k if stride is None else spatial_arg(stride, nd, "stride")
        key = (self.shape[-nd:], out, k, st, pads, count_include_pad, total.dtype, self.device)
        if (count := _divisors.get(key)) is None:  # uploaded once and kept: a JIT replay reads the same storage
            counts = [_window_counts(size, o, kk, s, p, count_include_pad)
                      for size, o, kk, s, (p, _) in zip(self.shape[-nd:], out, k, st, pads, strict=True)]
            grid = functools.reduce(np.multiply.outer, counts)
            count = _divisors[key] = type(self)(grid.astype(dtypes.to_np(total.dtype)), device=self.device)
        return total / count

    def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False,
                                     scale: float | None = None) -> Tensor:
        """torch's F.scaled_dot_product_attention with this tensor as the query (..., L, E), key (..., S, E),
        value (..., S, Ev): softmax(q k^T * scale + mask) v, scale defaulting to 1/sqrt(E). A boolean
        `attn_mask` (broadcast to (..., L, S)) is True where a query may attend; a float one is added to the
        scores. `is_causal`: query i attends to keys j <= i (not together with attn_mask). `dropout_p` zeroes
        attention weights with that probability (Tensor.rand draws) and rescales the rest. A query every key is
        masked from gets zeros (and zero gradients), as torch's; the softmax is one row kernel with its
        gradient given whole (frontend/softmax.py)."""
        if is_causal and attn_mask is not None:
            raise ShapeError("scaled_dot_product_attention: give attn_mask or is_causal, not both (torch's rule)")
        L, S = self.shape[-2], key.shape[-2]
        scores = self @ key.transpose(-1, -2) * (self.shape[-1] ** -0.5 if scale is None else scale)
        if is_causal:
            attn_mask = type(self).full((L, S), True, dtypes.bool, self.device).tril()
        if attn_mask is not None:
            scores = attn_mask.where(scores, float("-inf")) if dtypes.is_bool(attn_mask.dtype) else scores + attn_mask
        weights = softmax_op.softmax(scores._as_float(), -1, masked_rows_zero=True)
        if dropout_p > 0:
            keep = type(self).rand(*weights.shape, device=self.device) >= dropout_p
            weights = keep.where(weights / (1 - dropout_p), 0.0)
        return weights @ value
