"""tolk-cuda without a GPU: each probe layer's reason and hint, and CUDA C compiled to an sm_90 cubin."""
from __future__ import annotations

import ctypes

import pytest
from tolk_cuda import plugin as cuda_plugin
from tolk_cuda.compiler import CUDACompiler, find_nvcc, find_nvrtc

from tolk_core.errors import CompileError, DeviceUnavailableError
from tolk_core.plugins import Device, get_registry

EM_CUDA = 190

SRC = """
extern "C" __global__ void saxpy(float* out, const float* x, const float* y, int n, int a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] *= 2.0f;
}
"""


class FakeCuda:
    """A fake libcuda: cuInit result and device count are configurable."""

    def __init__(self, init_rc=0, count=0):
        self.init_rc, self.count = init_rc, count

    def cuInit(self, flags):  # noqa: N802 - the driver's name
        return self.init_rc

    def cuDeviceGetCount(self, ptr):  # noqa: N802
        ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int))[0] = self.count
        return 0


def test_reason_pycuda_not_installed(monkeypatch):
    monkeypatch.setattr(cuda_plugin, "_has_pycuda", lambda: False)
    a = cuda_plugin.probe()
    assert (a.ok, a.reason) == (False, "pycuda not installed") and "tolk-cuda[pycuda]" in a.hint


def test_reason_libcuda_not_found(monkeypatch):
    monkeypatch.setattr(cuda_plugin, "_has_pycuda", lambda: True)

    def missing():
        raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")
    monkeypatch.setattr(cuda_plugin, "_load_libcuda", missing)
    a = cuda_plugin.probe()
    assert (a.ok, a.reason) == (False, "libcuda.so.1 not found") and "NVIDIA driver" in a.hint


def test_reason_no_cuda_device(monkeypatch):
    monkeypatch.setattr(cuda_plugin, "_has_pycuda", lambda: True)
    monkeypatch.setattr(cuda_plugin, "_load_libcuda", lambda: FakeCuda(init_rc=100))  # CUDA_ERROR_NO_DEVICE
    a = cuda_plugin.probe()
    assert not a.ok and a.reason == "no CUDA device (cuInit returned 100)" and "nvidia-smi" in a.hint
    monkeypatch.setattr(cuda_plugin, "_load_libcuda", lambda: FakeCuda(count=0))
    assert cuda_plugin.probe().reason == "no CUDA device"
    monkeypatch.setattr(cuda_plugin, "_load_libcuda", lambda: FakeCuda(count=2))
    assert (cuda_plugin.probe().ok, cuda_plugin.probe().device_count) == (True, 2)


def test_demanding_cuda_here_names_plugin_reason_and_fix(tolk_env):
    rec = get_registry().get("CUDA")
    if rec.state == "available":
        pytest.skip("a CUDA device is present")
    with pytest.raises(DeviceUnavailableError) as e:
        Device["CUDA"]
    msg = str(e.value)
    assert "tolk-cuda" in msg and rec.reason in msg and "Fix:" in msg


def is_cubin(b: bytes) -> bool:
    return b[:4] == b"\x7fELF" and int.from_bytes(b[18:20], "little") == EM_CUDA


@pytest.mark.parametrize("tool", ["nvrtc", "nvcc"])
def test_cuda_c_compiles_to_sm90_cubin_without_a_gpu(tool):
    if (find_nvrtc() if tool == "nvrtc" else find_nvcc()) is None:
        pytest.skip(f"{tool} not installed")
    c = CUDACompiler(arch="sm_90", use=tool)
    assert c.tool.startswith(tool)
    cubin = c.compile(SRC)
    assert is_cubin(cubin) and b"saxpy" in cubin and b"scale" in cubin  # both kernels in one binary
    with pytest.raises(CompileError) as e:
        c.compile(SRC.replace("out[i] *= 2.0f", "out[i] *= undefined_name"))
    assert "undefined_name" in e.value.log


def test_renderer_spec_compiler_usable_while_device_unavailable(tolk_env):
    compiler = Device.compiler_for("CUDA")
    if compiler.tool == "none":
        pytest.skip("neither NVRTC nor nvcc installed")
    assert is_cubin(compiler.compile_cached(SRC))
