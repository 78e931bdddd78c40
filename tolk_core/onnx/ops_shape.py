"""Converters of ONNX's movement and shape operators: Reshape, Transpose, Slice, Concat, Split, Pad, Tile,
Squeeze/Unsqueeze, Expand, Flatten, DepthToSpace/SpaceToDepth, Trilu and the shape producers (Shape, Size,
Constant, ConstantOfShape, Range). Sizes, axes and pads are read on the host (`Ctx.host`), so every shape
stays static (docs/onnx.md, "Shapes")."""
from __future__ import annotations

import numpy as np

from tolk_core.ir.dtype import dtypes
from tolk_core.onnx.context import Ctx, Node, Value, tensor_op

Inputs = list[Value | None]


def _text(v: object, default: str) -> str:
    return default if v is None else (v.decode() if isinstance(v, bytes) else str(v))


def _optional(x: Inputs, i: int) -> Value | None:
    return x[i] if len(x) > i else None


def shape(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Shape (start/end from opset 15): a host int64 array, so what is computed from it stays on the host."""
    dims = list(x[0].shape)  # type: ignore[union-attr]
    start, end = int(node.attr("start", 0)), node.attr("end")
    return np.array(dims[start:None if end is None else int(end)], dtype=np.int64)


def size(ctx: Ctx, node: Node, x: Inputs) -> Value:
    return np.array(int(np.prod(x[0].shape)), dtype=np.int64)  # type: ignore[union-attr]


def constant(ctx: Ctx, node: Node, x: Inputs) -> Value:
    for key in ("value", "value_float", "value_int", "value_floats", "value_ints"):
        if key in node.attrs:
            v = node.attrs[key]
            if key == "value":
                return np.asarray(v)
            return np.asarray(v, dtype=np.float32 if "float" in key else np.int64)
    raise NotImplementedError(f"Constant node {node.name!r}: only tensor and numeric values are supported")


def constant_of_shape(ctx: Ctx, node: Node, x: Inputs) -> Value:
    fill = node.attr("value")
    fill = np.zeros(1, np.float32) if fill is None else np.asarray(fill).reshape(-1)
    dims = ctx.host_ints(x[0]) if x[0] is not None else []
    return np.full(dims, fill[0], dtype=fill.dtype)


def range_(ctx: Ctx, node: Node, x: Inputs) -> Value:
    start, limit, delta = (ctx.host(v).reshape(-1)[0] for v in x)  # type: ignore[arg-type]
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return (start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)


def reshape(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    dims = node.ints("shape") if node.opset < 5 else ctx.host_ints(x[1])  # type: ignore[arg-type]
    assert dims is not None
    if not node.attr("allowzero", 0):  # a 0 copies the input's size at that position
        dims = [t.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return t.reshape(*dims) if dims else t.reshape(())


def flatten(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(node.attr("axis", 1))
    axis = axis + t.ndim if axis < 0 else axis
    lead = int(np.prod(t.shape[:axis]))
    return t.reshape(lead, int(np.prod(t.shape[axis:])))


def transpose(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    perm = node.ints("perm") or list(range(t.ndim))[::-1]
    return t.permute(*perm)


def _axes_arg(ctx: Ctx, node: Node, x: Inputs, from_opset: int) -> list[int] | None:
    if node.opset < from_opset:
        return node.ints("axes")
    v = _optional(x, 1)
    return ctx.host_ints(v) if v is not None else None


def squeeze(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axes = _axes_arg(ctx, node, x, 13)
    if axes is None:
        return t.reshape(*[s for s in t.shape if s != 1])
    keep = {a % t.ndim for a in axes}
    return t.reshape(*[s for i, s in enumerate(t.shape) if i not in keep])


def unsqueeze(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axes = _axes_arg(ctx, node, x, 13) or []
    rank = t.ndim + len(axes)
    new = sorted(a % rank for a in axes)
    dims, it = [], iter(t.shape)
    for i in range(rank):
        dims.append(1 if i in new else next(it))
    return t.reshape(*dims)


def concat(ctx: Ctx, node: Node, x: Inputs) -> Value:
    parts = [ctx.tensor(v) for v in x if v is not None]
    axis = int(node.attr("axis", 1 if node.opset < 4 else 0))  # optional, default 1, before opset 4
    parts = [p for p in parts if p.shape[axis] != 0] or parts[:1]
    return parts[0].cat(*parts[1:], dim=axis) if len(parts) > 1 else parts[0]


def split(ctx: Ctx, node: Node, x: Inputs) -> list[Value | None]:
    """Split: sizes as an attribute before opset 13, an optional input from 13; num_outputs (18) or the output
    count gives equal parts, the last smaller when the axis does not divide."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    axis = int(node.attr("axis", 0)) % t.ndim
    sizes = node.ints("split") if node.opset < 13 else (ctx.host_ints(x[1]) if x[1:2] and x[1] is not None
                                                         else None)
    if not sizes:
        n = int(node.attr("num_outputs", len(node.outputs)))
        step = -(-t.shape[axis] // n)
        sizes = [min(step, t.shape[axis] - i * step) for i in range(n)]
    return list(t.split(sizes, dim=axis))


def _slice_bounds(dim: int, start: int, end: int, step: int) -> slice:
    """ONNX's clamping of one axis' slice (start, end) into Python's slice semantics."""
    if step > 0:
        s = min(max(start + dim if start < 0 else start, 0), dim)
        e = min(max(end + dim if end < 0 else end, 0), dim)
        return slice(s, e, step)
    s = min(max(start + dim if start < 0 else start, -1), dim - 1)
    e = min(max(end + dim if end < 0 else end, -1), dim - 1)
    return slice(s, None if e < 0 else e, step) if s >= 0 else slice(0, 0, 1)


def slice_(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Slice: starts/ends/axes attributes before opset 10, inputs (with steps) from 10."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    if node.opset < 10:
        starts, ends, axes, steps = node.ints("starts"), node.ints("ends"), node.ints("axes"), None
    else:
        starts, ends = ctx.host_ints(x[1]), ctx.host_ints(x[2])  # type: ignore[arg-type]
        axes = ctx.host_ints(x[3]) if _optional(x, 3) is not None else None  # type: ignore[arg-type]
        steps = ctx.host_ints(x[4]) if _optional(x, 4) is not None else None  # type: ignore[arg-type]
    assert starts is not None and ends is not None
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * t.ndim
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        a %= t.ndim
        index[a] = _slice_bounds(t.shape[a], s, e, st)
    out = t[tuple(index)]
    return out


def expand(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Expand broadcasts both ways (numpy's rule between the input's shape and the given one)."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    dims = ctx.host_ints(x[1])  # type: ignore[arg-type]
    out = np.broadcast_shapes(tuple(t.shape), tuple(dims))
    return t.reshape(*([1] * (len(out) - t.ndim) + list(t.shape))).expand(*out)


def tile(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    return tensor_op(t, "repeat")(*ctx.host_ints(x[1]))  # type: ignore[arg-type]


def pad(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Pad: pads and value as attributes before opset 11, inputs from 11 (axes from 18); every mode."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    mode = _text(node.attr("mode"), "constant")
    if node.opset < 11:
        pads, value = node.ints("pads") or node.ints("paddings") or [], float(node.attr("value", 0.0))
        axes = list(range(t.ndim))
    else:
        pads = ctx.host_ints(x[1])  # type: ignore[arg-type]
        cv = _optional(x, 2)
        value = ctx.host(cv).reshape(-1)[0].item() if cv is not None and ctx.host(cv).size else 0
        axes = ctx.host_ints(x[3]) if _optional(x, 3) is not None else list(range(t.ndim))  # type: ignore[arg-type]
    n = len(axes)
    per_axis = [(0, 0)] * t.ndim
    for i, a in enumerate(axes):
        per_axis[a % t.ndim] = (pads[i], pads[i + n])
    mode = {"edge": "replicate", "wrap": "circular"}.get(mode, mode)
    if mode == "constant":
        return t.pad(per_axis, value=value)
    if mode == "replicate" and not t.ndim:
        return t
    return tensor_op(t, "pad")(per_axis, mode=mode)


def depth_to_space(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """DepthToSpace: DCR (depth, column, row: the default) or CRD (column, row, depth) channel order."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    b = int(node.attr("blocksize"))
    n, c, h, w = t.shape
    if _text(node.attr("mode"), "DCR") == "DCR":
        u = t.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        u = t.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return u.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    b = int(node.attr("blocksize"))
    n, c, h, w = t.shape
    crd = _text(node.attr("mode"), "DCR") == "CRD"  # CRD: channel-major blocks (DepthToSpace CRD's inverse)
    u = t.reshape(n, c, h // b, b, w // b, b).permute(*((0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)))
    return u.reshape(n, c * b * b, h // b, w // b)


def trilu(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    k = int(ctx.host(x[1]).reshape(-1)[0]) if _optional(x, 1) is not None else 0  # type: ignore[arg-type]
    return t.triu(k) if node.attr("upper", 1) else t.tril(k)


def eye_like(ctx: Ctx, node: Node, x: Inputs) -> Value:
    from tolk_core.onnx.context import onnx_dtype
    t = x[0]
    assert t is not None
    r, c = t.shape
    k = int(node.attr("k", 0))
    dt = onnx_dtype(int(node.attr("dtype"))) if node.attr("dtype") is not None else ctx.tensor(t).dtype
    return np.eye(r, c, k, dtype=dtypes.to_np(dt))
