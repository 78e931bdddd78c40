"""The OpenCL platforms and devices, listed through the ICD loader with ctypes: what the probe needs, without
importing pyopencl (its import, with numpy's, costs 0.3-0.5 s; this costs the driver's start-up only).

The loader is the system's ``libOpenCL.so.1``, which reads the same ICD files (``/etc/OpenCL/vendors``) as the
copy pyopencl bundles. That copy is not loaded here: loaded on its own, without pyopencl, it crashes the
process on its first call. Without a system loader, `devices` lists through pyopencl instead (slow, but sure).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

CL_PLATFORM_NAME = 0x0902
CL_DEVICE_TYPE = 0x1000
CL_DEVICE_NAME = 0x102B
CL_DEVICE_TYPE_GPU = 1 << 2
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_NOT_FOUND = -1


class EnumerationError(OSError):
    """The ICD loader could not be loaded, or an OpenCL call returned an error code (named)."""


@dataclass(frozen=True)
class Found:
    platform: str
    name: str
    is_gpu: bool


_LOADERS = ("libOpenCL.so.1", "libOpenCL.so")


_U32, _VP, _SZ = ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t
_SIGNATURES = {  # every argument typed: an untyped Python int is passed as a C int, wrong for size_t and handles
    "clGetPlatformIDs": [_U32, _VP, ctypes.POINTER(_U32)],
    "clGetPlatformInfo": [_VP, _U32, _SZ, _VP, ctypes.POINTER(_SZ)],
    "clGetDeviceIDs": [_VP, ctypes.c_uint64, _U32, _VP, ctypes.POINTER(_U32)],
    "clGetDeviceInfo": [_VP, _U32, _SZ, _VP, ctypes.POINTER(_SZ)],
}


def _load() -> ctypes.CDLL | None:
    """The system's ICD loader with its four functions typed, or None when there is none."""
    for path in _LOADERS:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int32
        return lib
    return None


def _info(fn, handle: int, param: int) -> bytes:
    size = ctypes.c_size_t()
    if (rc := fn(handle, param, 0, None, ctypes.byref(size))) != 0:
        raise EnumerationError(f"{fn.__name__} returned {rc}")
    buf = ctypes.create_string_buffer(size.value)
    if (rc := fn(handle, param, size.value, buf, None)) != 0:
        raise EnumerationError(f"{fn.__name__} returned {rc}")
    return buf.raw[:size.value]


def _ids(call, *args) -> list[int]:
    n = ctypes.c_uint32()
    if (rc := call(*args, 0, None, ctypes.byref(n))) != 0:
        if rc == CL_DEVICE_NOT_FOUND:
            return []
        raise EnumerationError(f"{call.__name__} returned {rc}" + (" (no OpenCL platform: no ICD is installed)"
                                                                   if rc == -1001 else ""))
    ids = (ctypes.c_void_p * n.value)()
    if n.value and (rc := call(*args, n.value, ids, None)) != 0:
        raise EnumerationError(f"{call.__name__} returned {rc}")
    return [i for i in ids if i]


def _through_pyopencl() -> list[Found]:
    import pyopencl as cl
    return [Found(d.platform.name, d.name, bool(d.type & cl.device_type.GPU))
            for p in cl.get_platforms() for d in p.get_devices()]


def devices() -> list[Found]:
    """Every device of every platform, in platform order (``OPENCL:i`` is the i-th). Raises EnumerationError
    (or pyopencl's errors, without a system loader)."""
    if (lib := _load()) is None:
        return _through_pyopencl()
    out = []
    for p in _ids(lib.clGetPlatformIDs):
        platform = _info(lib.clGetPlatformInfo, p, CL_PLATFORM_NAME).rstrip(b"\0").decode(errors="replace")
        for d in _ids(lib.clGetDeviceIDs, p, CL_DEVICE_TYPE_ALL):
            name = _info(lib.clGetDeviceInfo, d, CL_DEVICE_NAME).rstrip(b"\0").decode(errors="replace")
            kind = int.from_bytes(_info(lib.clGetDeviceInfo, d, CL_DEVICE_TYPE)[:8], "little")
            out.append(Found(platform, name, bool(kind & CL_DEVICE_TYPE_GPU)))
    return out
