"""Entry point of tolk-cuda: hook implementations and the layered probe (no pycuda import here).

The probe checks the layers in order and names the first one missing:
  "pycuda not installed"     -> pip install 'tolk-cuda[pycuda]'
  "libcuda.so.1 not found"   -> install the NVIDIA driver
  "no CUDA device"           -> check nvidia-smi and CUDA_VISIBLE_DEVICES
"""
from __future__ import annotations

import ctypes
import importlib.util

from tolk_core.plugins import Availability, BackendSpec, Capabilities, GraphSpec, RendererSpec, hookimpl

HINT_PYCUDA = ("pip install 'tolk-cuda[pycuda]' (pycuda builds only where the CUDA toolkit and driver are "
               "installed)")
HINT_DRIVER = "install the NVIDIA driver, which provides libcuda.so.1"
HINT_DEVICE = "check `nvidia-smi` and CUDA_VISIBLE_DEVICES"


def _has_pycuda() -> bool:
    return importlib.util.find_spec("pycuda") is not None


def _load_libcuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _device_count(lib: ctypes.CDLL) -> tuple[int, str]:
    """(number of devices, error text). cuInit failing (e.g. CUDA_ERROR_NO_DEVICE) counts as zero."""
    rc = lib.cuInit(0)
    if rc != 0:
        return 0, f"cuInit returned {rc}"
    n = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(n))
    return (n.value, "") if rc == 0 else (0, f"cuDeviceGetCount returned {rc}")


def probe() -> Availability:
    """Never raises; names the first missing layer (pycuda, libcuda, a device)."""
    if not _has_pycuda():
        return Availability(False, "pycuda not installed", 0, hint=HINT_PYCUDA)
    try:
        lib = _load_libcuda()
    except OSError:
        return Availability(False, "libcuda.so.1 not found", 0, hint=HINT_DRIVER)
    try:
        n, err = _device_count(lib)
    except Exception as e:  # a broken driver
        n, err = 0, f"{type(e).__name__}: {e}"
    if n == 0:
        return Availability(False, "no CUDA device" + (f" ({err})" if err else ""), 0, hint=HINT_DEVICE)
    return Availability(True, f"{n} CUDA device(s)", n)


@hookimpl
def tolk_backends():
    yield BackendSpec(name="CUDA", aliases=("GPU",), device="tolk_cuda.runtime:CUDADevice",
                      probe="tolk_cuda.plugin:probe", priority=30,
                      capabilities=Capabilities(timing=True, local_size=True, shared_memory=True, half=True),
                      env_vars=("CUDA_VISIBLE_DEVICES",), install_hint=HINT_PYCUDA)


@hookimpl
def tolk_renderers():
    yield RendererSpec(device="CUDA", name="CUDA C", renderer="tolk_cuda.renderer:CUDARenderer",
                       compiler="tolk_cuda.compiler:CUDACompiler")


@hookimpl
def tolk_graphs():
    yield GraphSpec(device="CUDA", graph="tolk_cuda.graph:CUDAGraph")
