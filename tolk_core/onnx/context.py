"""What a converter sees: one ONNX node (its op, attributes and the opset it is read under) and the context
that turns its inputs into Tensors on the model's device or into host arrays (docs/onnx.md, "Values").

A value flowing through the graph is either a Tensor (device data) or a numpy array (host data: constants,
shapes and everything computed from them alone). Converters that need a number to build a graph with (a
shape, axes, pads, a count) read it with `host`; those that compute read their operands with `tensor`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tolk_core.errors import UnsupportedError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import DType, dtypes

Value = Tensor | np.ndarray


@dataclass(frozen=True)
class Node:
    """One ONNX node, decoded: op type, input and output names ('' for an omitted optional one), attributes
    as Python values (tensors as numpy arrays, graphs left as GraphProto) and the opset of its domain."""
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    opset: int
    name: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def ints(self, key: str, default: Sequence[int] | None = None) -> list[int] | None:
        v = self.attrs.get(key)
        return [int(i) for i in v] if v is not None else (list(default) if default is not None else None)


def onnx_dtype(code: int) -> DType:
    """The Tolk dtype of an ONNX TensorProto element type code."""
    from onnx import helper
    return dtypes.from_np(helper.tensor_dtype_to_np_dtype(code))


@dataclass
class Ctx:
    """The device converters build on, and host copies of the Tensors whose data is known on the host: the
    initializers and constants (shape arithmetic on them is folded, fold.py) and the caller's numpy inputs
    (readable as shapes without a device read, but data: never folded). Each entry holds its Tensor, so an id
    is never reused while its entry lives; the per-call entries are dropped when the next call begins."""
    device: str
    weights: dict[int, tuple[Tensor, np.ndarray]] = field(default_factory=dict)
    per_call: dict[int, tuple[Tensor, np.ndarray, bool]] = field(default_factory=dict)
    # the values of the current call by name, for an op that names its operands by attribute (Gradient's y)
    env: dict[str, Any] = field(default_factory=dict)

    def remember(self, t: Tensor, arr: np.ndarray, constant: bool, persistent: bool = False) -> None:
        if persistent:
            self.weights[id(t)] = (t, arr)
        else:
            self.per_call[id(t)] = (t, arr, constant)

    def constant_copy(self, v: Value | None) -> np.ndarray | None:
        """`v` as a host array when its data is a constant of the model (a host array, or a Tensor made from
        one), else None."""
        if v is None or isinstance(v, np.ndarray):
            return v
        hit = self.weights.get(id(v))
        if hit is not None:
            return hit[1]
        call = self.per_call.get(id(v))
        return call[1] if call is not None and call[2] else None

    def tensor(self, v: Value) -> Tensor:
        """`v` as a Tensor on the model's device (a host array is uploaded; a 0-d array stays 0-d)."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, list):
            raise UnsupportedError("a sequence reached an op that takes a tensor: only the Sequence* ops, "
                                   "ConcatFromSequence and Identity take sequences")
        if not isinstance(v, np.ndarray):  # a NarrowTensor (narrow.py): only Cast and CastLike take one
            raise UnsupportedError(f"an input of narrow type {v.dtype} reached an op other than Cast/CastLike: "
                                   "Tolk holds float8/float4/int4/int2 values as codes; cast them first")
        arr = np.asarray(v)
        t = Tensor(np.asarray(arr, order="C"), device=self.device)
        self.remember(t, arr, constant=True)
        return t

    def host(self, v: Value) -> np.ndarray:
        """`v` as a numpy array. A Tensor with no host copy is read from the device: a shape that depends on
        data (a graph input used as a shape) costs one device read per call and cannot be captured by jit."""
        if isinstance(v, np.ndarray):
            return v
        hit = self.constant_copy(v)
        if hit is None and id(v) in self.per_call:
            hit = self.per_call[id(v)][1]
        return hit if hit is not None else v.numpy()

    def host_ints(self, v: Value) -> list[int]:
        return [int(i) for i in self.host(v).reshape(-1)]


def tensor_op(owner: Any, name: str) -> Callable[..., Any]:
    """`owner.name` (a Tensor method, Tensor itself for a staticmethod, or nn.functional), looked up by name:
    the ops the converters build on come from the Tensor API as it grows (docs/onnx.md, "Operators"); one
    this build lacks raises UnsupportedError naming it, instead of an AttributeError."""
    fn = getattr(owner, name, None)
    if fn is None:
        where = "nn.functional" if getattr(owner, "__name__", "") == "tolk_core.nn.functional" else "Tensor"
        raise UnsupportedError(f"{where}.{name} is not available in this build of Tolk: the ONNX op that needs "
                               "it cannot be converted")
    return fn
