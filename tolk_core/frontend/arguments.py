"""Checks of the arguments every op module shares: sizes, axes and the operands' devices.

A size is a Python int, a numpy integer scalar (taken as its int, as numpy and torch take it) or a bound
Variable's symbolic size; a float, None or a bool is an `ArgumentTypeError` naming the argument (a float size
is a mistake, not a size to round). An axis is an int or a numpy integer. Operands of one op must live on one
device: `check_devices` raises `DeviceMismatchError` naming the op, both devices and the fix (`.to(device)`).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.errors import ArgumentTypeError, DeviceMismatchError, ShapeError
from tolk_core.ir.uop import UOp, sint

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def is_integer(x: Any) -> bool:
    """Whether `x` is an integer scalar (a Python or numpy int, not a bool)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def as_size(x: Any, what: str = "a size") -> sint:
    """`x` as a size: an int (numpy integers converted) or a symbolic size; else ArgumentTypeError."""
    if type(x) is int or isinstance(x, UOp):
        return x
    if not is_integer(x):
        raise ArgumentTypeError(f"{what} must be an integer, got {type(x).__name__} {x!r}: pass an int "
                                "(int(x) rounds toward zero, if that is what was meant)")
    return int(x)


def as_sizes(shape: Iterable[Any], what: str = "shape") -> tuple[sint, ...]:
    """Every size of `shape` through `as_size`; a shape that is not a sequence is an ArgumentTypeError."""
    if not isinstance(shape, (tuple, list)):
        raise ArgumentTypeError(f"{what} must be an int or a sequence of ints, got {type(shape).__name__} {shape!r}")
    return tuple(as_size(s, f"every entry of {what}") for s in shape)


def new_shape(shape: Any) -> tuple[int, ...]:
    """The shape of a new tensor: one size or a sequence of them, none negative (else ShapeError). Typed as
    ints, as the front end's shape arithmetic treats sizes; a bound Variable's size passes through unchanged."""
    sizes = (as_size(shape),) if is_integer(shape) or isinstance(shape, UOp) else as_sizes(shape)
    if any(isinstance(s, int) and s < 0 for s in sizes):
        raise ShapeError(f"negative size in shape {sizes}: every size must be 0 or more")
    return sizes  # type: ignore[return-value]  # a bound Variable's size is a UOp


def as_axis(x: Any) -> int:
    """`x` as an axis index (not yet normalised); a float, None or bool is an ArgumentTypeError."""
    if not is_integer(x):
        raise ArgumentTypeError(f"an axis must be an integer, got {type(x).__name__} {x!r}")
    return int(x)


def check_devices(what: str, tensors: Iterable[Tensor]) -> None:
    """Raise DeviceMismatchError when `tensors` (the operands of `what`) do not all live on one device."""
    devices = list(dict.fromkeys(t.device for t in tensors))
    if len(devices) > 1:
        raise DeviceMismatchError(f"{what} has operands on different devices: {' and '.join(map(str, devices))}; "
                                  f"move them to one device first, e.g. x.to({devices[0]!r})")


def as_operand(t: Tensor, other: Any) -> Any:
    """`other` as an operand of an op on `t`: an ndarray becomes a Tensor on `t`'s device (its own dtype, as a
    Tensor made from it: numpy's promotion then applies, as torch applies it to an ndarray it is given); a
    Tensor, a scalar or anything else is returned as it is, for the op to check."""
    return type(t)(other, t.device) if isinstance(other, np.ndarray) else other
