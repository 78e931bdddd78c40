"""Converters of ONNX's reductions (Reduce*, ArgMax/ArgMin) and of Softmax/LogSoftmax, whose axis means two
different things before and from opset 13 (docs/onnx.md, "Opsets")."""
from __future__ import annotations

from collections.abc import Callable

from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.onnx.context import Ctx, Node, Value, tensor_op

Inputs = list[Value | None]


def reduce_axes(ctx: Ctx, node: Node, x: Inputs, axes_input_from: int) -> tuple[int, ...] | None:
    """The axes a Reduce* node reduces: an attribute before `axes_input_from` (13 for ReduceSum, 18 for the
    others), the optional second input from then on. None: the node does nothing (noop_with_empty_axes)."""
    if node.opset < axes_input_from:
        axes = node.ints("axes")
    else:
        axes = ctx.host_ints(x[1]) if len(x) > 1 and x[1] is not None else None
    t = x[0]
    assert t is not None
    if not axes:
        return None if node.attr("noop_with_empty_axes", 0) and node.opset >= axes_input_from \
            else tuple(range(t.ndim))
    return tuple(a % t.ndim if t.ndim else 0 for a in axes)


def reduction(fn: Callable[[Tensor, tuple[int, ...], bool], Tensor],
              axes_input_from: int = 18) -> Callable[[Ctx, Node, Inputs], Value]:
    def convert(ctx: Ctx, node: Node, x: Inputs) -> Value:
        t = ctx.tensor(x[0])  # type: ignore[arg-type]
        axes = reduce_axes(ctx, node, x, axes_input_from)
        if axes is None:
            return t
        keep = bool(node.attr("keepdims", 1))
        if t.ndim == 0:
            return fn(t.reshape(1), (0,), False)
        return fn(t, axes, keep)
    return convert


def _same(t: Tensor, r: Tensor) -> Tensor:
    """ONNX's reductions keep the input's type (an int32 sum stays int32)."""
    return r if r.dtype == t.dtype else r.cast(t.dtype)


def r_sum(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    return _same(t, t.sum(axis=ax, keepdim=k))


def r_mean(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    return _same(t, t.mean(axis=ax, keepdim=k))


def _empty(t: Tensor, ax: tuple[int, ...], k: bool, largest: bool) -> Tensor | None:
    """The max (min) over an empty axis: the dtype's lowest (highest) value, numpy's identity as ONNX
    defines it; None when no reduced axis is empty."""
    if all(t.shape[a] for a in ax):
        return None
    shape = [1 if i in ax else s for i, s in enumerate(t.shape) if k or i not in ax]
    fill = (float("-inf") if largest else float("inf")) if dtypes.is_float(t.dtype) else \
        (dtypes.min(t.dtype) if largest else dtypes.max(t.dtype))
    return Tensor.full(tuple(shape), fill, dtype=t.dtype, device=t.device)


def r_max(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    if (e := _empty(t, ax, k, True)) is not None:
        return e
    if t.dtype == dtypes.bool:
        return t.any(axis=ax, keepdim=k) if hasattr(t, "any") else t.max(axis=ax, keepdim=k)
    return t.max(axis=ax, keepdim=k)


def r_min(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    if (e := _empty(t, ax, k, False)) is not None:
        return e
    if t.dtype == dtypes.bool:
        return t.all(axis=ax, keepdim=k)
    return t.min(axis=ax, keepdim=k)


def r_prod(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    return _same(t, t.prod(axis=ax, keepdim=k))


def r_l1(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    return _same(t, t.abs().sum(axis=ax, keepdim=k))


def r_l2(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    f = t if dtypes.is_float(t.dtype) else t.cast(dtypes.float32)
    return _same(t, (f * f).sum(axis=ax, keepdim=k).sqrt())


def r_sum_square(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    return _same(t, (t * t).sum(axis=ax, keepdim=k))


def r_log_sum(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    return t.sum(axis=ax, keepdim=k).log()


def r_log_sum_exp(t: Tensor, ax: tuple[int, ...], k: bool) -> Tensor:
    if not dtypes.is_float(t.dtype):  # numpy's reference computes in float64 and casts back
        return tensor_op(t.cast(dtypes.float64), "logsumexp")(ax, keepdim=k).cast(t.dtype)
    return tensor_op(t, "logsumexp")(ax, keepdim=k)


def arg_reduce(largest: bool) -> Callable[[Ctx, Node, Inputs], Value]:
    """ArgMax/ArgMin, int64 indices; select_last_index picks the last of tied extremes (by flipping)."""
    def convert(ctx: Ctx, node: Node, x: Inputs) -> Value:
        t = ctx.tensor(x[0])  # type: ignore[arg-type]
        axis = int(node.attr("axis", 0)) % max(t.ndim, 1)
        keep, last = bool(node.attr("keepdims", 1)), bool(node.attr("select_last_index", 0))
        src = t.flip(axis) if last else t
        idx = (src.argmax if largest else src.argmin)(axis=axis, keepdim=keep).cast(dtypes.int64)
        return (t.shape[axis] - 1 - idx) if last else idx
    return convert


def softmax_like(log: bool) -> Callable[[Ctx, Node, Inputs], Value]:
    """Softmax/LogSoftmax. From opset 13 over one axis (default -1); before, the input is flattened to 2-d at
    `axis` (default 1) and normalized over everything from `axis` on, as one row."""
    def convert(ctx: Ctx, node: Node, x: Inputs) -> Value:
        t = ctx.tensor(x[0])  # type: ignore[arg-type]
        if node.opset >= 13:
            axis = int(node.attr("axis", -1))
            return t.log_softmax(axis) if log else t.softmax(axis)
        axis = int(node.attr("axis", 1)) % max(t.ndim, 1)
        rows = 1
        for s in t.shape[:axis]:
            rows *= s
        flat = t.reshape(rows, -1)
        out = flat.log_softmax(1) if log else flat.softmax(1)
        return out.reshape(t.shape)
    return convert


def hardmax(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(node.attr("axis", -1)) % t.ndim
    idx = t.argmax(axis=axis, keepdim=True)
    pos = Tensor.arange(t.shape[axis], device=ctx.device).reshape(*[t.shape[axis] if i == axis else 1
                                                                     for i in range(t.ndim)])
    return (pos == idx).cast(t.dtype)
