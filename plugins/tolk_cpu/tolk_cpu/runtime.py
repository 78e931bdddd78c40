"""CPU runtime: aligned host memory, C compiled by the system compiler, kernels called through ctypes."""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shlex
import shutil
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tolk_core import config
from tolk_core.render.ccompile import compile_c, load_shared, run_compiler
from tolk_core.runtime import (
    HOST_CHECK_BYTES,
    Allocator,
    CompiledDevice,
    Compiler,
    Program,
    host_headroom,
    remembered_identity,
    run_smoke,
)

ALIGN = 64


class HostMemory:
    """A handle: `nbytes` bytes at address `ptr` (64-byte aligned for fresh allocations) kept alive by `owner`."""
    __slots__ = ("owner", "ptr", "nbytes", "mv")

    def __init__(self, owner: np.ndarray, start: int, nbytes: int):
        self.owner, self.nbytes = owner, nbytes
        self.ptr: int = owner.ctypes.data + start
        self.mv = owner[start:start + nbytes].data

    def __repr__(self) -> str:
        return f"<HostMemory {self.nbytes}B @0x{self.ptr:x}>"


class CPUAllocator(Allocator):
    """Host memory from numpy (malloc), aligned to 64 bytes; views share their base's memory. A large
    allocation is checked against the host memory left (`host_headroom`): with overcommit a malloc past it
    can succeed and the kernel that writes it be killed."""

    def limits(self, nbytes: int) -> list[tuple[int, str]]:
        return [h] if nbytes >= HOST_CHECK_BYTES and (h := host_headroom()) is not None else []

    def _alloc(self, nbytes: int) -> HostMemory:
        raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
        return HostMemory(raw, (-raw.ctypes.data) % ALIGN, nbytes)

    def copyin(self, handle: HostMemory, src: memoryview) -> None:
        handle.mv[:] = src

    def copyout(self, dest: memoryview, handle: HostMemory) -> None:
        dest[:] = handle.mv

    def offset(self, handle: HostMemory, byte_offset: int, nbytes: int) -> HostMemory:
        start = handle.ptr - handle.owner.ctypes.data + byte_offset
        return HostMemory(handle.owner, start, nbytes)

    def host_memory(self, handle: HostMemory) -> memoryview:
        return handle.mv

    def adopt(self, arr: np.ndarray) -> HostMemory:
        # kernels need element alignment only (vector types are declared unaligned: tolk_cpu/renderer.py)
        return HostMemory(arr.reshape(-1).view(np.uint8), 0, arr.nbytes)


class CPUCompiler(Compiler):
    """C via ``compile_c`` with config CC (default ``cc``) and CFLAGS (see docs/configuration.md), plus
    ``-fopenmp``: the renderer's thread and SIMD pragmas are OpenMP."""
    kind = "c"

    def __init__(self, cc: str | None = None, flags: Sequence[str] | None = None):
        super().__init__()
        self.cc = cc or config.get("CC")
        # no fused multiply-add contraction unless asked for: a*b+c rounds twice, as in numpy and torch (first,
        # so that CFLAGS can override it)
        self.flags = ["-ffp-contract=off", *(list(flags) if flags is not None else shlex.split(config.get("CFLAGS")))]
        if "-fopenmp" not in self.flags:
            self.flags.append("-fopenmp")

    def compile(self, src: str) -> bytes:
        return compile_c(src, self.cc, self.flags)

    def identity(self) -> str:
        """cc, its version, flags, and the target the flags resolve to on this machine (``-march=native``);
        remembered on disk per compiler binary, flags and CPU (two subprocess calls: ~5 ms of a warm start)."""
        return remembered_identity(self._identity_facts(), self._ask_compiler)

    def _identity_facts(self) -> str | None:
        if (exe := shutil.which(self.cc)) is None:
            return None
        try:
            st = os.stat(os.path.realpath(exe))
            with open("/proc/cpuinfo") as f:  # what -march=native resolves from
                cpu = sorted({ln for ln in f if ln.startswith(("vendor_id", "model name", "flags"))})
        except OSError:
            return None
        # "vectors": identities remembered before they named the vector registers are not read back
        return f"{os.path.realpath(exe)} {st.st_size} {st.st_mtime_ns} {self.flags} {''.join(cpu)} vectors"

    def _ask_compiler(self) -> str:
        try:  # under COMPILE_TIMEOUT: a compiler that hangs here would hang the first compile
            ver = run_compiler([self.cc, "--version"]).stdout.splitlines()[:1]
            # the driver's expansion of the flags names the resolved -march / target-cpu and its features
            exp = run_compiler([self.cc, *self.flags, "-###", "-x", "c", "-c", "/dev/null", "-o", "/dev/null"]).stderr
            # the macros it predefines for that target name its vector extensions (`vector_registers`)
            macros = run_compiler([self.cc, *self.flags, "-dM", "-E", "-x", "c", "/dev/null"]).stdout
        except OSError:
            ver, exp, macros = ["missing"], "", ""
        exp = re.sub(r"\S*/tmp/\S*", "", exp)  # temporary file names differ per run
        target = hashlib.sha256(exp.encode()).hexdigest()[:16]
        width, count = _vector_target(macros)
        return (f"cc={self.cc} version={ver[0] if ver else '?'} flags={' '.join(self.flags)} target={target} "
                f"vectors={width}x{count}")

    def vector_registers(self) -> tuple[int, int]:
        """(bytes, count) of the widest vector registers of the target the flags compile for: 64 x 32 with
        AVX-512, 32 x 16 with AVX/AVX2 (docs/performance.md, "Convolutions (CPU)": planning AVX-512 tiles for
        an AVX2 machine spills the accumulators, 6x slower); read from the remembered identity."""
        m = re.search(r"vectors=(\d+)x(\d+)", self.identity())
        return (int(m[1]), int(m[2])) if m else _vector_target("")


def _vector_target(macros: str) -> tuple[int, int]:
    """(bytes, count) of the vector registers named by the compiler's predefined `macros` (`cc -dM -E`)."""
    if "__AVX512F__" in macros:
        return 64, 32
    if "__AVX__" in macros:
        return 32, 16
    return 16, 32 if "__aarch64__" in macros else 16


class CPUProgram(Program):
    """A C function ``void name(T* restrict b0, ..., int v0, ...)``; global/local sizes are ignored (the
    kernel loops itself)."""

    def __init__(self, device: CPUDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        try:
            self.fxn = getattr(device.load(lib), name)
        except AttributeError:
            raise ValueError(f"kernel {name!r} is not in the compiled library") from None
        self.fxn.restype = None
        self.threads = device.threads  # its device's share of the cores (None: OpenMP's default)

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        args = [ctypes.c_void_p(b.ptr) for b in bufs] + [ctypes.c_int32(v) for v in vals]
        if self.threads is not None:
            _set_threads(self.threads)
        if wait:
            t0 = time.perf_counter()
            self.fxn(*args)
            return time.perf_counter() - t0
        self.fxn(*args)
        return None


SMOKE = """
void tolk_smoke(float* restrict out, const float* restrict a, const float* restrict b, int n, int k) {
  for (int i = 0; i < n; i++) out[i] = a[i] * (float)k + b[i];
}
"""


_omp_threads: list[int] = [0]  # the OpenMP thread count last set for this process's launching thread


def _set_threads(n: int) -> None:
    """Make the next parallel loop use `n` OpenMP threads (libgomp's omp_set_num_threads, which the kernel
    libraries link through -fopenmp); only called when the count changes."""
    if _omp_threads[0] != n:
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(ctypes.c_int(n))
        _omp_threads[0] = n


def device_threads(n_devices: int) -> int | None:
    """The OpenMP threads of each of `n_devices` virtual CPU devices: CPU_THREADS, else the cores divided among
    them (at least 1); None for one device, which keeps OpenMP's own default (all cores)."""
    if n_devices <= 1:
        return None
    return config.get("CPU_THREADS") or max(1, (os.cpu_count() or 1) // n_devices)


class CPUDevice(CompiledDevice):
    """The host CPU, or one of CPU_DEVICES virtual devices over it (``CPU:i``: host memory like the others,
    its kernels run with its share of the cores)."""

    def __init__(self, name: str = "CPU"):
        self.threads = device_threads(config.get("CPU_DEVICES"))
        # OpenMP threads that spin after a parallel loop steal the core a descheduled teammate needs: on a busy
        # machine each kernel then waits a scheduler slice (measured: MLP forward 35 ms spinning, 1.9 ms passive).
        # libgomp reads this when it loads (with the first kernel library); OMP_WAIT_POLICY / OMP_NUM_THREADS
        # in the environment still win.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        super().__init__(name, CPUAllocator(), CPUCompiler(), CPUProgram)

    def load(self, lib: bytes) -> ctypes.CDLL:
        return load_shared(lib)  # loaded once per distinct binary

    def self_test(self) -> str:
        return run_smoke(self, SMOKE)

