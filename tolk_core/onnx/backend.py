"""The ONNX backend interface (onnx.backend.base) over tolk_core.onnx, so ONNX's own suite can run:
`onnx.backend.test.BackendTest(tolk_core.onnx.backend, __name__)`.

ONNX names devices "CPU" and "CUDA"; its "CPU" runs on the Tolk device TOLK_DEVICE names (CPU when unset),
so the same suite scores any installed device (docs/onnx.md, "Scoreboard")."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from tolk_core.onnx.model import OnnxModel, load


def tolk_device(device: str) -> str:
    """The Tolk device that ONNX's device string stands for."""
    if device.upper().startswith("CPU"):
        return os.environ.get("TOLK_DEVICE") or "CPU"
    return device.upper()


class TolkRep(BackendRep):
    """A prepared model: `run(inputs)` takes a list (graph input order) or a dict and returns the outputs."""

    def __init__(self, model: OnnxModel):
        self.model = model

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return tuple(self.model.run(inputs))


class TolkBackend(Backend):
    @classmethod
    def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
        return True

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> TolkRep:
        return TolkRep(load(model, tolk_device(device)))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def run_node(cls, node: Any, inputs: Sequence[Any], device: str = "CPU", outputs_info: Any = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """One node as a model of its own (ONNX's latest opset), inputs in the node's input order."""
        from onnx import helper
        names = [n for n in node.input if n]
        graph = helper.make_graph([node], "node", [helper.make_value_info(n, helper.TypeProto()) for n in names],
                                  [helper.make_value_info(n, helper.TypeProto()) for n in node.output])
        opset = int(kwargs.get("opset_version", 0)) or None
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] if opset else None)
        return cls.prepare(model, device).run(list(inputs))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")


prepare = TolkBackend.prepare
run_model = TolkBackend.run_model
run_node = TolkBackend.run_node
supports_device = TolkBackend.supports_device
is_compatible = TolkBackend.is_compatible
