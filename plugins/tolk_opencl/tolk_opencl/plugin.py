"""Entry point of tolk-opencl: hook implementations only; pyopencl is imported by the probe, not here."""
from __future__ import annotations

import importlib.util

from tolk_core.plugins import Availability, BackendSpec, Capabilities, GraphSpec, RendererSpec, hookimpl

PRIORITY_GPU = 20  # above the CPU plugin (10)
PRIORITY_CPU = 5   # below it: PoCL on the host is slower than the C backend

NO_PLATFORM_HINT = ("install an OpenCL driver: on Debian/Ubuntu `apt-get install pocl-opencl-icd` (CPU), or your "
                    "GPU vendor's OpenCL ICD")


def probe() -> Availability:
    """Available when pyopencl imports and finds at least one device. Priority follows device 0's type."""
    if importlib.util.find_spec("pyopencl") is None:
        return Availability(False, "pyopencl not installed", 0, hint="pip install tolk-opencl (depends on pyopencl)")
    try:
        from tolk_opencl.runtime import all_devices
        devices = all_devices()
    except Exception as e:  # LogicError (no platform), OSError from the ICD loader, ...
        return Availability(False, f"no OpenCL platform found ({type(e).__name__}: {e})".replace("\n", " "), 0,
                            hint=NO_PLATFORM_HINT)
    if not devices:
        return Availability(False, "OpenCL platforms found but no device", 0, hint=NO_PLATFORM_HINT)
    import pyopencl as cl
    is_gpu = bool(devices[0].type & cl.device_type.GPU)
    return Availability(True, ", ".join(f"{d.platform.name}: {d.name}" for d in devices), len(devices),
                        priority=PRIORITY_GPU if is_gpu else PRIORITY_CPU,
                        details={"pyopencl": cl.VERSION_TEXT, "devices": [d.name for d in devices]})


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
