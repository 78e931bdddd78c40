"""DISK: a copy-only, file-backed device in core (docs/prepare.md, "DISK").

A device name ``DISK:<path>`` names one file; its storage is the file's bytes, mapped read-only with
numpy.memmap (nothing is read until a copy asks for it). Its capabilities say ``disk``: no kernel runs on it,
so the only things a disk value can do are be copied to another device (``.to("CPU")``) or have movements and
bitcasts applied before the copy; the copy then reads one contiguous run of the file's bytes and the movements
are applied on the target (prepare_rangeify's disk rules). Anything else raises DiskError naming the device
and the operation.

DISK is not a plugin backend: it is listed by no registry and is never a default device; ``tolk_core.Device``
opens it by name (one device per path).
"""
from __future__ import annotations

import os
from typing import Any

from tolk_core.errors import DiskError
from tolk_core.plugins.specs import Capabilities
from tolk_core.runtime.allocator import Allocator
from tolk_core.runtime.compiler import Compiler
from tolk_core.runtime.device import CompiledDevice
from tolk_core.runtime.program import Program

PREFIX = "DISK:"
CAPABILITIES = Capabilities(float64=True, half=True, extras={"disk": True})


def is_disk_name(name: str) -> bool:
    """Whether `name` names a disk device (``DISK:<path>``, the prefix in any case)."""
    return name[:len(PREFIX)].upper() == PREFIX


def canonical(name: str) -> str:
    """``DISK:<absolute path>``: one device per file, however the path was spelled."""
    path = name[len(PREFIX):]
    if not path:
        raise DiskError(f"device {name!r}: a disk device names a file, e.g. 'DISK:/data/model.safetensors'")
    return PREFIX + os.path.abspath(os.path.expanduser(path))


class DiskAllocator(Allocator):
    """Storage that is the file's bytes from the start: a handle is a read-only memmap of the first `nbytes`."""

    cache_limit = 0  # a freed map is released at once: the file may change between loads

    def __init__(self, device: str, path: str):
        super().__init__()
        self.device, self.path = device, path

    def _alloc(self, nbytes: int) -> Any:
        try:
            size = os.path.getsize(self.path)
        except OSError as e:
            raise DiskError(f"{self.device}: cannot open the file: {e}") from e
        if size < nbytes:
            raise DiskError(f"{self.device}: storage of {nbytes} bytes does not fit in the file's {size} bytes")
        import numpy as np  # here, not at the top: the registry imports this module and must not pull numpy in
        return np.memmap(self.path, np.uint8, "r", shape=(nbytes,)) if nbytes else np.empty(0, np.uint8)

    def offset(self, handle: Any, byte_offset: int, nbytes: int) -> Any:
        return handle[byte_offset:byte_offset + nbytes]

    def copyout(self, dest: memoryview, handle: Any) -> None:
        import numpy as np
        np.frombuffer(dest, np.uint8)[:] = handle

    def copyin(self, handle: Any, src: memoryview) -> None:
        raise DiskError(f"{self.device} is read-only: a disk value can only be copied to another device")


class _NoCompiler(Compiler):
    kind = "disk"

    def identity(self) -> str:
        return "disk"

    def compile(self, src: str) -> bytes:
        raise DiskError("a disk device runs no kernels")


class DiskDevice(CompiledDevice):
    """The device of one file (``DISK:<path>``); ``capabilities.extras["disk"]`` is True."""

    capabilities = CAPABILITIES

    def __init__(self, name: str):
        super().__init__(name, DiskAllocator(name, name[len(PREFIX):]), _NoCompiler(), Program)

    def self_test(self) -> str:
        return f"{self.name}: a read-only file map"
