"""Converters of ONNX's indexing operators: Gather, GatherElements, GatherND, ScatterElements, ScatterND,
OneHot, TopK, CumSum and Einsum, on the Tensor's indexing methods. ONNX allows negative indices (counted
from the end) where Tensor methods take them in range, so indices are wrapped first."""
from __future__ import annotations

import numpy as np

from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.onnx.context import Ctx, Node, Value, tensor_op

Inputs = list[Value | None]


def _wrap(idx: Tensor, size: int) -> Tensor:
    """Negative indices counted from the end, as ONNX allows."""
    return (idx < 0).where(idx + size, idx)


def _index(ctx: Ctx, v: Value, size: int) -> Tensor | np.ndarray:
    """An index operand wrapped: on the host when it is known there (no kernel for a constant index)."""
    if isinstance(v, np.ndarray):
        a = v.astype(np.int64)
        return np.where(a < 0, a + size, a)
    return _wrap(ctx.tensor(v).cast(dtypes.int64), size)


def gather(ctx: Ctx, node: Node, x: Inputs) -> Value:
    data = x[0]
    assert data is not None and x[1] is not None
    axis = int(node.attr("axis", 0)) % data.ndim
    known = ctx.constant_copy(x[1])
    raw = known if known is not None else x[1]
    idx = _index(ctx, raw, data.shape[axis])
    host = ctx.constant_copy(data)
    if host is not None and isinstance(idx, np.ndarray) and host.size <= 4096:  # a shape computation
        return np.asarray(np.take(host, idx, axis=axis))
    t = ctx.tensor(data)
    if isinstance(idx, np.ndarray) and idx.ndim == 0:
        return t[(slice(None),) * axis + (int(idx),)]
    return t[(slice(None),) * axis + (ctx.tensor(idx),)]


def gather_elements(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(node.attr("axis", 0)) % t.ndim
    return tensor_op(t, "gather")(axis, ctx.tensor(_index(ctx, x[1], t.shape[axis])))  # type: ignore[arg-type]


def _nd_index(ctx: Ctx, t: Tensor, idx: Value, batch_dims: int) -> tuple[Tensor, tuple]:
    """GatherND/ScatterND's index tuple: the batch axes by broadcast aranges, then one index tensor per
    indexed axis (the last axis of `idx` holds the coordinates)."""
    it = ctx.tensor(idx).cast(dtypes.int64)
    depth = it.shape[-1]
    parts: list[Tensor] = []
    for b in range(batch_dims):
        shape = [1] * (it.ndim - 1)
        shape[b] = it.shape[b]
        parts.append(Tensor.arange(it.shape[b], dtype=dtypes.int64, device=ctx.device).reshape(*shape))
    for d in range(depth):
        parts.append(_wrap(it[..., d], t.shape[batch_dims + d]))
    return it, tuple(parts)


def gather_nd(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    _, index = _nd_index(ctx, t, x[1], int(node.attr("batch_dims", 0)))  # type: ignore[arg-type]
    return t[index]


def scatter_nd(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """ScatterND on a copy of the data by index_put_ (reduction 'add' accumulates; 'none' overwrites)."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    out = (t + 0).contiguous().realize() if t.dtype != dtypes.bool else t.contiguous().realize()
    _, index = _nd_index(ctx, t, x[1], 0)  # type: ignore[arg-type]
    red = node.attr("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else red
    if red not in ("none", "add"):
        return _scatter_nd_reduce(ctx, out, index, ctx.tensor(x[2]), red)  # type: ignore[arg-type]
    return out.index_put_(index, ctx.tensor(x[2]), accumulate=red == "add")  # type: ignore[arg-type]


def _scatter_nd_reduce(ctx: Ctx, out: Tensor, index: tuple, upd: Tensor, red: str) -> Tensor:
    """ScatterND with mul/max/min: one update row at a time, so a row indexed twice combines both updates
    (index_put_ accumulates only sums)."""
    lead = index[-1].shape
    rows = int(np.prod(lead)) if lead else 1
    flat = [p.expand(*lead).reshape(rows) for p in index]
    upd = upd.reshape(rows, *upd.shape[len(lead):])
    for r in range(rows):
        at = tuple(p[r:r + 1] for p in flat)
        cur, new = out[at], upd[r:r + 1]
        out.index_put_(at, cur * new if red == "mul" else cur.maximum(new) if red == "max" else cur.minimum(new))
    return out


def scatter_elements(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(node.attr("axis", 0)) % t.ndim
    idx = ctx.tensor(_index(ctx, x[1], t.shape[axis]))  # type: ignore[arg-type]
    src = ctx.tensor(x[2])  # type: ignore[arg-type]
    red = node.attr("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else red
    if red == "none":
        return tensor_op(t, "scatter")(axis, idx, src)
    return tensor_op(t, "scatter_reduce")(axis, idx, src, reduce={"add": "sum", "mul": "prod", "max": "amax",
                                                    "min": "amin"}[red], include_self=True)


def one_hot(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """OneHot(indices, depth, values=[off, on]) along `axis` (default -1, the new last axis)."""
    idx = ctx.tensor(x[0])  # type: ignore[arg-type]
    depth = int(ctx.host(x[1]).reshape(-1)[0])  # type: ignore[arg-type]
    vals = ctx.tensor(x[2])  # type: ignore[arg-type]
    axis = int(node.attr("axis", -1))
    axis = axis % (idx.ndim + 1)
    i = idx.cast(dtypes.int64)
    i = (i < 0).where(i + depth, i).unsqueeze(axis)
    shape = [1] * (idx.ndim + 1)
    shape[axis] = depth
    pos = Tensor.arange(depth, dtype=dtypes.int64, device=ctx.device).reshape(*shape)
    return (pos == i).where(vals[1], vals[0])


def topk(ctx: Ctx, node: Node, x: Inputs) -> list[Value | None]:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    k = int(ctx.host(x[1]).reshape(-1)[0]) if node.opset >= 10 else int(node.attr("k"))  # type: ignore[arg-type]
    axis = int(node.attr("axis", -1))
    values, indices = tensor_op(t, "topk")(k, dim=axis, largest=bool(node.attr("largest", 1)),
                             sorted=bool(node.attr("sorted", 1)))
    return [values, indices.cast(dtypes.int64)]


def cumsum(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """CumSum with exclusive (shift by one, starting from 0) and reverse (from the end) along one axis."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(ctx.host(x[1]).reshape(-1)[0]) % t.ndim  # type: ignore[arg-type]
    rev, excl = bool(node.attr("reverse", 0)), bool(node.attr("exclusive", 0))
    src = t.flip(axis) if rev else t
    out = tensor_op(src, "cumsum")(axis)
    if out.dtype != t.dtype:
        out = out.cast(t.dtype)
    if excl:  # out[i] = sum of the elements before i: shift right by one, 0 first
        pads = [(0, 0)] * t.ndim
        pads[axis] = (1, -1)
        out = out.pad(pads)
    return out.flip(axis) if rev else out


def einsum(ctx: Ctx, node: Node, x: Inputs) -> Value:
    eq = node.attr("equation")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    return tensor_op(Tensor, "einsum")(eq.replace(" ", ""), *[ctx.tensor(v) for v in x])  # type: ignore[arg-type]


def reverse_sequence(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """ReverseSequence: for each batch entry b, the first sequence_lens[b] steps along time_axis reversed, the
    rest kept, as a gather along the time axis."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    lens = ctx.tensor(x[1]).cast(dtypes.int64)  # type: ignore[arg-type]
    bax, tax = int(node.attr("batch_axis", 1)), int(node.attr("time_axis", 0))
    shape = [1] * t.ndim
    shape[tax] = t.shape[tax]
    step = Tensor.arange(t.shape[tax], dtype=dtypes.int64, device=ctx.device).reshape(*shape)
    lshape = [1] * t.ndim
    lshape[bax] = t.shape[bax]
    n = lens.reshape(*lshape)
    idx = (step < n).where(n - 1 - step, step).expand(*t.shape)
    return tensor_op(t, "gather")(tax, idx)


def nonzero(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """NonZero: the indices of the nonzero elements, (rank, count) int64. The count depends on the data, so
    the input is read to the host (one device read; not capturable by jit)."""
    return np.asarray(np.nonzero(ctx.host(x[0])), dtype=np.int64)  # type: ignore[arg-type]
