"""OpenCL runtime on pyopencl: a context and profiling queue per device index, buffers, programs, launches.

Launch geometry follows the Program contract: ``global_size`` is the number of work-groups per dimension (like
a CUDA grid) and ``local_size`` the group size, so the OpenCL global work size is their product. With
``local_size=None`` the launch is ``global_size`` work-items and the driver picks the grouping (kernels must
then not depend on local ids).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from tolk_core.errors import CompileError
from tolk_core.runtime import (
    HOST_CHECK_BYTES,
    Allocator,
    CompiledDevice,
    Compiler,
    Program,
    host_headroom,
    quietly,
    run_smoke,
)


def all_devices() -> list[cl.Device]:
    """Every OpenCL device of every platform, in platform order; ``OPENCL:i`` is the i-th."""
    return [d for p in cl.get_platforms() for d in p.get_devices()]


_OUT_OF_MEMORY = (cl.status_code.OUT_OF_HOST_MEMORY, cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
                  cl.status_code.OUT_OF_RESOURCES)


class OpenCLAllocator(Allocator):
    """cl.Buffer handles; views are sub-buffers (the offset must meet the device's base alignment).

    Allocations are checked against the device's limits first (`limits`). On a CPU device (PoCL) buffers are
    created with ALLOC_HOST_PTR, which makes the driver take the memory at once: created lazily, a buffer whose
    memory cannot be had aborts the process (an assertion) at its first use, and the lazily promised memory
    would hide from the host-memory check of the next allocation."""

    def __init__(self, device: OpenCLDevice):
        super().__init__()
        self.dev = device
        # sub-buffer offsets must be multiples of this many bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN is in bits)
        self.offset_alignment = device.cl_device.mem_base_addr_align // 8
        d = device.cl_device
        self.max_alloc, self.global_mem, self.on_host = d.max_mem_alloc_size, d.global_mem_size, \
            bool(d.type & cl.device_type.CPU)
        self.live_bytes = 0  # held in buffers this allocator created and has not released
        self.flags = cl.mem_flags.READ_WRITE | (cl.mem_flags.ALLOC_HOST_PTR if self.on_host else 0)

    def limits(self, nbytes: int) -> list[tuple[int, str]]:
        """The device's largest allocation, its global memory less what Tolk holds there and, for a CPU
        device (its memory is the host's), the host memory left."""
        out = [(self.max_alloc, "the device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE)"),
               (self.global_mem - self.live_bytes, f"its global memory (CL_DEVICE_GLOBAL_MEM_SIZE, "
                f"{self.global_mem} bytes) less the {self.live_bytes} bytes Tolk holds there")]
        if self.on_host and nbytes >= HOST_CHECK_BYTES and (h := host_headroom()) is not None:
            out.append(h)
        return out

    def _alloc(self, nbytes: int) -> cl.Buffer:
        try:
            buf = cl.Buffer(self.dev.ctx, self.flags, max(nbytes, 1))
        except cl.Error as e:
            if e.code in _OUT_OF_MEMORY:  # a MemoryError: the allocator frees its cache and retries once
                raise MemoryError(str(e)) from e
            raise
        self.live_bytes += nbytes
        return buf

    def _free(self, handle: cl.Buffer, nbytes: int) -> None:
        handle.release()
        self.live_bytes -= nbytes

    def copyin(self, handle: cl.Buffer, src: memoryview) -> None:
        if src.nbytes:
            cl.enqueue_copy(self.dev.queue, handle, np.frombuffer(src, np.uint8), is_blocking=True)

    def copyout(self, dest: memoryview, handle: cl.Buffer) -> None:
        if dest.nbytes:
            cl.enqueue_copy(self.dev.queue, np.frombuffer(dest, np.uint8), handle, is_blocking=True)

    def copy_from_peer(self, dest: cl.Buffer, src_alloc: Allocator, src: Any, nbytes: int) -> bool:
        """A buffer of a device in this device's context is copied by the device (clEnqueueCopyBuffer), after
        the source's queue has finished writing it."""
        if not isinstance(src_alloc, OpenCLAllocator) or src_alloc.dev.ctx != self.dev.ctx:
            return False
        src_alloc.dev.queue.finish()
        cl.enqueue_copy(self.dev.queue, dest, src, byte_count=nbytes).wait()
        return True

    def offset(self, handle: cl.Buffer, byte_offset: int, nbytes: int) -> cl.Buffer:
        align = self.offset_alignment
        if byte_offset % align:
            raise ValueError(f"OpenCL sub-buffer offset {byte_offset} is not a multiple of the device's base "
                             f"alignment ({align} bytes)")
        return handle.get_sub_region(byte_offset, max(nbytes, 1))


# A PoCL program's binary is costly to ask for: PoCL then generates every kernel's work-group function for a
# generic local size, 0.34 s per kernel on these machines against 0.07 s to build from source; built from source,
# each kernel is compiled at its first launch for the geometry it runs with, and PoCL caches that itself
# (POCL_CACHE_DIR). The parity suite's 472 kernels took 220 s to first results through binaries and 22 s this way
# (docs/performance.md "Compile and schedule speed"). So on PoCL the compiled form Tolk caches is the checked
# source, tagged; on other drivers it is the driver's binary.
SOURCE_TAG = b"tolk-opencl-source\n"


def keeps_source(device: cl.Device) -> bool:
    """Whether `device`'s compiled form is its checked source (PoCL) rather than the driver's binary."""
    return "Portable Computing Language" in device.platform.name


class OpenCLCompiler(Compiler):
    """OpenCL C source -> the device's program binary (pyopencl build), or on PoCL the source itself, built once
    to check it (`keeps_source`). Usable without an opened device."""
    kind = "opencl"

    def __init__(self, device_index: int = 0, options: Sequence[str] = (), ctx: cl.Context | None = None):
        super().__init__()
        self.options = list(options)
        self.cl_device = all_devices()[device_index]
        self.ctx, self.shared = (ctx if ctx is not None else cl.Context([self.cl_device])), ctx is not None
        # programs built from source by `compile`, kept until the device sharing this context loads them, so a
        # kept source is not built twice
        self.built: dict[str, cl.Program] = {}

    def identity(self) -> str:
        d = self.cl_device
        # the compiled form is part of the identity: a cache entry holding a kept source is never read as a binary
        # (by an older plugin, which cached binaries on PoCL too), nor a binary as a source
        form = "source" if keeps_source(d) else "binary"
        return (f"platform={d.platform.name} {d.platform.version} device={d.name} driver={d.driver_version} "
                f"options={' '.join(self.options)} form={form}")

    def compile(self, src: str) -> bytes:
        try:
            prg = cl.Program(self.ctx, src).build(options=self.options)
        except cl.Error as e:
            raise CompileError(f"OpenCL build failed on {self.cl_device.name}", src, str(e)) from None
        if not keeps_source(self.cl_device):
            return prg.get_info(cl.program_info.BINARIES)[0]
        lib = SOURCE_TAG + src.encode()
        if self.shared:  # only a device sharing this context can take the built program
            self.built[hashlib.sha256(lib).hexdigest()] = prg
        return lib


class OpenCLProgram(Program):
    """``__kernel void name(__global T* b0, ..., int v0, ...)``; see the module docstring for the geometry."""

    def __init__(self, device: OpenCLDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        self.dev = device
        try:
            self.kernel = cl.Kernel(device.load(lib), name)
        except cl.Error as e:
            raise ValueError(f"kernel {name!r} is not in the compiled program: {e}") from None

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        for i, b in enumerate(bufs):
            self.kernel.set_arg(i, b)
        for j, v in enumerate(vals):
            self.kernel.set_arg(len(bufs) + j, np.int32(v))
        if local_size is None:
            gws, lws = tuple(global_size), None
        else:
            gws, lws = tuple(g * lc for g, lc in zip(global_size, local_size, strict=True)), tuple(local_size)
        evt = cl.enqueue_nd_range_kernel(self.dev.queue, self.kernel, gws, lws)
        if wait:
            evt.wait()
            return (evt.profile.end - evt.profile.start) * 1e-9
        return None


SMOKE = """
__kernel void tolk_smoke(__global float* out, __global const float* a, __global const float* b, int n, int k) {
  int i = get_global_id(0);
  if (i < n) out[i] = a[i] * (float)k + b[i];
}
"""


class OpenCLDevice(CompiledDevice):
    """``OPENCL:i``: the i-th device of ``all_devices()``, its own context and in-order profiling queue."""

    def __init__(self, name: str = "OPENCL:0"):
        self.index = int(name.partition(":")[2] or 0)
        self.cl_device = all_devices()[self.index]
        self.ctx = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.ctx, self.cl_device,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.cl_compiler = OpenCLCompiler(self.index, ctx=self.ctx)
        super().__init__(name, OpenCLAllocator(self), self.cl_compiler, OpenCLProgram)
        self._programs: dict[str, cl.Program] = {}

    @property
    def extensions(self) -> frozenset[str]:
        """The device's OpenCL extensions (``cl_khr_fp64``, ``cl_khr_fp16``, ...): its dtype capabilities."""
        return frozenset(self.cl_device.extensions.split())

    @property
    def cpu_threads(self) -> int:
        """For a CPU device (PoCL), how many work groups run at once (each on one thread): its compute units;
        0 for a GPU."""
        return self.cl_device.max_compute_units if self.cl_device.type & cl.device_type.CPU else 0

    def load(self, lib: bytes) -> cl.Program:
        """The built cl.Program for a compiled form (built once per distinct one): a driver binary, or a source
        kept by the compiler (`keeps_source`), taken from the compiler when it has just built it."""
        key = hashlib.sha256(lib).hexdigest()
        if (prg := self._programs.get(key)) is None:
            if lib.startswith(SOURCE_TAG):
                src, options = lib[len(SOURCE_TAG):].decode(), self.cl_compiler.options
                prg = self.cl_compiler.built.pop(key, None) or quietly(
                    lambda: cl.Program(self.ctx, src).build(options=options))
            else:
                # building a binary prints the driver's notes too (pyopencl's CompilerWarning): held back likewise
                prg = quietly(cl.Program(self.ctx, [self.cl_device], [lib]).build)
            self._programs[key] = prg
        return prg

    def synchronize(self) -> None:
        self.queue.finish()

    def self_test(self) -> str:
        return run_smoke(self, SMOKE, global_size=(16, 1, 1), local_size=(64, 1, 1))
