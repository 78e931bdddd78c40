"""Converters of ONNX's network layers: Conv, ConvTranspose, the pools, the normalizations, Gemm, MatMul and
LRN. ONNX pads may differ before and after an axis (and auto_pad computes them from the input size), so the
converters pad explicitly with Tensor.pad and run the layer unpadded (docs/onnx.md, "Operators")."""
from __future__ import annotations

import math

from tolk_core.errors import UnsupportedError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.onnx.context import Ctx, Node, Value, tensor_op

Inputs = list[Value | None]


def _text(v: object, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def spatial_pads(node: Node, in_sizes: tuple[int, ...], kernel: list[int], strides: list[int],
                 dilations: list[int]) -> list[tuple[int, int]]:
    """(before, after) pads per spatial axis: `pads` as given, or what auto_pad SAME_UPPER/SAME_LOWER needs
    for an output of ceil(size / stride) (the odd pixel after for UPPER, before for LOWER); VALID pads
    nothing."""
    nd = len(kernel)
    mode = _text(node.attr("auto_pad"), "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for n, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=True):
            total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
            small = total // 2
            out.append((small, total - small) if mode == "SAME_UPPER" else (total - small, small))
        return out
    if mode == "VALID":
        return [(0, 0)] * nd
    pads = node.ints("pads") or [0] * (2 * nd)
    return [(pads[i], pads[i + nd]) for i in range(nd)]


def _pad_spatial(t: Tensor, pads: list[tuple[int, int]], value: float) -> Tensor:
    """`t` padded on its spatial axes, stored first: a convolution producing it would otherwise be computed inside
    the pad's gates, in scalar code (resnet50's 7x7 stem under its padded MaxPool: 88-91% of the model's time at
    0.1 GFLOP/s, docs/performance.md "Pretrained models")."""
    if not any(a or b for a, b in pads):
        return t
    return t.contiguous().pad([(0, 0)] * (t.ndim - len(pads)) + pads, value=value)


def conv(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t, w = ctx.tensor(x[0]), ctx.tensor(x[1])  # type: ignore[arg-type]
    nd = w.ndim - 2
    kernel = node.ints("kernel_shape") or list(w.shape[2:])
    strides, dil = node.ints("strides", [1] * nd), node.ints("dilations", [1] * nd)
    assert strides is not None and dil is not None
    pads = spatial_pads(node, tuple(t.shape[2:]), kernel, strides, dil)
    b = ctx.tensor(x[2]) if len(x) > 2 and x[2] is not None else None
    # the padding goes to conv2d, which reads through it in its plan (the CPU's loop bounds)
    flat = tuple(v for before, after in reversed(pads) for v in (before, after))
    return t.conv2d(w, b, groups=int(node.attr("group", 1)), stride=strides, dilation=dil, padding=flat)


def conv_transpose(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """ConvTranspose: pads from `pads`, or from `output_shape` / auto_pad (the total a requested output size
    needs, split as SAME_UPPER/LOWER say), through nn.functional.conv_transpose{1,2,3}d."""
    t, w = ctx.tensor(x[0]), ctx.tensor(x[1])  # type: ignore[arg-type]
    nd = w.ndim - 2
    kernel = node.ints("kernel_shape") or list(w.shape[2:])
    strides, dil = node.ints("strides", [1] * nd) or [1] * nd, node.ints("dilations", [1] * nd) or [1] * nd
    opad = node.ints("output_padding", [0] * nd) or [0] * nd
    groups = int(node.attr("group", 1))
    b = ctx.tensor(x[2]) if len(x) > 2 and x[2] is not None else None
    mode, out_shape = _text(node.attr("auto_pad"), "NOTSET"), node.ints("output_shape")
    if out_shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        ins = t.shape[2:]
        want = out_shape[-nd:] if out_shape is not None else [n * s for n, s in zip(ins, strides, strict=True)]
        pads = []
        for n, k, s, d, op, o in zip(ins, kernel, strides, dil, opad, want, strict=True):
            total = s * (n - 1) + op + (k - 1) * d + 1 - o
            small = total // 2
            pads.append((small, total - small) if mode == "SAME_UPPER" else (total - small, small))
    else:
        pads = spatial_pads(node, tuple(t.shape[2:]), kernel, strides, dil)
    fn = tensor_op(F, f"conv_transpose{nd}d")
    sym = all(a == c for a, c in pads)
    y = fn(t, w, b, stride=strides, padding=[a for a, _ in pads] if sym else 0, output_padding=opad,
           groups=groups, dilation=dil)
    if sym:
        return y
    # asymmetric pads crop the full output (a negative pad is a crop)
    return y.pad([(0, 0), (0, 0)] + [(-a, -c) for a, c in pads])


def _pool_geometry(node: Node, t: Tensor) -> tuple[list[int], list[int], list[int], list[tuple[int, int]],
                                                   list[int]]:
    """kernel, strides, dilations, pads and the extra right pad ceil_mode adds to each spatial axis (a last
    window that starts in the right padding is dropped: the rule ONNX's reference shares with torch)."""
    kernel = node.ints("kernel_shape")
    assert kernel is not None
    nd = len(kernel)
    strides = node.ints("strides", [1] * nd) or [1] * nd
    dil = node.ints("dilations", [1] * nd) or [1] * nd
    pads = spatial_pads(node, tuple(t.shape[2:]), kernel, strides, dil)
    extra = []
    for n, k, s, d, (pb, pa) in zip(t.shape[2:], kernel, strides, dil, pads, strict=True):
        span = n + pb + pa - (k - 1) * d - 1
        if not node.attr("ceil_mode", 0):
            extra.append(0)
            continue
        out = math.ceil(span / s) + 1
        if (out - 1) * s >= n + pb:
            out -= 1
        extra.append(max((out - 1) * s - span, 0))
    return kernel, strides, dil, pads, extra


def max_pool(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    if len(node.outputs) > 1 and node.outputs[1]:
        raise UnsupportedError("MaxPool's Indices output is not supported: pool values only")
    kernel, strides, dil, pads, extra = _pool_geometry(node, t)
    low = -math.inf if dtypes.is_float(t.dtype) else dtypes.min(t.dtype)
    padded = _pad_spatial(t, [(a, c + e) for (a, c), e in zip(pads, extra, strict=True)], low)
    return padded.max_pool2d(tuple(kernel), stride=tuple(strides), dilation=tuple(dil))


def avg_pool(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """AveragePool: window sums over the zero-padded input divided by the count of elements each window
    covers: the input's, plus the pads' when count_include_pad (never the ceil_mode extension)."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    kernel, strides, dil, pads, extra = _pool_geometry(node, t)
    full = [(a, c + e) for (a, c), e in zip(pads, extra, strict=True)]
    sums = _window_sums(_pad_spatial(t, full, 0.0), kernel, strides, dil)
    if not any(a or b for a, b in full):
        return sums / math.prod(kernel)
    nd = len(kernel)
    ones = Tensor.ones(*t.shape[2:], dtype=t.dtype, device=ctx.device)
    inner = _pad_spatial(ones, pads, 1.0 if node.attr("count_include_pad", 0) else 0.0)
    mask = _pad_spatial(inner, [(0, e) for e in extra], 0.0)
    counts = _window_sums(mask.reshape(1, 1, *mask.shape), kernel, strides, dil)
    return sums / counts.reshape(*counts.shape[-nd:])


def _window_sums(t: Tensor, kernel: list[int], strides: list[int], dil: list[int]) -> Tensor:
    """Sums over the (dilated) windows of the spatial axes of (N, C, *spatial): the average pool's sums, or,
    with dilations (which the pools do not take), a convolution of each channel with a kernel of ones."""
    if all(d == 1 for d in dil):
        return t.avg_pool2d(tuple(kernel), stride=tuple(strides), divisor_override=1)
    n, c = t.shape[:2]
    ones = Tensor.ones(1, 1, *kernel, dtype=t.dtype, device=t.device)
    out = t.reshape(n * c, 1, *t.shape[2:]).conv2d(ones, stride=strides, dilation=dil)
    return out.reshape(n, c, *out.shape[2:])


def global_pool(largest: bool):
    def convert(ctx: Ctx, node: Node, x: Inputs) -> Value:
        t = ctx.tensor(x[0])  # type: ignore[arg-type]
        axes = tuple(range(2, t.ndim))
        return t.max(axis=axes, keepdim=True) if largest else t.mean(axis=axes, keepdim=True)
    return convert


def _per_channel(v: Tensor, ndim: int) -> Tensor:
    return v.reshape(-1, *([1] * (ndim - 2)))


def batch_norm(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t, scale, bias, mean, var = (ctx.tensor(v) for v in x[:5])  # type: ignore[arg-type]
    if node.attr("training_mode", 0) or (len(node.outputs) > 1 and any(node.outputs[1:])):
        raise UnsupportedError("BatchNormalization with training_mode is not supported: export for inference")
    eps = float(node.attr("epsilon", 1e-5))
    inv = (var + eps).rsqrt() * scale
    return (t - _per_channel(mean, t.ndim)) * _per_channel(inv, t.ndim) + _per_channel(bias, t.ndim)


def instance_norm(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t, scale, bias = (ctx.tensor(v) for v in x[:3])  # type: ignore[arg-type]
    y = F.normalize(t, tuple(range(2, t.ndim)), float(node.attr("epsilon", 1e-5)))
    return y * _per_channel(scale, t.ndim) + _per_channel(bias, t.ndim)


def layer_norm(ctx: Ctx, node: Node, x: Inputs) -> list[Value | None]:
    """LayerNormalization over the axes from `axis` on; the optional Mean and InvStdDev outputs keep those
    axes as size 1. Computed in float32 (stash_type 1) for narrower floats."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(node.attr("axis", -1)) % t.ndim
    axes = tuple(range(axis, t.ndim))
    f = t.cast(dtypes.float32) if t.dtype in (dtypes.float16, dtypes.bfloat16) else t
    mean = f.mean(axis=axes, keepdim=True)
    d = f - mean
    inv = ((d * d).mean(axis=axes, keepdim=True) + float(node.attr("epsilon", 1e-5))).rsqrt()
    y = (d * inv).cast(t.dtype) * ctx.tensor(x[1])  # type: ignore[arg-type]
    if len(x) > 2 and x[2] is not None:
        y = y + ctx.tensor(x[2])
    return [y, mean, inv]


def group_norm(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """GroupNormalization: scale and bias per group before opset 21, per channel from 21."""
    t, scale, bias = (ctx.tensor(v) for v in x[:3])  # type: ignore[arg-type]
    g = int(node.attr("num_groups"))
    n, c = t.shape[:2]
    grouped = t.reshape(n, g, -1)
    y = F.normalize(grouped, (2,), float(node.attr("epsilon", 1e-5))).reshape(t.shape)
    if node.opset < 21:
        scale = scale.reshape(g, 1).expand(g, c // g).reshape(c)
        bias = bias.reshape(g, 1).expand(g, c // g).reshape(c)
    return y * _per_channel(scale, t.ndim) + _per_channel(bias, t.ndim)


def gemm(ctx: Ctx, node: Node, x: Inputs) -> Value:
    a, b = ctx.tensor(x[0]), ctx.tensor(x[1])  # type: ignore[arg-type]
    a = a.transpose(0, 1) if node.attr("transA", 0) else a
    b = b.transpose(0, 1) if node.attr("transB", 0) else b
    y = a.matmul(b)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = y * alpha if alpha != 1.0 else y
    if len(x) > 2 and x[2] is not None:
        c = ctx.tensor(x[2])
        y = y + (c * beta if beta != 1.0 else c)
    return y


def matmul(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return ctx.tensor(x[0]).matmul(ctx.tensor(x[1]))  # type: ignore[arg-type]


def lrn(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Local response normalization across channels: x / (bias + alpha/size * sum of squares over the
    window of `size` channels around each)^beta."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    sq = (t * t).pad([(0, 0), ((size - 1) // 2, size // 2)] + [(0, 0)] * (t.ndim - 2))
    c = t.shape[1]
    total = sq[:, 0:c]
    for i in range(1, size):
        total = total + sq[:, i:i + c]
    return t / (total * (alpha / size) + bias).pow(beta)


def rms_norm(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """RMSNormalization over the axes from `axis` on: x / sqrt(mean(x^2) + epsilon) * scale, computed in
    float32 for narrower floats (stash_type 1)."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(node.attr("axis", -1)) % t.ndim
    f = t.cast(dtypes.float32) if t.dtype in (dtypes.float16, dtypes.bfloat16) else t
    ms = (f * f).mean(axis=tuple(range(axis, t.ndim)), keepdim=True)
    y = (f * (ms + float(node.attr("epsilon", 1e-5))).rsqrt()).cast(t.dtype)
    return y * ctx.tensor(x[1])  # type: ignore[arg-type]


def lp_norm(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """LpNormalization: x divided by its L1 (p=1) or L2 (p=2, the default) norm along `axis`; a zero norm
    gives 0."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis, p = int(node.attr("axis", -1)), int(node.attr("p", 2))
    norm = t.abs().sum(axis=axis, keepdim=True) if p == 1 else (t * t).sum(axis=axis, keepdim=True).sqrt()
    return (norm == 0).where(0.0, t / norm).cast(t.dtype)


def mean_variance_norm(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """MeanVarianceNormalization over `axes` (default 0, 2, 3): (x - mean) / sqrt(variance + 1e-9), the
    epsilon of ONNX's function definition."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axes = tuple(a % t.ndim for a in (node.ints("axes") or [0, 2, 3]))
    d = t - t.mean(axis=axes, keepdim=True)
    return d / ((d * d).mean(axis=axes, keepdim=True) + 1e-9).sqrt()
