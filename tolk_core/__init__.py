"""Tolk: a small, fast, readable tensor compiler whose backends are plugins.

The public face: Tensor, dtypes, Variable, jit, Device and the errors. Importing tolk_core imports no
backend library; plugins are probed at the registry's first use.
"""
from tolk_core.errors import (  # noqa: F401
    CompileError,
    DeviceMismatchError,
    DeviceUnavailableError,
    DTypeError,
    JitError,
    ShapeError,
    TolkError,
    UnknownDeviceError,
)
from tolk_core.plugins import Device  # noqa: E402,F401  (the registry face; loads plugins lazily)

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "jit":  # the front end imports numpy: loaded on first use, so `import tolk_core` stays light
        from tolk_core.frontend.jit import jit
        return jit
    raise AttributeError(f"module 'tolk_core' has no attribute {name!r}")
