"""The converter of ONNX's Resize: output sizes from `scales` or `sizes` (with `axes` and
keep_aspect_ratio_policy from opset 18), then one host-computed weight matrix per resized axis
(tolk_core/nn/resample.py, shared with torch's interpolate)."""
from __future__ import annotations

import math

import numpy as np

from tolk_core.errors import UnsupportedError
from tolk_core.nn.resample import axis_weights, resample_axis
from tolk_core.onnx.context import Ctx, Node, Value

Inputs = list[Value | None]


def _text(v: object, default: str) -> str:
    return default if v is None else (v.decode() if isinstance(v, bytes) else str(v))


def _present(ctx: Ctx, x: Inputs, i: int) -> np.ndarray | None:
    """Input i as a host array, or None when omitted or empty (ONNX marks an unused input by an empty one)."""
    if len(x) <= i or x[i] is None:
        return None
    a = ctx.host(x[i])  # type: ignore[arg-type]
    return a if a.size else None


def output_geometry(ctx: Ctx, node: Node, x: Inputs, shape: tuple[int, ...]) -> tuple[list[int], list[float],
                                                                                       list[tuple[float, float]]]:
    """Per axis of the input: output size, the scale used by the coordinate transform, and the roi."""
    nd = len(shape)
    axes = [a % nd for a in (node.ints("axes") or range(nd))]
    if node.opset < 11:
        scales_in, sizes_in, roi_in = _present(ctx, x, 1), None, None
    else:
        roi_in, scales_in, sizes_in = _present(ctx, x, 1), _present(ctx, x, 2), _present(ctx, x, 3)
    outs, scales = list(shape), [1.0] * nd
    rois = [(0.0, 1.0)] * nd
    if roi_in is not None:
        bounds = [float(v) for v in roi_in.reshape(-1)]
        k = len(bounds) // 2
        for j, a in enumerate(axes if k == len(axes) else range(nd)):
            rois[a] = (bounds[j], bounds[j + k])
    crop = _text(node.attr("coordinate_transformation_mode"), "half_pixel") == "tf_crop_and_resize"
    if scales_in is not None:
        for a, s in zip(axes, [float(v) for v in scales_in.reshape(-1)], strict=True):
            span = (rois[a][1] - rois[a][0]) if crop else 1.0
            outs[a], scales[a] = math.floor(shape[a] * span * s + 1e-9), float(s)
        return outs, scales, rois
    if sizes_in is None:
        raise UnsupportedError(f"Resize node {node.name!r} has neither scales nor sizes")
    want = [int(v) for v in sizes_in.reshape(-1)]
    policy = _text(node.attr("keep_aspect_ratio_policy"), "stretch")
    ratios = [w / shape[a] for a, w in zip(axes, want, strict=True)]
    if policy == "stretch":
        for a, w, r in zip(axes, want, ratios, strict=True):
            outs[a], scales[a] = w, r
        return outs, scales, rois
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        outs[a], scales[a] = int(math.floor(shape[a] * common + 0.5)), common
    return outs, scales, rois


def resize(ctx: Ctx, node: Node, x: Inputs) -> Value:
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    mode = _text(node.attr("mode"), "nearest")
    coord = _text(node.attr("coordinate_transformation_mode"), "half_pixel" if node.opset >= 11 else "asymmetric")
    nearest = _text(node.attr("nearest_mode"), "round_prefer_floor" if node.opset >= 11 else "floor")
    outs, scales, rois = output_geometry(ctx, node, x, tuple(t.shape))
    fill = float(node.attr("extrapolation_value", 0.0))
    out = t
    for a, (n_in, n_out, s, roi) in enumerate(zip(t.shape, outs, scales, rois, strict=True)):
        if n_in == n_out and s == 1.0 and coord != "tf_crop_and_resize":
            continue
        w, outside = axis_weights(n_in, n_out, s, mode, coord, nearest, float(node.attr("cubic_coeff_a", -0.75)),
                                  bool(node.attr("exclude_outside", 0)), roi, length=n_in * s,
                                  antialias=bool(node.attr("antialias", 0)))
        out = resample_axis(out, a, w, outside, fill)
    return out


def upsample(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Upsample (deprecated from opset 10 for Resize): sizes floor(size * scale), asymmetric coordinates,
    nearest (floor) or linear; scales an attribute before opset 9, an input from 9."""
    t = ctx.tensor(x[0])  # type: ignore[arg-type]
    scales = [float(s) for s in (node.attr("scales") if node.opset < 9 else ctx.host(x[1]).reshape(-1))]  # type: ignore[arg-type]
    mode = _text(node.attr("mode"), "nearest")
    out = t
    for a, (n_in, s) in enumerate(zip(t.shape, scales, strict=True)):
        if s != 1.0:
            w, _ = axis_weights(n_in, math.floor(n_in * s), s, "linear" if mode in ("linear", "bilinear") else
                                "nearest", "asymmetric", "floor")
            out = resample_axis(out, a, w)
    return out
