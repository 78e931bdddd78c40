"""Converters of ONNX's sequence and optional operators (SequenceConstruct/Empty/Insert/At/Erase/Length,
ConcatFromSequence, SplitToSequence; Optional, OptionalHasElement, OptionalGetElement; an empty optional is
None). A sequence is a Python list of values: its length and
positions are host numbers, so every op here only rearranges the list or calls Tensor operations. A converter
returns its outputs as a list, so one producing a sequence returns it inside one."""
from __future__ import annotations

from typing import Any

import numpy as np

from tolk_core.onnx.context import Ctx, Node, Value

Inputs = list[Any]


def _position(ctx: Ctx, v: Value | None, length: int, default: int) -> int:
    p = default if v is None else int(ctx.host(v).reshape(-1)[0])
    return p + length if p < 0 else p


def construct(ctx: Ctx, node: Node, x: Inputs) -> Any:
    return [list(x)]


def empty(ctx: Ctx, node: Node, x: Inputs) -> Any:
    return [[]]


def insert(ctx: Ctx, node: Node, x: Inputs) -> Any:
    seq = list(x[0])
    at = _position(ctx, x[2] if len(x) > 2 else None, len(seq), len(seq))
    seq.insert(at, x[1])
    return [seq]


def at(ctx: Ctx, node: Node, x: Inputs) -> Any:
    return x[0][_position(ctx, x[1], len(x[0]), 0)]


def erase(ctx: Ctx, node: Node, x: Inputs) -> Any:
    seq = list(x[0])
    del seq[_position(ctx, x[1] if len(x) > 1 else None, len(seq), len(seq) - 1)]
    return [seq]


def length(ctx: Ctx, node: Node, x: Inputs) -> Any:
    return np.array(len(x[0]), dtype=np.int64)


def concat_from_sequence(ctx: Ctx, node: Node, x: Inputs) -> Any:
    parts = [ctx.tensor(v) for v in x[0]]
    axis = int(node.attr("axis"))
    if node.attr("new_axis", 0):
        return parts[0].stack(*parts[1:], dim=axis)
    return parts[0].cat(*parts[1:], dim=axis)


def split_to_sequence(ctx: Ctx, node: Node, x: Inputs) -> Any:
    """SplitToSequence: by the sizes in `split` (a scalar: equal parts, the last smaller), or into size-1
    parts, squeezed unless keepdims=0 says otherwise."""
    t = ctx.tensor(x[0])
    axis = int(node.attr("axis", 0)) % t.ndim
    n = t.shape[axis]
    if len(x) > 1 and x[1] is not None:
        s = ctx.host(x[1])
        sizes = [int(v) for v in s.reshape(-1)] if s.ndim else \
            [min(int(s), n - i) for i in range(0, n, int(s))]
        return [list(t.split(sizes, dim=axis))]
    parts = list(t.split(1, dim=axis))
    return [parts if node.attr("keepdims", 1) else [p.squeeze(axis) for p in parts]]


def optional(ctx: Ctx, node: Node, x: Inputs) -> Any:
    """Optional: its input, or an empty optional (None) without one."""
    return [x[0] if x else None]


def optional_has_element(ctx: Ctx, node: Node, x: Inputs) -> Any:
    return np.array(bool(x) and x[0] is not None)


def optional_get_element(ctx: Ctx, node: Node, x: Inputs) -> Any:
    return [x[0]]
