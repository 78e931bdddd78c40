"""The device contract, checked when a device opens (docs/plugins.md, section 4).

A plugin's device class is checked once, right after it is constructed, so an author reads which method of
which class is missing (``contract Allocator.copyout``) instead of a bare NotImplementedError the first time a
program copies memory, or an AttributeError about a private name when ``super().__init__`` was forgotten.
"""
from __future__ import annotations

from typing import Any

from tolk_core.errors import PluginError
from tolk_core.runtime.allocator import Allocator
from tolk_core.runtime.compiler import Compiler
from tolk_core.runtime.device import CompiledDevice
from tolk_core.runtime.program import Program

# (base class, attribute of the device holding the instance or class, methods a subclass must define)
REQUIRED: tuple[tuple[type, str, tuple[str, ...]], ...] = (
    (Allocator, "allocator", ("_alloc", "copyin", "copyout")),
    (Compiler, "compiler", ("compile",)),
    (Program, "runtime", ("__call__",)),
)
_SIGNATURES = {"_alloc": "_alloc(self, nbytes) -> handle", "copyin": "copyin(self, handle, src)",
               "copyout": "copyout(self, dest, handle)", "compile": "compile(self, src) -> bytes",
               "__call__": "__call__(self, *bufs, global_size, local_size, vals, wait)"}


def _broken(who: str, contract: str, problem: str, fix: str) -> PluginError:
    err = PluginError(f"device {who}: contract {contract} broken: {problem}. Fix: {fix} (docs/plugins.md, section 4)")
    err.contract = contract  # type: ignore[attr-defined]  # read by the conformance suite's reports
    return err


def check_device(dev: Any, who: str) -> None:
    """Raise PluginError naming the contract, the class and the fix when `dev` (just constructed; `who` names the
    device and its plugin) is not a complete CompiledDevice."""
    cls = type(dev).__name__
    if not isinstance(dev, CompiledDevice):
        raise _broken(who, "BackendSpec.device", f"it constructed a {cls}, not a CompiledDevice",
                      "derive the device class from tolk_core.runtime.CompiledDevice")
    if not hasattr(dev, "_renderer_spec"):
        raise _broken(who, "CompiledDevice.__init__", f"{cls}.__init__ did not call super().__init__",
                      "call super().__init__(name, allocator, compiler, ProgramClass) in it")
    for base, attr, methods in REQUIRED:
        obj = getattr(dev, attr, None)
        impl = obj if isinstance(obj, type) else type(obj)
        if not (isinstance(obj, base) or (isinstance(obj, type) and issubclass(obj, base))):
            what = "class" if base is Program else "instance"
            raise _broken(who, f"CompiledDevice.{attr}", f"{cls}.{attr} is {obj!r}, not a {base.__name__} {what}",
                          f"pass a {base.__name__} {what} to super().__init__")
        for m in methods:
            if getattr(impl, m) is getattr(base, m):
                raise _broken(who, f"{base.__name__}.{m}", f"{impl.__name__} does not define {m}",
                              f"define {_SIGNATURES[m]} in {impl.__name__}")
