"""Functional forms of the layers (torch's F names and arguments): activations, log_softmax, cross_entropy,
layernorm / group_norm / rms_norm, conv1d/2d/3d, max/avg pooling, scaled_dot_product_attention, dropout masks.

Where `Tensor` has the op as a method (the op surface grows independently of nn), the method is used;
otherwise the composite here is built from primitives that every Tensor has. Either way the result is a
tensor graph of differentiable UOps, so autograd needs nothing op-specific.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.frontend.composite import as_node
from tolk_core.frontend.padding import pad  # noqa: F401  (torch's F.pad)
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.nn.activation import (  # noqa: F401  (re-exported: the functional forms live there)
    celu,
    elu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    mish,
    prelu,
    relu6,
    selu,
    softplus,
    softsign,
)
from tolk_core.nn.conv_transpose import conv_transpose1d, conv_transpose2d, conv_transpose3d  # noqa: F401
from tolk_core.nn.instance_norm import instance_norm  # noqa: F401  (re-exported)
from tolk_core.nn.resample import interpolate  # noqa: F401  (torch's F.interpolate; docs/onnx.md)


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


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """torch's F.gelu: exact x * Phi(x) by erf (`approximate="none"`, the default) or the tanh form."""
    return x.gelu(approximate=approximate)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    if (m := _tensor_method("log_softmax")) is not None:
        return m(x, axis)
    shifted = x - x.max(axis=axis, keepdim=True)
    return shifted - shifted.exp().sum(axis=axis, keepdim=True).log()


def one_hot(labels: Tensor, classes: int) -> Tensor:
    """(..., ) integer labels -> (..., classes) float32 one-hot rows (a label outside [0, classes) gives a
    row of zeros)."""
    if dtypes.is_float(labels.dtype):
        raise ShapeError(f"one_hot needs integer labels, got {labels.dtype.name}")
    # an integer arange is computed where read (no storage): a product with this one-hot is a gather
    # (docs/performance.md "Gathers")
    grid = Tensor.arange(classes, dtype=labels.dtype, device=labels.device)
    return (labels.reshape(labels.shape + (1,)) == grid).cast(dtypes.float32)


def cross_entropy(logits: Tensor, labels: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch's F.cross_entropy for (N, C) logits and (N,) integer class labels."""
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ShapeError(f"cross_entropy needs (N, C) logits and (N,) labels, got {logits.shape} and {labels.shape}")
    if reduction not in ("mean", "sum", "none"):
        raise ArgumentError(f"cross_entropy reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    static = (reduction, label_smoothing)
    node = as_node("cross_entropy", _cross_entropy, (logits, labels), static)
    return node if node is not None else _cross_entropy(logits, labels, *static)


def _cross_entropy(logits: Tensor, labels: Tensor, reduction: str, label_smoothing: float) -> Tensor:
    """`cross_entropy`'s formula (arguments checked), of one node where it can be (`composite.as_node`)."""
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


def _conv(nd: int, x: Tensor, weight: Tensor, bias: Tensor | None, stride: int | Sequence[int],
          padding: int | str | Sequence[int], dilation: int | Sequence[int], groups: int) -> Tensor:
    """torch's F.conv{nd}d on a batched or unbatched input: padding an int, one per axis, "valid" or "same"
    (stride 1; an odd total puts the extra element after, as torch)."""
    if weight.ndim != nd + 2:
        raise ShapeError(f"conv{nd}d needs a {nd + 2}-d weight (C_out, C_in/groups, *kernel), got {weight.shape}")
    if isinstance(padding, str):
        padding = named_padding(padding, nd, weight.shape[2:], stride, dilation)
    elif not isinstance(padding, int) and len(padding) != nd:
        raise ShapeError(f"conv{nd}d padding must be an int, {nd} ints, 'valid' or 'same', got {padding!r}")
    return x.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)


def named_padding(name: str, nd: int, kernel: tuple[int, ...], stride: int | Sequence[int],
                   dilation: int | Sequence[int]) -> tuple[int, ...]:
    """torch's padding="valid" / "same" as flat (before, after) pairs from the last axis back."""
    if name == "valid":
        return (0,) * (2 * nd)
    if name != "same":
        raise ShapeError(f"conv padding string must be 'valid' or 'same', got {name!r}")
    if any(s != 1 for s in ((stride,) * nd if isinstance(stride, int) else stride)):
        raise ShapeError(f"conv padding='same' needs stride 1, got {stride!r} (torch's rule)")
    dl = (dilation,) * nd if isinstance(dilation, int) else tuple(dilation)
    flat: list[int] = []
    for k, d in reversed(list(zip(kernel, dl, strict=True))):
        total = d * (k - 1)
        flat += [total // 2, total - total // 2]
    return tuple(flat)


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | str | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """torch's F.conv1d: (N, C_in, L) or (C_in, L) cross-correlated with (C_out, C_in/groups, k)."""
    return _conv(1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | str | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """torch's F.conv2d: (N, C_in, H, W) or (C_in, H, W) cross-correlated with (C_out, C_in/groups, kh, kw)."""
    return _conv(2, x, weight, bias, stride, padding, dilation, groups)


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | str | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """torch's F.conv3d: (N, C_in, D, H, W) or unbatched, cross-correlated with (C_out, C_in/groups, kd, kh, kw)."""
    return _conv(3, x, weight, bias, stride, padding, dilation, groups)


# ---- pooling: torch's signatures over Tensor.max_pool2d / avg_pool2d (which pool any number of trailing axes)
def _pool_check(x: Tensor, nd: int, what: str) -> None:
    if x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{what} needs a {nd + 1}-d or {nd + 2}-d input, got shape {x.shape}")


def _sizes(v: int | Sequence[int], nd: int) -> tuple[int, ...]:
    return (v,) * nd if isinstance(v, int) else tuple(v)


def _stride(v: int | Sequence[int] | None, nd: int) -> tuple[int, ...] | None:
    return None if v is None else _sizes(v, nd)


def max_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """torch's F.max_pool1d over (N, C, L) or (C, L); padding is -inf."""
    return _max_pool(1, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """torch's F.max_pool2d over (N, C, H, W) or (C, H, W); padding is -inf."""
    return _max_pool(2, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _max_pool(nd: int, x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool,
              return_indices: bool) -> Any:
    """The pooled values, or (values, int64 indices) with `return_indices` (Tensor.max_pool2d_with_indices)."""
    _pool_check(x, nd, f"max_pool{nd}d")
    if return_indices:
        return x.max_pool2d_with_indices(_sizes(kernel_size, nd), _stride(stride, nd), _sizes(padding, nd),
                                         _sizes(dilation, nd), ceil_mode)
    return x.max_pool2d(_sizes(kernel_size, nd), _stride(stride, nd), _sizes(padding, nd), _sizes(dilation, nd),
                        ceil_mode)


def avg_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """torch's F.avg_pool1d over (N, C, L) or (C, L)."""
    _pool_check(x, 1, "avg_pool1d")
    return x.avg_pool2d(_sizes(kernel_size, 1), _stride(stride, 1), _sizes(padding, 1), ceil_mode, count_include_pad)


def avg_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """torch's F.avg_pool2d over (N, C, H, W) or (C, H, W)."""
    _pool_check(x, 2, "avg_pool2d")
    return x.avg_pool2d(_sizes(kernel_size, 2), _stride(stride, 2), _sizes(padding, 2), ceil_mode, count_include_pad,
                        divisor_override)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """torch's F.scaled_dot_product_attention (boolean masks: True = attend; float masks are added)."""
    return query.scaled_dot_product_attention(key, value, attn_mask, dropout_p, is_causal, scale)


# ---- normalisations (statistics over the given axes; affine parameters broadcast by the caller's shape)
def normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    """(x - mean) / sqrt(biased var + eps) over `axes`."""
    y = x - x.mean(axes, keepdim=True)
    return y * ((y * y).mean(axes, keepdim=True) + eps).rsqrt()


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """torch's F.group_norm over (N, C, *): channels split into `num_groups` groups, each normalised over its
    channels and the spatial axes; then a per-channel scale and shift."""
    if x.ndim < 2 or x.shape[1] % num_groups:
        raise ShapeError(f"group_norm of {x.shape}: needs (N, C, ...) with C divisible by {num_groups} groups")
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, -1)
    y = normalize(g, (2,), eps).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    return y + bias.reshape(shape) if bias is not None else y


def rms_norm(x: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """torch's F.rms_norm: x / sqrt(mean(x^2) + eps) over the last len(normalized_shape) axes, times weight;
    eps None is the float32 machine epsilon (torch.finfo(float32).eps)."""
    axes = tuple(range(-len(normalized_shape), 0))
    if tuple(x.shape[x.ndim - len(normalized_shape):]) != tuple(normalized_shape):
        raise ShapeError(f"rms_norm over {tuple(normalized_shape)} of a tensor of shape {x.shape}")
    y = x * ((x * x).mean(axes, keepdim=True) + (_F32_EPS if eps is None else eps)).rsqrt()
    return y * weight if weight is not None else y


_F32_EPS = 2.0 ** -23


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """torch's F.dropout: zero each element with probability p (Tensor.rand draws) and scale the rest by
    1/(1-p); identity when not training. (nn.Dropout draws its masks from a device-side counter instead, so
    a JIT replay draws new ones.)"""
    if not 0 <= p <= 1:
        raise ArgumentError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0
    keep = Tensor.rand(*x.shape, device=x.device) >= p
    return keep.where(x / (1 - p), 0.0)


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
