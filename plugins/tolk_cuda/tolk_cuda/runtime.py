"""CUDA runtime on pycuda (imported here, lazily: only when a CUDA device is opened).

Not exercised without a GPU: this machine has no driver. Geometry: ``global_size`` is the grid (blocks per
dimension) and ``local_size`` the block.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pycuda.driver as cuda

from tolk_core.runtime import Allocator, CompiledDevice, Program, run_smoke
from tolk_cuda.compiler import CUDACompiler

_initialized = False


class CUDAAllocator(Allocator):
    def __init__(self, device: CUDADevice):
        super().__init__()
        self.dev = device

    def _alloc(self, nbytes: int) -> Any:
        self.dev.ctx.push()
        try:
            return cuda.mem_alloc(max(nbytes, 1))
        finally:
            cuda.Context.pop()

    def _free(self, handle: Any, nbytes: int) -> None:
        handle.free()

    def copyin(self, handle: Any, src: memoryview) -> None:
        cuda.memcpy_htod(int(handle), np.frombuffer(src, np.uint8))

    def copyout(self, dest: memoryview, handle: Any) -> None:
        cuda.memcpy_dtoh(np.frombuffer(dest, np.uint8), int(handle))

    def offset(self, handle: Any, byte_offset: int, nbytes: int) -> Any:
        return np.uintp(int(handle) + byte_offset)


class CUDAProgram(Program):
    def __init__(self, device: CUDADevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        self.fxn = device.load(lib).get_function(name)

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        grid = tuple(global_size) + (1,) * (3 - len(global_size))
        block = tuple(local_size or (1, 1, 1)) + (1,) * (3 - len(local_size or (1, 1, 1)))
        args = [np.uintp(int(b)) for b in bufs] + [np.int32(v) for v in vals]
        if wait:
            start, end = cuda.Event(), cuda.Event()
            start.record()
            self.fxn(*args, grid=grid[:3], block=block[:3])
            end.record()
            end.synchronize()
            return start.time_till(end) * 1e-3
        self.fxn(*args, grid=grid[:3], block=block[:3])
        return None


SMOKE = """
extern "C" __global__ void tolk_smoke(float* out, const float* a, const float* b, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * (float)k + b[i];
}
"""


class CUDADevice(CompiledDevice):
    def __init__(self, name: str = "CUDA:0"):
        global _initialized
        if not _initialized:
            cuda.init()
            _initialized = True
        self.index = int(name.partition(":")[2] or 0)
        self.cu_device = cuda.Device(self.index)
        self.ctx = self.cu_device.retain_primary_context()
        self.ctx.push()
        major, minor = self.cu_device.compute_capability()
        super().__init__(name, CUDAAllocator(self), CUDACompiler(arch=f"sm_{major}{minor}"), CUDAProgram)
        self._modules: dict[str, Any] = {}

    def load(self, lib: bytes) -> Any:
        key = hashlib.sha256(lib).hexdigest()
        if (mod := self._modules.get(key)) is None:
            mod = self._modules[key] = cuda.module_from_buffer(lib)
        return mod

    def synchronize(self) -> None:
        cuda.Context.synchronize()

    def self_test(self) -> str:
        return run_smoke(self, SMOKE, global_size=(16, 1, 1), local_size=(64, 1, 1))
