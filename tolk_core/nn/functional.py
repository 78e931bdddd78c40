"""Functional forms of the layers: activations, log_softmax, cross_entropy, layernorm, conv2d, dropout masks.

Where `Tensor` has the op as a method (the op surface grows independently of nn), the method is used;
otherwise the composite here is built from primitives that every Tensor has. Either way the result is a
tensor graph of differentiable UOps, so autograd needs nothing op-specific.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from tolk_core.errors import ShapeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


def _tensor_method(name: str):
    """Tensor's own implementation of `name`, or None where Tensor does not have it (yet)."""
    return getattr(Tensor, name, None)


def relu(x: Tensor) -> Tensor:
    return x.relu()


def sigmoid(x: Tensor) -> Tensor:
    if (m := _tensor_method("sigmoid")) is not None:
        return m(x)
    return 1 / (1 + (-x).exp())


def tanh(x: Tensor) -> Tensor:
    if (m := _tensor_method("tanh")) is not None:
        return m(x)
    return 2 * sigmoid(2 * x) - 1


def silu(x: Tensor) -> Tensor:
    if (m := _tensor_method("silu")) is not None:
        return m(x)
    return x * sigmoid(x)


def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation (torch's `approximate="tanh"`)."""
    if (m := _tensor_method("gelu")) is not None:
        return m(x)
    return 0.5 * x * (1 + tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    if (m := _tensor_method("log_softmax")) is not None:
        return m(x, axis)
    shifted = x - x.max(axis=axis, keepdim=True)
    return shifted - shifted.exp().sum(axis=axis, keepdim=True).log()


_class_ids: dict[tuple, Tensor] = {}


def one_hot(labels: Tensor, classes: int) -> Tensor:
    """(..., ) integer labels -> (..., classes) float32 one-hot rows (a label outside [0, classes) gives a
    row of zeros)."""
    if dtypes.is_float(labels.dtype):
        raise ShapeError(f"one_hot needs integer labels, got {labels.dtype.name}")
    key = (classes, labels.dtype, labels.device)
    if (grid := _class_ids.get(key)) is None:  # uploaded once and kept: a JIT replay reads the same storage
        grid = _class_ids[key] = Tensor.arange(classes, dtype=labels.dtype, device=labels.device)
    return (labels.reshape(labels.shape + (1,)) == grid).cast(dtypes.float32)


def cross_entropy(logits: Tensor, labels: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch's F.cross_entropy for (N, C) logits and (N,) integer class labels."""
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ShapeError(f"cross_entropy needs (N, C) logits and (N,) labels, got {logits.shape} and {labels.shape}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    classes = logits.shape[1]
    target = one_hot(labels, classes).cast(logits.dtype)
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    loss = -(log_softmax(logits) * target).sum(axis=1)
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def layernorm(x: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis`, biased variance, no affine parameters."""
    if (m := _tensor_method("layernorm")) is not None:
        return m(x, axis, eps)
    y = x - x.mean(axis, keepdim=True)
    return y / ((y * y).mean(axis, keepdim=True) + eps).sqrt()


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    t = (v, v) if isinstance(v, int) else tuple(v)
    if len(t) != 2 or not all(isinstance(i, int) and i >= 0 for i in t):
        raise ShapeError(f"conv2d {what} must be a non-negative int or a pair of them, got {v!r}")
    return t


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """torch's F.conv2d: (N, C_in, H, W) cross-correlated with (C_out, C_in/groups, kh, kw)."""
    if (m := _tensor_method("conv2d")) is not None:
        return m(x, weight, bias, groups=groups, stride=stride, dilation=dilation, padding=_pair(padding, "padding"))
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv2d needs a 4-d input and weight, got {x.shape} and {weight.shape}")
    (n, cin, _, _), (cout, cin_g, kh, kw) = x.shape, weight.shape
    if cin != cin_g * groups or cout % groups:
        raise ShapeError(f"conv2d of input {x.shape} with weight {weight.shape} and groups={groups}: input "
                         f"channels must be groups x {cin_g} and output channels divisible by groups")
    (sh, sw), (dh, dw), (ph, pw) = _pair(stride, "stride"), _pair(dilation, "dilation"), _pair(padding, "padding")
    if min(sh, sw, dh, dw) < 1:
        raise ShapeError(f"conv2d stride {(sh, sw)} and dilation {(dh, dw)} must be positive")
    x = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw)))
    h, w = x.shape[2:]
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"conv2d kernel {(kh, kw)} (dilation {(dh, dw)}) is larger than the padded input {(h, w)}")
    # windows (N, C_in, kh*kw, oh, ow): each kernel tap's strided view, padded into its own slot of the tap axis
    # and summed (a concatenation made of movement ops and adds, which fuses into the consumer)
    taps = kh * kw
    win = None
    for i in range(kh):
        for j in range(kw):
            view = x[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            t = i * kw + j
            slot = view.reshape(n, cin, 1, oh, ow).pad(((0, 0), (0, 0), (t, taps - 1 - t), (0, 0), (0, 0)))
            win = slot if win is None else win + slot
    assert win is not None
    win = win.reshape(n, groups, 1, cin_g, taps, oh, ow)
    out = (win * weight.reshape(1, groups, cout // groups, cin_g, taps, 1, 1)).sum(axis=(3, 4))
    out = out.reshape(n, cout, oh, ow)
    return out if bias is None else out + bias.reshape(1, cout, 1, 1)


# ---- counter-based random bits for dropout: a device-side hash of (element index, seed, counter), so a
# JIT replay draws new masks (the counter is state in device memory, advanced by `assign`)
_M1, _M2, _GOLDEN = 0x85EBCA6B, 0xC2B2AE35, 0x9E3779B9


def _u32(op: Op, a: Tensor, b: Tensor | int) -> Tensor:
    if not isinstance(b, Tensor):
        b = Tensor.full(a.shape, b, dtypes.uint32, a.device)
    return Tensor(UOp(op, dtypes.uint32, (a.uop, b.expand(a.shape).uop)), a.device)


def _fmix32(x: Tensor) -> Tensor:
    """murmur3's 32-bit finaliser (a bijection with full avalanche) on a uint32 tensor."""
    x = _u32(Op.XOR, x, _u32(Op.SHR, x, 16))
    x = _u32(Op.MUL, x, _M1)
    x = _u32(Op.XOR, x, _u32(Op.SHR, x, 13))
    x = _u32(Op.MUL, x, _M2)
    return _u32(Op.XOR, x, _u32(Op.SHR, x, 16))


def uniform_bits(index: Tensor, seed: int, counter: Tensor) -> Tensor:
    """Uniform floats in [0, 1) per element of the uint32 `index` tensor, for draw number `counter` (a uint32
    tensor of shape (1,)) of stream `seed`: the top 24 bits of a hash, exact on every device."""
    key = _fmix32(_u32(Op.XOR, counter, seed & 0xFFFFFFFF))
    h = _fmix32(_u32(Op.XOR, _u32(Op.MUL, index, _GOLDEN), key.reshape((1,) * index.ndim).expand(index.shape)))
    return _u32(Op.SHR, _fmix32(h), 8).cast(dtypes.float32) * (1.0 / (1 << 24))
