"""ONNX in (docs/onnx.md): `load(model_or_path, device=None) -> OnnxModel`, a callable over Tensors, and the
ONNX backend interface at `tolk_core.onnx.backend`. Needs the `onnx` package (`pip install tolk-core[onnx]`),
imported when a model is loaded, not when this package is."""
from tolk_core.errors import UnsupportedOnnxOpError
from tolk_core.onnx.model import OnnxModel, load
from tolk_core.onnx.registry import MAX_OPSET, MIN_OPSET

__all__ = ["MAX_OPSET", "MIN_OPSET", "OnnxModel", "UnsupportedOnnxOpError", "load"]
