"""Tolk: a small, fast, readable tensor compiler whose backends are plugins.

The public face: Tensor, dtypes, Variable, jit, Device, profile (per-kernel times and work), no_grad and the
errors.
Importing tolk_core imports no backend library (and not numpy): plugins are probed at the registry's first use,
and the front end loads on first use of Tensor, jit, dtypes or Variable (the profiler on first use of profile).
"""
from typing import Any

from tolk_core.errors import (  # noqa: F401
    BroadcastStoreError,
    CompileError,
    DeviceMismatchError,
    DeviceUnavailableError,
    DTypeError,
    JitError,
    ScalarOverflowError,
    ShapeError,
    TolkError,
    UnknownDeviceError,
)
from tolk_core.plugins import Device  # noqa: F401  (the registry face; loads plugins lazily)
from tolk_core.version import __version__  # noqa: F401

_LAZY = {"Tensor": ("tolk_core.frontend.tensor", "Tensor"), "jit": ("tolk_core.frontend.jit", "jit"),
         "function": ("tolk_core.frontend.function", "function"),
         "custom_kernel": ("tolk_core.frontend.function", "custom_kernel"),
         "dtypes": ("tolk_core.ir.dtype", "dtypes"), "Variable": ("tolk_core.ir.uop", "Variable"),
         "profile": ("tolk_core.engine.profile", "profile"), "no_grad": ("tolk_core.frontend.autograd", "no_grad"),
         "einsum": ("tolk_core.frontend.einsum", "einsum")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'tolk_core' has no attribute {name!r}")
