"""Converters of ONNX's elementwise operators: one output element from the input elements at the same
(broadcast) index. Each is a Tensor method or a short composition of them (docs/onnx.md, "Operators")."""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tolk_core.errors import UnsupportedError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.onnx import narrow
from tolk_core.onnx.context import Ctx, Node, Value, tensor_op
from tolk_core.onnx.narrow import NarrowTensor

Inputs = list[Value | None]


def method(name: str) -> Callable[[Ctx, Node, Inputs], Value]:
    """A one-input converter calling Tensor.`name` with no arguments."""
    def convert(ctx: Ctx, node: Node, x: Inputs) -> Value:
        assert x[0] is not None
        return tensor_op(ctx.tensor(x[0]), name)()
    convert.__name__ = f"convert_{name}"
    return convert


def binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Ctx, Node, Inputs], Value]:
    """A two-input converter with numpy broadcasting."""
    def convert(ctx: Ctx, node: Node, x: Inputs) -> Value:
        assert x[0] is not None and x[1] is not None
        return fn(ctx.tensor(x[0]), ctx.tensor(x[1]))
    return convert


def variadic(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Ctx, Node, Inputs], Value]:
    """Max, Min, Sum: `fn` folded over every input, broadcasting as it goes."""
    def convert(ctx: Ctx, node: Node, x: Inputs) -> Value:
        out = ctx.tensor(x[0])  # type: ignore[arg-type]
        for v in x[1:]:
            out = fn(out, ctx.tensor(v))  # type: ignore[arg-type]
        return out
    return convert


def mean(ctx: Ctx, node: Node, x: Inputs) -> Value:
    total = variadic(lambda a, b: a + b)(ctx, node, x)
    return ctx.tensor(total) / len(x)


def div(a: Tensor, b: Tensor) -> Tensor:
    """ONNX Div: true division for floats; integers truncate toward zero (C's rule, as ONNX's reference)."""
    if not dtypes.is_int(a.dtype):
        return a / b
    q = a // b
    # floor and truncation differ where the signs differ and the division is inexact
    fix = ((a % b) != 0).logical_and((a < 0).logical_xor(b < 0))
    return fix.where(q + 1, q)


def mod(ctx: Ctx, node: Node, x: Inputs) -> Value:
    a, b = ctx.tensor(x[0]), ctx.tensor(x[1])  # type: ignore[arg-type]
    if node.attr("fmod", 0):
        return tensor_op(a, "fmod")(b)
    return a % b


def power(a: Tensor, b: Tensor) -> Tensor:
    """ONNX Pow: the result takes the base's type (the exponent may be of another type)."""
    if b.dtype != a.dtype:
        b = b.cast(a.dtype) if dtypes.is_float(a.dtype) or not dtypes.is_float(b.dtype) else b
    out = a.pow(b)
    return out if out.dtype == a.dtype else out.cast(a.dtype)


def bitshift(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """BitShift. A shift count outside [0, bits) (C leaves it undefined; ONNX's reference defines it) gives 0,
    except that a negative signed value shifted right that way gives -1 (its sign fills every bit)."""
    a, b = ctx.tensor(x[0]), ctx.tensor(x[1])  # type: ignore[arg-type]
    bits = 8 * a.dtype.itemsize
    valid = (b >= 0).logical_and(b < bits)
    safe = valid.where(b, 0)
    if node.attr("direction") == "LEFT":
        return valid.where(a << safe, 0)
    if dtypes.is_unsigned(a.dtype):
        return valid.where(a >> safe, 0)
    return valid.where(a >> safe, (a < 0).where(-1, 0).cast(a.dtype))


def clip(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Clip: bounds as attributes before opset 11, as optional inputs from 11."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo = ctx.tensor(x[1]) if len(x) > 1 and x[1] is not None else None
        hi = ctx.tensor(x[2]) if len(x) > 2 and x[2] is not None else None
    if lo is not None:
        t = t.maximum(lo)
    if hi is not None:
        t = t.minimum(hi)
    return t


def _cast_to(ctx: Ctx, v: Value | NarrowTensor, to: np.dtype, saturate: bool) -> Value | NarrowTensor:
    """`v` converted to numpy dtype `to`; the narrow types (float8, float4, int4, int2) go through their
    byte codes (narrow.py)."""
    src = narrow.decode(v) if isinstance(v, NarrowTensor) else ctx.tensor(v)
    if narrow.narrow_kind(to) is not None:
        return narrow.encode(src, to, saturate)
    dt = dtypes.from_np(to)
    if dt == dtypes.bool:  # a float NaN is true in numpy's cast; compare instead of truncating
        return src != 0
    return src.cast(dt)


def cast(ctx: Ctx, node: Node, x: Inputs) -> Value:
    from onnx import helper
    to = helper.tensor_dtype_to_np_dtype(int(node.attr("to")))
    return _cast_to(ctx, x[0], to, bool(node.attr("saturate", 1)))  # type: ignore[arg-type, return-value]


def cast_like(ctx: Ctx, node: Node, x: Inputs) -> Value:
    like = x[1]
    assert like is not None
    to = like.dtype if isinstance(like, NarrowTensor) else dtypes.to_np(ctx.tensor(like).dtype)
    return _cast_to(ctx, x[0], to, bool(node.attr("saturate", 1)))  # type: ignore[arg-type, return-value]


def isinf(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if pos and neg:
        return tensor_op(t, "isinf")()
    return t == (math.inf if pos else -math.inf) if pos or neg else t != t.abs() + math.inf


def gelu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return ctx.tensor(x[0]).gelu(approximate=str(node.attr("approximate", "none")))  # type: ignore[arg-type]


def elu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return tensor_op(F, "elu")(ctx.tensor(x[0]), alpha=float(node.attr("alpha", 1.0)))  # type: ignore[arg-type]


def selu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    alpha, gamma = node.attr("alpha"), node.attr("gamma")
    if alpha is None and gamma is None:
        return tensor_op(F, "selu")(t)
    a = 1.67326319217681884765625 if alpha is None else float(alpha)
    g = 1.05070102214813232421875 if gamma is None else float(gamma)
    return (t > 0).where(t, (t.exp() - 1) * a) * g


def celu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return tensor_op(F, "celu")(ctx.tensor(x[0]), alpha=float(node.attr("alpha", 1.0)))  # type: ignore[arg-type]


def leaky_relu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return tensor_op(F, "leaky_relu")(ctx.tensor(x[0]), negative_slope=float(node.attr("alpha", 0.01)))  # type: ignore[arg-type]


def hard_sigmoid(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """ONNX's HardSigmoid takes alpha and beta (torch's is alpha=1/6, beta=1/2): max(0, min(1, a*x + b))."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    return (t * float(node.attr("alpha", 0.2)) + float(node.attr("beta", 0.5))).clip(0.0, 1.0)


def softplus(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return tensor_op(F, "softplus")(ctx.tensor(x[0]))  # type: ignore[arg-type]


def prelu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """PRelu. A 1-d slope of the channel count that does not broadcast numpy's way is per channel (axis 1):
    the form before opset 7, which exporters still write."""
    t, w = ctx.tensor(x[0]), ctx.tensor(x[1])  # type: ignore[arg-type]
    if w.ndim == 1 and t.ndim > 2 and w.shape[0] == t.shape[1] and w.shape[0] not in (1, t.shape[-1]):
        w = w.reshape(-1, *([1] * (t.ndim - 2)))
    return (t < 0).where(t * w, t)


def thresholded_relu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    return (t > float(node.attr("alpha", 1.0))).where(t, 0.0)


def where(ctx: Ctx, node: Node, x: Inputs) -> Value:
    c, a, b = (ctx.tensor(v) for v in x)  # type: ignore[arg-type]
    return c.where(a, b)


def logical(name: str) -> Callable[[Ctx, Node, Inputs], Value]:
    return binary(lambda a, b: getattr(a, name)(b))


def not_(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return ctx.tensor(x[0]).logical_not()  # type: ignore[arg-type]


def identity(ctx: Ctx, node: Node, x: Inputs) -> list[Value | None]:
    return [x[0]]  # in a list: a sequence passes through as one output


def dropout(ctx: Ctx, node: Node, x: Inputs) -> list[Value | None]:
    """Dropout at inference (ONNX runs it as Identity unless training_mode is true); the optional mask output
    is all true."""
    training = len(x) > 2 and x[2] is not None and bool(ctx.host(x[2]))
    ratio = float(ctx.host(x[1])) if len(x) > 1 and x[1] is not None else float(node.attr("ratio", 0.5))
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    if training and ratio > 0:
        raise UnsupportedError("Dropout with training_mode=True is not supported: Tolk's ONNX import runs "
                               "inference; export the model for inference (training_mode false)")
    mask = Tensor.ones(*t.shape, dtype=dtypes.bool, device=ctx.device) if len(node.outputs) > 1 else None
    return [t, mask]


def shrink(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Shrink: x - bias above lambd, x + bias below -lambd, 0 between (in the input's dtype)."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    lambd, bias = float(node.attr("lambd", 0.5)), float(node.attr("bias", 0.0))
    zero = t * 0
    return (t < -lambd).where(t + bias, (t > lambd).where(t - bias, zero)).cast(t.dtype)


def swish(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    return t * (t * float(node.attr("alpha", 1.0))).sigmoid()
