"""Resampling: torch's `interpolate` and ONNX's Resize on one mechanism.

Every mode here is separable: an output element along one axis is a weighted sum of input elements along that
axis. For static shapes the weights form an (out, in) matrix computed on the host with numpy from the sizes
alone (`axis_weights`); `resample_axis` applies it along its axis, by a matmul, or by a gather when every row
selects one input element (nearest: exact for every dtype, and an inf or NaN stays where it is). A resize of
several axes applies one matrix per axis.

Coordinate conventions (ONNX's coordinate_transformation_mode; `scale` is out/in or the scale asked for):
half_pixel (x+0.5)/scale-0.5, pytorch_half_pixel (the same, 0 for a length-1 output), half_pixel_symmetric
(centred), align_corners x*(in-1)/(out-1), asymmetric x/scale, tf_crop_and_resize (a region of interest, with
`extrapolation_value` outside the input). Taps outside the input are clamped to its edge, except that cubic
with `exclude_outside` drops them and renormalizes.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tolk_core.errors import ArgumentError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners", "asymmetric",
                    "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coords(n_in: int, n_out: int, scale: float, mode: str, roi: tuple[float, float] = (0.0, 1.0),
                  length: float | None = None) -> np.ndarray:
    """The input coordinate of every output index along one axis (float64). `length`: the output length
    before rounding (ONNX's n_in * scale when scales are given), which the corner-aligned and cropping
    transforms divide by; n_out when None."""
    x = np.arange(n_out, dtype=np.float64)
    span = float(n_out if length is None else length)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if span > 1 else np.zeros(n_out)
    if mode == "half_pixel_symmetric":
        adjust = n_out / (scale * n_in)
        return n_in / 2 * (1 - adjust) + (x + 0.5) / scale - 0.5
    if mode == "align_corners":
        return x * (n_in - 1) / (span - 1) if span > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if span <= 1:
            return np.full(n_out, 0.5 * (lo + hi) * (n_in - 1))
        return lo * (n_in - 1) + x * (hi - lo) * (n_in - 1) / (span - 1)
    raise ArgumentError(f"coordinate_transformation_mode {mode!r} is not one of {', '.join(COORDINATE_MODES)}")


def _nearest_index(src: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.ceil(src - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(src + 0.5)
    if mode == "floor":
        return np.floor(src)
    if mode == "ceil":
        return np.ceil(src)
    raise ArgumentError(f"nearest_mode {mode!r} is not one of {', '.join(NEAREST_MODES)}")


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the taps at offsets -1, 0, 1, 2 from floor(x) (t = x - floor(x))."""
    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _stretched(n_in: int, src: np.ndarray, scale: float, mode: str, a: float,
               exclude_outside: bool) -> np.ndarray:
    """Antialiased weights: the filter (support 1 for linear, 2 for cubic) stretched by 1/scale, evaluated at
    (j - src) * scale for the taps j around floor(src), normalized; taps past the edge read the edge element
    (or, with exclude_outside, are dropped before normalizing)."""
    support = 1 if mode == "linear" else 2
    start = math.floor(-support / scale) + 1
    offsets = np.arange(start, 1 + support - start)
    base = np.floor(src)
    d = np.abs((offsets[None, :] - (src - base)[:, None]) * scale)
    if mode == "linear":
        taps = np.maximum(1 - d, 0.0)
    else:
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        taps = np.where(d <= 1, near, np.where(d < 2, far, 0.0))
    pos = base[:, None].astype(np.int64) + offsets[None, :]
    if exclude_outside:
        taps = np.where((pos >= 0) & (pos < n_in), taps, 0.0)
    taps = taps / taps.sum(axis=1, keepdims=True)
    w = np.zeros((len(src), n_in))
    np.add.at(w, (np.repeat(np.arange(len(src)), len(offsets)), np.clip(pos, 0, n_in - 1).reshape(-1)),
              taps.reshape(-1))
    return w


def axis_weights(n_in: int, n_out: int, scale: float, mode: str = "nearest", coord: str = "half_pixel",
                 nearest_mode: str = "round_prefer_floor", cubic_a: float = -0.75, exclude_outside: bool = False,
                 roi: tuple[float, float] = (0.0, 1.0), length: float | None = None,
                 antialias: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The (n_out, n_in) float64 weight matrix of one axis, and a boolean (n_out,) mask of the outputs that lie
    outside the input (only tf_crop_and_resize has any: they take the extrapolation value). With `antialias`
    a downsampling linear or cubic filter is stretched by 1/scale (every input it covers contributes)."""
    src = source_coords(n_in, n_out, scale, coord, roi, length)
    outside = (src < 0) | (src > n_in - 1) if coord == "tf_crop_and_resize" else np.zeros(n_out, bool)
    if antialias and scale < 1 and mode in ("linear", "cubic"):
        return _stretched(n_in, src, scale, mode, cubic_a, exclude_outside), outside
    w = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if mode == "nearest":
        idx = np.clip(_nearest_index(src, nearest_mode), 0, n_in - 1).astype(np.int64)
        w[rows, idx] = 1.0
        return w, outside
    base = np.floor(src)
    t = src - base
    if mode == "linear":
        offsets, taps = np.array([0, 1]), np.stack([1 - t, t], axis=-1)
    elif mode == "cubic":
        offsets, taps = np.array([-1, 0, 1, 2]), _cubic(t, cubic_a)
    else:
        raise ArgumentError(f"resize mode {mode!r} is not one of nearest, linear, cubic")
    pos = base[:, None].astype(np.int64) + offsets[None, :]
    if exclude_outside:
        taps = np.where((pos >= 0) & (pos < n_in), taps, 0.0)
        taps = taps / taps.sum(axis=1, keepdims=True)
    np.add.at(w, (np.repeat(rows, len(offsets)), np.clip(pos, 0, n_in - 1).reshape(-1)), taps.reshape(-1))
    return w, outside


def resample_axis(x: Tensor, axis: int, w: np.ndarray, outside: np.ndarray | None = None,
                  fill: float = 0.0) -> Tensor:
    """`x` resampled along `axis` by the (out, in) weight matrix `w` (see the module docstring)."""
    axis %= x.ndim
    selects = bool(np.all((w == 0) | (w == 1)) and np.all(w.sum(axis=1) == 1))
    if selects:
        idx = Tensor(w.argmax(axis=1).astype(np.int32), device=x.device)
        out = x[(slice(None),) * axis + (idx,)]
    else:
        f = x if dtypes.is_float(x.dtype) else x.cast(dtypes.float32)
        moved = f.transpose(axis, -1)
        wt = Tensor(np.ascontiguousarray(w.T).astype(dtypes.to_np(f.dtype)), device=x.device)
        out = moved.matmul(wt).transpose(axis, -1)
        if not dtypes.is_float(x.dtype):  # integers: rounded (half up) and clamped to their range
            out = (out + 0.5).floor().clip(dtypes.min(x.dtype), dtypes.max(x.dtype)).cast(x.dtype)
    if outside is not None and outside.any():
        shape = [1] * x.ndim
        shape[axis] = len(outside)
        mask = Tensor(outside.reshape(shape), device=x.device)
        out = mask.where(fill, out)
    return out


_TORCH_MODES = {"nearest": ("nearest", 0), "linear": ("linear", 1), "bilinear": ("linear", 2),
                "bicubic": ("cubic", 2), "trilinear": ("linear", 3)}


def interpolate(x: Tensor, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None) -> Tensor:
    """torch.nn.functional.interpolate over the spatial axes of an (N, C, *spatial) input. nearest is torch's
    (floor of dst * in/out), linear/bilinear/trilinear and bicubic (a = -0.75) use half-pixel centres or, with
    `align_corners`, the corner-aligned grid. With `scale_factor` the coordinates use that factor (torch's
    default recompute_scale_factor=None) and the output size is floor(in * factor)."""
    if mode not in _TORCH_MODES:
        raise ArgumentError(f"interpolate mode {mode!r} is not one of {', '.join(_TORCH_MODES)}")
    kind, rank = _TORCH_MODES[mode]
    nd = x.ndim - 2
    if rank and nd != rank:
        raise ArgumentError(f"interpolate mode {mode!r} needs a {rank + 2}-d input, got {x.shape}")
    if (size is None) == (scale_factor is None):
        raise ArgumentError("interpolate takes exactly one of size and scale_factor")
    if align_corners is not None and kind == "nearest":
        raise ArgumentError("align_corners only applies to linear, bilinear, bicubic and trilinear modes")
    ins = x.shape[2:]
    if size is not None:
        outs = [size] * nd if isinstance(size, int) else list(size)
        scales = [o / i for o, i in zip(outs, ins, strict=True)]
    else:
        scales = [float(scale_factor)] * nd if isinstance(scale_factor, (int, float)) else \
            [float(s) for s in scale_factor]  # type: ignore[union-attr]
        outs = [math.floor(i * s) for i, s in zip(ins, scales, strict=True)]
    coord = "align_corners" if align_corners else ("asymmetric" if kind == "nearest" else "half_pixel")
    out = x
    for i, (n_in, n_out, s) in enumerate(zip(ins, outs, scales, strict=True)):
        if n_in == n_out and (kind == "nearest" or s == 1.0):
            continue
        w, _ = axis_weights(n_in, n_out, s, kind, coord, nearest_mode="floor")
        out = resample_axis(out, 2 + i, w)
    return out
