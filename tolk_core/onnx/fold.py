"""Host evaluation of shape computations (docs/onnx.md, "Shapes").

A node whose inputs are all host arrays (constants, `Shape` results and what is computed from them) and whose
op is a cheap one of the shape arithmetic (Gather on a shape, Concat of shapes, Add/Mul on sizes, Cast, ...)
is evaluated with numpy by ONNX's own reference implementation of that op, so the sizes that feed Reshape,
Expand, ConstantOfShape or Range are Python numbers when those nodes are built, and no kernel is launched
for them. Larger host arrays go to the device like any other data."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# ops evaluated on the host when every input is a host array of at most HOST_LIMIT elements
HOST_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil", "Sqrt", "Max", "Min", "Sum", "Cast",
    "CastLike", "Concat", "Unsqueeze", "Squeeze", "Slice", "Reshape", "Flatten", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Where", "Identity", "ReduceProd", "ReduceSum",
    "ReduceMax", "ReduceMin", "Expand", "Tile", "Transpose", "Sign", "Split",
})
HOST_LIMIT = 4096


def host_inputs(op: str, inputs: list[Any],
                constant_copy: Callable[[Any], np.ndarray | None]) -> list[np.ndarray | None] | None:
    """The inputs as host arrays when the node is evaluated on the host (a Tensor counts when it has a host
    copy: a small initializer or constant), else None."""
    if op not in HOST_OPS:
        return None
    out: list[np.ndarray | None] = []
    for v in inputs:
        h = constant_copy(v)
        if v is not None and h is None:
            return None
        out.append(None if h is None else np.asarray(h))
    present = [h for h in out if h is not None]
    return out if present and sum(h.size for h in present) <= HOST_LIMIT else None


class HostEvaluator:
    """ONNX's reference implementation of single nodes, one evaluator built per node on first use."""

    def __init__(self) -> None:
        self._cache: dict[int, Any] = {}

    def run(self, key: int, proto: Any, opset: int, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        ev = self._cache.get(key)
        if ev is None:
            names = [n or "" for n in proto.input]
            graph = helper.make_graph([proto], "fold", [helper.make_value_info(n, helper.TypeProto())
                                                        for n in names if n],
                                      [helper.make_value_info(n, helper.TypeProto()) for n in proto.output if n])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            ev = self._cache[key] = ReferenceEvaluator(model)
        feeds = {n: v for n, v in zip(proto.input, inputs, strict=False) if n and v is not None}
        return [np.asarray(o) for o in ev.run(None, feeds)]
