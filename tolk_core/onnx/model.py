"""`load` and `OnnxModel`: an ONNX model as a callable over Tensors (docs/onnx.md).

Loading decodes every node, checks the opset range and that every (op, opset) has a converter (all the
missing ones are named in one UnsupportedOnnxOpError) and uploads the initializers to the device. A call
runs the nodes in graph order: each converter builds Tensor operations (lazy, nothing runs until a result is
read or realized), shape arithmetic is evaluated on the host (fold.py), and what depends on constants only
(initializers, Constant nodes, and nodes computed from them alone) is computed once and kept for later calls.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tolk_core.errors import ArgumentError, UnsupportedOnnxOpError
from tolk_core.frontend.construction import resolve_device
from tolk_core.frontend.tensor import Tensor
from tolk_core.onnx import registry
from tolk_core.onnx.context import Ctx, Node, Value
from tolk_core.onnx.fold import HostEvaluator, host_inputs
from tolk_core.onnx.narrow import NarrowTensor, narrow_kind, upload
from tolk_core.onnx.ops_string import is_strings

DEFAULT_DOMAINS = ("", "ai.onnx")
HOST_COPY_LIMIT = 4096  # initializers and inputs up to this many elements keep a host copy for shape reads


def _decode(proto: Any, opsets: dict[str, int]) -> Node:
    from onnx import helper, numpy_helper
    attrs: dict[str, Any] = {}
    for a in proto.attribute:
        v = helper.get_attribute_value(a)
        if hasattr(v, "dims") and hasattr(v, "data_type"):  # a TensorProto
            v = numpy_helper.to_array(v)
        elif isinstance(v, bytes):
            v = v.decode()
        attrs[a.name] = v
    domain = "" if proto.domain in DEFAULT_DOMAINS else proto.domain
    op = f"{domain}.{proto.op_type}" if domain else proto.op_type  # another domain's ops go by qualified name
    return Node(op, tuple(proto.input), tuple(proto.output), attrs, opsets.get(domain, 0), proto.name)


def _opsets(model: Any) -> dict[str, int]:
    return {("" if o.domain in DEFAULT_DOMAINS else o.domain): int(o.version) for o in model.opset_import}


def check_supported(model: Any, nodes: list[Node]) -> None:
    """Raise UnsupportedOnnxOpError naming the opset when it is out of range, or every unsupported
    (op, opset) of the model, each once, in order of first use."""
    opset = _opsets(model).get("", 0)
    uses_default = any(p.domain in DEFAULT_DOMAINS for p in model.graph.node)
    if uses_default and not registry.MIN_OPSET <= opset <= registry.MAX_OPSET:
        raise UnsupportedOnnxOpError(
            f"the ONNX model declares opset {opset}; tolk_core.onnx supports opsets {registry.MIN_OPSET} to "
            f"{registry.MAX_OPSET} (docs/onnx.md): convert it with onnx.version_converter.convert_version")
    missing: list[tuple[str, int]] = []
    for n in nodes:
        key = (n.op, n.opset)
        if registry.lookup(n.op, n.opset) is None and key not in missing:
            missing.append(key)
    if missing:
        names = ", ".join(f"{op} (opset {v})" for op, v in missing)
        raise UnsupportedOnnxOpError(
            f"the ONNX model uses {len(missing)} operator(s) tolk_core.onnx does not support: {names}. "
            "docs/onnx.md lists the supported operators and opsets", tuple(missing))


class OnnxModel:
    """A loaded ONNX model. `model(x=..., ...)`, `model({"x": ...})` or `model(a, b)` (graph input order)
    take Tensors or numpy arrays and return {output name: Tensor} in the graph's output order (a NarrowTensor for
    an output of a narrow type: float8, float4, int4, int2; narrow.py)."""

    def __init__(self, proto: Any, device: str | None = None):
        from onnx import numpy_helper
        if proto.functions:  # model-local functions: expanded in place, so only standard ops remain
            from onnx import inliner
            proto = inliner.inline_local_functions(proto)
        self.proto, self.device = proto, resolve_device(device)
        graph = proto.graph
        self.nodes = [_decode(p, _opsets(proto)) for p in graph.node]
        check_supported(proto, self.nodes)
        self.opset = _opsets(proto)[""]
        self.ctx = Ctx(self.device)
        self.weights: dict[str, Value] = {}
        for init in graph.initializer:
            arr = numpy_helper.to_array(init)
            t = Tensor(np.asarray(arr, order="C"), device=self.device) if arr.size else arr
            if isinstance(t, Tensor) and arr.size <= HOST_COPY_LIMIT:
                self.ctx.remember(t, arr, constant=True, persistent=True)
            self.weights[init.name] = t
        self.input_names = [i.name for i in graph.input if i.name not in self.weights]
        self.output_names = [o.name for o in graph.output]
        self._static: dict[str, Value | None] = {}  # outputs of nodes that read constants only
        self._host = HostEvaluator()

    def _inputs(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Value]:
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            kwargs, args = dict(args[0]), ()
        if len(args) > len(self.input_names):
            raise ArgumentError(f"the model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}),"
                                f" got {len(args)} positional arguments")
        given = dict(zip(self.input_names, args, strict=False)) | kwargs
        unknown = [k for k in given if k not in self.input_names and k not in self.weights]
        missing = [k for k in self.input_names if k not in given]
        if unknown or missing:
            raise ArgumentError(f"the model's inputs are {', '.join(self.input_names)}; missing: "
                                f"{', '.join(missing) or 'none'}; unknown: {', '.join(unknown) or 'none'}")
        return {k: self._upload(v) for k, v in given.items()}

    def _upload(self, v: Any) -> Any:
        """One input on the model's device: a Tensor, a NarrowTensor (narrow.py), a list (a sequence) or None
        (an empty optional)."""
        if v is None or isinstance(v, list):  # an empty optional; a sequence
            return None if v is None else [self._upload(e) for e in v]
        if isinstance(v, Tensor):
            return v.to(self.device) if v.device != self.device else v
        arr = np.asarray(v)
        if is_strings(arr):  # strings stay host data (ops_string.py)
            return arr
        if narrow_kind(arr.dtype) is not None:
            return upload(arr, self.device)
        t = Tensor(np.asarray(arr, order="C"), device=self.device)
        if arr.size <= HOST_COPY_LIMIT:
            self.ctx.remember(t, arr, constant=False)
        return t

    def _run_node(self, i: int, node: Node, env: dict[str, Value | None]) -> list[Value | None]:
        args = [env[n] if n else None for n in node.inputs]
        # strings are the caller's data, computed by ops_string's converters, never folded by the reference
        host = None if any(is_strings(a) for a in args) else host_inputs(node.op, args, self.ctx.constant_copy)
        if host is not None:
            return list(self._host.run(i, self.proto.graph.node[i], node.opset, host))
        fn = registry.lookup(node.op, node.opset)
        assert fn is not None  # check_supported ran at load
        res = fn(self.ctx, node, args)
        outs: list[Value | None] = list(res) if isinstance(res, (list, tuple)) else [res]  # type: ignore[list-item]
        return outs[:len(node.outputs)]

    def _keep(self, v: Value | None) -> Value | None:
        """A constant value kept across calls: a Tensor realized once, keeping its host copy if it has one."""
        if not isinstance(v, Tensor):
            return v
        host = self.ctx.constant_copy(v)
        v = v.realize()
        if host is not None:
            self.ctx.remember(v, host, constant=True, persistent=True)
        return v

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Tensor | NarrowTensor]:
        self.ctx.per_call.clear()
        env: dict[str, Value | None] = {**self.weights, **self._static, **self._inputs(args, kwargs)}
        self.ctx.env = env
        static = set(self.weights) | set(self._static)
        for i, node in enumerate(self.nodes):
            if node.outputs and all(o in self._static for o in node.outputs if o):
                continue
            outs = self._run_node(i, node, env)
            keep = all(n in static for n in node.inputs if n)
            for name, v in zip(node.outputs, outs, strict=False):
                if not name:
                    continue
                env[name] = v
                if keep:  # computed from constants only: kept for every later call
                    self._static[name] = self._keep(v)
                    static.add(name)
        return {n: self._output(env[n]) for n in self.output_names}

    def _output(self, v: Any) -> Any:
        """An output as the caller gets it: a Tensor, a NarrowTensor, or a list of them (a sequence)."""
        if v is None or isinstance(v, list):
            return None if v is None else [self._output(e) for e in v]
        return v if isinstance(v, NarrowTensor) or is_strings(v) else self.ctx.tensor(v)

    def run(self, inputs: Sequence[Any] | dict[str, Any]) -> list[Any]:
        """Numpy in, numpy out (graph output order; a sequence output as a list of arrays): the backend's form."""
        return as_numpy(self(dict(inputs)) if isinstance(inputs, dict) else self(*inputs))


def as_numpy(outputs: dict[str, Any]) -> list[Any]:
    """The outputs of an `OnnxModel` call as numpy arrays (a sequence output as a list of arrays), in order."""
    return [[e.numpy() for e in t] if isinstance(t, list) else None if t is None else
            t if isinstance(t, np.ndarray) else t.numpy() for t in outputs.values()]


def lazy_tensors(outputs: dict[str, Any]) -> list[Tensor]:
    """The Tensors behind the outputs of an `OnnxModel` call (a NarrowTensor's codes, a sequence's elements), so
    the outputs of several calls can be realized in one schedule (`Tensor.realize(*tensors)`)."""
    found: list[Tensor] = []
    for v in outputs.values():
        for e in v if isinstance(v, list) else [v]:
            if isinstance(e, NarrowTensor):
                e = e.codes
            if isinstance(e, Tensor):
                found.append(e)
    return found


def load(model_or_path: Any, device: str | None = None) -> OnnxModel:
    """An OnnxModel from a ModelProto, serialized bytes or a path (external data files next to it are
    read too). `device`: a Tolk device name (default: TOLK_DEVICE, else CPU)."""
    import onnx
    if isinstance(model_or_path, (bytes, bytearray)):
        proto = onnx.load_from_string(bytes(model_or_path))
    elif isinstance(model_or_path, (str, os.PathLike)):
        proto = onnx.load(os.fspath(model_or_path), load_external_data=True)
    else:
        proto = model_or_path
    return OnnxModel(proto, device)
