"""Entry point of tolk-opencl: hook implementations only; the probe lists devices with ctypes (enumerate.py) and
pyopencl is imported when a device opens."""
from __future__ import annotations

import importlib.util

from tolk_core.plugins import Availability, BackendSpec, Capabilities, GraphSpec, RendererSpec, hookimpl

PRIORITY_GPU = 20  # above the CPU plugin (10)
PRIORITY_CPU = 5   # below it: PoCL on the host is slower than the C backend

NO_PLATFORM_HINT = ("install an OpenCL driver: on Debian/Ubuntu `apt-get install pocl-opencl-icd` (CPU), or your "
                    "GPU vendor's OpenCL ICD")


def probe() -> Availability:
    """Available when pyopencl is installed and the ICD loader lists at least one device (listed with ctypes,
    `enumerate.py`: pyopencl itself is imported when the device opens). Priority follows device 0's type."""
    if importlib.util.find_spec("pyopencl") is None:
        return Availability(False, "pyopencl not installed", 0, hint="pip install tolk-opencl (depends on pyopencl)")
    from tolk_opencl import enumerate as cl_enum
    try:
        devices = cl_enum.devices()
    except Exception as e:  # an OpenCL call failed (no platform, ...), pyopencl's LogicError, the ICD loader's OSError
        return Availability(False, f"no OpenCL platform found ({type(e).__name__}: {e})".replace("\n", " "), 0,
                            hint=NO_PLATFORM_HINT)
    if not devices:
        return Availability(False, "OpenCL platforms found but no device", 0, hint=NO_PLATFORM_HINT)
    return Availability(True, ", ".join(f"{d.platform}: {d.name}" for d in devices), len(devices),
                        priority=PRIORITY_GPU if devices[0].is_gpu else PRIORITY_CPU,
                        details={"devices": [d.name for d in devices]})


@hookimpl
def tolk_backends():
    yield BackendSpec(name="OPENCL", aliases=("CL",), device="tolk_opencl.runtime:OpenCLDevice",
                      probe="tolk_opencl.plugin:probe", priority=PRIORITY_CPU,
                      # half always works (vload/vstore_half where the device lacks cl_khr_fp16); float64 needs
                      # the device's cl_khr_fp64: OpenCLRenderer.supports(dtypes.float64) answers per device
                      capabilities=Capabilities(timing=True, local_size=True, shared_memory=True, half=True),
                      install_hint=NO_PLATFORM_HINT)


@hookimpl
def tolk_renderers():
    yield RendererSpec(device="OPENCL", name="OpenCL C", renderer="tolk_opencl.renderer:OpenCLRenderer",
                       compiler="tolk_opencl.runtime:OpenCLCompiler")


@hookimpl
def tolk_graphs():
    yield GraphSpec(device="OPENCL", graph="tolk_opencl.graph:OpenCLGraph")
