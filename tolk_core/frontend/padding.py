"""Padding modes other than a constant: `Tensor.pad(..., mode="reflect" | "replicate" | "circular")`, and torch's
functional form `pad(x, pad, mode, value)` (re-exported as `nn.functional.pad`).

An op belongs here when it extends an axis with copies of that axis's own elements. Each mode works axis by axis
on (before, after) pairs that `Tensor.pad` has already normalised, and builds the new borders from shrinks,
flips and expands of the input, joined by `cat`: movement ops only, so the gradient of a border element flows
back to the input element it copies (several borders copying one element add up).

Rules (torch's F.pad, which ONNX's Pad modes reflect / edge / wrap match):
- Negative pads crop first; the mode then pads what is left (so `circular` with (2, -1) wraps the cropped axis).
- `reflect` mirrors without repeating the edge element: each pad must be smaller than the (cropped) axis size.
- `replicate` repeats the edge element: the axis must not be empty.
- `circular` wraps around: each pad at most the axis size (wrapping around more than once is refused).
- A `value` other than 0 goes with `mode="constant"` only.
Impossible pads raise ShapeError naming the axis, its size, the pad and the limit; an unknown mode ArgumentError.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tolk_core.errors import ArgumentError, ShapeError

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Scalar, Tensor
    from tolk_core.ir.uop import sint

MODES = ("constant", "reflect", "replicate", "circular")


def check_mode(mode: str, value: Scalar) -> None:
    """ArgumentError for a mode not in MODES, or a nonzero `value` with a mode that copies elements."""
    if mode not in MODES:
        raise ArgumentError(f"pad mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    if mode != "constant" and value != 0:
        raise ArgumentError(f"pad mode {mode!r} copies the tensor's own elements and takes no value (got "
                            f"value={value!r}); use mode='constant' to pad with a value")


def _part(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    return x.shrink(tuple((start, stop) if a == axis else None for a in range(x.ndim)))


def _borders(x: Tensor, axis: int, before: int, after: int, mode: str) -> tuple[Tensor, Tensor]:
    """The elements that go before and after `x` along `axis` under `mode` (non-negative pads)."""
    n = x.shape[axis]
    if mode == "reflect":
        if max(before, after) >= n:
            raise ShapeError(f"reflect padding ({before}, {after}) of axis {axis} of size {n} in shape {x.shape}: "
                             f"each pad must be smaller than the axis size (at most {max(n - 1, 0)}); use "
                             "'replicate' or 'circular' for larger pads")
        return _part(x, axis, 1, before + 1).flip(axis), _part(x, axis, n - 1 - after, n - 1).flip(axis)
    if mode == "replicate":
        if n == 0:
            raise ShapeError(f"replicate padding of axis {axis} of shape {x.shape}: the axis is empty, there is no "
                             "edge element to repeat")
        grow = (lambda k: tuple(k if a == axis else s for a, s in enumerate(x.shape)))
        return _part(x, axis, 0, 1).expand(grow(before)), _part(x, axis, n - 1, n).expand(grow(after))
    if max(before, after) > n:
        raise ShapeError(f"circular padding ({before}, {after}) of axis {axis} of size {n} in shape {x.shape}: "
                         f"each pad must be at most the axis size {n} (it would wrap around more than once)")
    return _part(x, axis, n - before, n), _part(x, axis, 0, after)


def pad_copying(x: Tensor, padding: tuple[tuple[sint, sint], ...], mode: str) -> Tensor:
    """`x` (already cropped: every pad here is >= 0) padded per axis by (before, after) under `mode`; the pads
    and the padded sizes must be concrete (ShapeError for a bound Variable)."""
    for axis, (before, after) in enumerate(padding):
        if not (isinstance(before, int) and isinstance(after, int) and isinstance(x.shape[axis], int)):
            raise ShapeError(f"{mode} padding needs concrete pads and sizes, got ({before}, {after}) on axis {axis} "
                             f"of shape {x.shape}")
        if before == after == 0:
            continue
        head, tail = _borders(x, axis, before, after, mode)
        x = head.cat(x, tail, dim=axis)
    return x


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: Scalar | None = None) -> Tensor:
    """torch's F.pad: `pad` lists (before, after) pairs from the last axis back; `value` (constant mode only)
    defaults to 0."""
    return x.pad(tuple(pad), 0 if value is None else value, mode)
