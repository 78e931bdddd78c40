"""CPU runtime: aligned host memory, C compiled by the system compiler, kernels called through ctypes."""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shlex
import shutil
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tolk_core import config
from tolk_core.errors import CompileTimeoutError
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
from tolk_cpu import teams
from tolk_cpu.binding import CoreBinding, device_cores, launch, runs_threads
from tolk_cpu.queue import CPUQueue, queue_for

ALIGN = 64


def _nothing() -> None:
    pass


class HostMemory:
    """A handle: `nbytes` bytes at address `ptr` (64-byte aligned for fresh allocations) kept alive by `owner`."""
    __slots__ = ("owner", "ptr", "nbytes", "start", "_mv")

    def __init__(self, owner: np.ndarray, start: int, nbytes: int, base_ptr: int | None = None):
        self.owner, self.nbytes, self.start = owner, nbytes, start
        # `base_ptr`, the owner's address where the caller knows it: numpy's `.ctypes` costs microseconds, and
        # an allreduce makes a view per chunk and argument on every call (docs/multi-device.md)
        self.ptr: int = (owner.ctypes.data if base_ptr is None else base_ptr) + start
        self._mv: memoryview | None = None

    @property
    def mv(self) -> memoryview:
        """The bytes as a writable memoryview (made on first use: a view passed to kernels only needs `ptr`)."""
        if self._mv is None:
            self._mv = self.owner[self.start:self.start + self.nbytes].data
        return self._mv

    def __repr__(self) -> str:
        return f"<HostMemory {self.nbytes}B @0x{self.ptr:x}>"


class CPUAllocator(Allocator):
    """Host memory from numpy (malloc), aligned to 64 bytes; views share their base's memory. A large
    allocation is checked against the host memory left (`host_headroom`): with overcommit a malloc past it
    can succeed and the kernel that writes it be killed. Every access to the bytes first waits for the
    device's launch queue (`settle`, set by the device: queue.py). Memory shared with numpy or torch (`adopt`,
    `mark_shared`) is remembered by its owner's id in `shared`: a batch that touches it is not queued (writes
    and reads through the other side's arrays happen without Tolk, which cannot make them wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.settle: Callable[[], None] = _nothing
        # owner id -> owner, while the owner lives (a dead owner's id may come back for other memory)
        self.shared: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()

    def touches_shared(self, handles: Sequence[HostMemory]) -> bool:
        """Whether any of `handles` is (a view of) memory shared with another library."""
        return bool(self.shared) and any(id(h.owner) in self.shared for h in handles)

    def limits(self, nbytes: int) -> list[tuple[int, str]]:
        return [h] if nbytes >= HOST_CHECK_BYTES and (h := host_headroom()) is not None else []

    def _alloc(self, nbytes: int) -> HostMemory:
        raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
        return HostMemory(raw, (-raw.ctypes.data) % ALIGN, nbytes)

    def copyin(self, handle: HostMemory, src: memoryview) -> None:
        self.settle()
        handle.mv[:] = src

    def copyout(self, dest: memoryview, handle: HostMemory) -> None:
        self.settle()
        dest[:] = handle.mv

    def offset(self, handle: HostMemory, byte_offset: int, nbytes: int) -> HostMemory:
        return HostMemory(handle.owner, handle.start + byte_offset, nbytes, handle.ptr - handle.start)

    def host_memory(self, handle: HostMemory) -> memoryview:
        self.settle()
        return handle.mv

    def mark_shared(self, handle: HostMemory) -> None:
        self.shared[id(handle.owner)] = handle.owner

    def reads_peer(self, other: Allocator) -> bool:
        # every CPU device's handle is a host address its kernels take as it is (virtual devices: CPU:i)
        return isinstance(other, CPUAllocator)

    def adopt(self, arr: np.ndarray) -> HostMemory:
        # kernels need element alignment only (vector types are declared unaligned: tolk_cpu/renderer.py)
        handle = HostMemory(arr.reshape(-1).view(np.uint8), 0, arr.nbytes)
        self.shared[id(handle.owner)] = handle.owner
        return handle


class CPUCompiler(Compiler):
    """C via ``compile_c`` with config CC (default ``cc``) and CFLAGS (see docs/configuration.md), plus
    ``-fopenmp``: the renderer's thread and SIMD pragmas are OpenMP."""
    kind = "c"

    def __init__(self, cc: str | None = None, flags: Sequence[str] | None = None):
        super().__init__()
        self.cc = cc or config.get("CC")
        # no fused multiply-add contraction unless asked for: a*b+c rounds twice, as in numpy and torch (first,
        # so that CFLAGS can override it). No trapping math: kernels never read the floating-point exception
        # flags, and with them gcc may not evaluate a float operation a select does not take, so it vectorized
        # no loop holding a `where` over a computed value (nor tolk_exp2f) without AVX-512's masked ops
        self.flags = ["-ffp-contract=off", "-fno-trapping-math",
                      *(list(flags) if flags is not None else shlex.split(config.get("CFLAGS")))]
        if "-fopenmp" not in self.flags:
            self.flags.append("-fopenmp")
        self._target_flags: list[str] | None = None

    @property
    def target_flags(self) -> list[str]:
        """The flags every kernel compiles with: `flags`, plus `-mprefer-vector-width=512` where they target
        AVX-512 and do not choose a width themselves. The renderer then writes 64-byte vectors, and gcc's
        tuning for some AVX-512 CPUs (Ice Lake and later Intel: 256) splits a lane loop over a 64-byte vector
        (the FMA helper of every register-tiled product) into two halves joined through the stack: a 1024^3
        float32 product ran at 7 GFLOP/s instead of 180."""
        if self._target_flags is None:
            macros = self._vector_macros()
            chosen = any(f.startswith("-mprefer-vector-width") for f in self.flags)
            wide = "__AVX512F__" in macros.split() and not chosen
            self._target_flags = [*self.flags, "-mprefer-vector-width=512"] if wide else list(self.flags)
        return self._target_flags

    def compile(self, src: str) -> bytes:
        return compile_c(src, self.cc, self.target_flags)

    def identity(self) -> str:
        """cc, its version, flags, and the target the flags resolve to on this machine (``-march=native``);
        remembered on disk per compiler binary, flags and CPU (two subprocess calls: ~5 ms of a warm start)."""
        return remembered_identity(self._identity_facts(self.target_flags), self._ask_compiler)

    def _identity_facts(self, flags: list[str]) -> str | None:
        if (exe := shutil.which(self.cc)) is None:
            return None
        try:
            st = os.stat(os.path.realpath(exe))
            with open("/proc/cpuinfo") as f:  # what -march=native resolves from
                cpu = sorted({ln for ln in f if ln.startswith(("vendor_id", "model name", "flags"))})
        except OSError:
            return None
        return f"{os.path.realpath(exe)} {st.st_size} {st.st_mtime_ns} {flags} {''.join(cpu)}"

    def _ask_compiler(self) -> str:
        try:  # under COMPILE_TIMEOUT: a compiler that hangs here would hang the first compile
            ver = run_compiler([self.cc, "--version"]).stdout.splitlines()[:1]
            # the driver's expansion of the flags names the resolved -march / target-cpu and its features
            argv = [self.cc, *self.target_flags, "-###", "-x", "c", "-c", "/dev/null", "-o", "/dev/null"]
            exp = run_compiler(argv).stderr
        except OSError:
            ver, exp = ["missing"], ""
        exp = re.sub(r"\S*/tmp/\S*", "", exp)  # temporary file names differ per run
        target = hashlib.sha256(exp.encode()).hexdigest()[:16]
        return f"cc={self.cc} version={ver[0] if ver else '?'} flags={' '.join(self.target_flags)} target={target}"


    def vector_target(self) -> tuple[int, int]:
        """(the widest vector register in bytes, how many of them) of the code these flags make, read from the
        compiler's predefined macros (``-march=native`` on an AVX2 CPU: 32 bytes, 16 registers; AVX-512: 64,
        32); a `-mprefer-vector-width=N` in the flags caps the bytes at N / 8. Remembered on disk like
        `identity`. A compiler that cannot be asked: (16, 16), SSE2/NEON."""
        return _parse_vector_target(self._vector_macros(), self.flags)

    def _vector_macros(self) -> str:
        """The vector macros `flags` (before `target_flags` adds to them) define."""
        facts = self._identity_facts(self.flags)
        try:  # a compiler that is missing or hangs is the compile's to report (a timeout is not remembered)
            return remembered_identity(None if facts is None else f"vectors {facts}", self._ask_vector_macros)
        except (OSError, CompileTimeoutError):
            return ""

    def _ask_vector_macros(self) -> str:
        out = run_compiler([self.cc, *self.flags, "-dM", "-E", "-x", "c", "/dev/null"]).stdout
        return " ".join(sorted(m for m in re.findall(r"#define (\w+)", out) if m in _VECTOR_MACROS))


# predefined macro -> (vector bytes, vector registers) of the code a compiler emits; the widest present wins
_VECTOR_MACROS = {"__AVX512F__": (64, 32), "__AVX__": (32, 16), "__SSE2__": (16, 16), "__ARM_NEON": (16, 32),
                  "__aarch64__": (16, 32)}


def _parse_vector_target(macros: str, flags: Sequence[str] = ()) -> tuple[int, int]:
    if n := config.get("CPU_VECTOR_BYTES"):
        return n, 32 if n >= 64 else 16
    found = [_VECTOR_MACROS[m] for m in macros.split() if m in _VECTOR_MACROS]
    nbytes, registers = max(found, default=(16, 16))
    for f in flags:  # the user's own width preference: wider vectors would be split by the compiler
        if (m := re.fullmatch(r"-mprefer-vector-width=(\d+)", f)) and int(m[1]) // 8 >= 16:
            nbytes = min(nbytes, int(m[1]) // 8)
    return nbytes, registers


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
        self.parallel = runs_threads(lib)  # it starts OpenMP teams (never run from the launch queue)
        # its launches keep the device's team one thread per core (binding.py) when it starts a team at all
        self.binding = device.binding if device.binding is not None and self.parallel else None
        self._settle = device.settle

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        args = [ctypes.c_void_p(b.ptr) for b in bufs] + [ctypes.c_int32(v) for v in vals]
        self._settle()  # after what the device's queue holds (queue.py)
        if self.parallel:
            teams.prepare(self.threads)
        return launch(self.binding, self.fxn, args, wait)


SMOKE = """
void tolk_smoke(float* restrict out, const float* restrict a, const float* restrict b, int n, int k) {
  for (int i = 0; i < n; i++) out[i] = a[i] * (float)k + b[i];
}
"""


def device_threads(n_devices: int) -> int | None:
    """The OpenMP threads of each of `n_devices` virtual CPU devices: CPU_THREADS, else the cores divided among
    them (at least 1); None for one device, which keeps OpenMP's own default (all cores)."""
    if n_devices <= 1:
        return None
    return config.get("CPU_THREADS") or max(1, (os.cpu_count() or 1) // n_devices)


class CPUDevice(CompiledDevice):
    """The host CPU, or one of CPU_DEVICES virtual devices over it (``CPU:i``: host memory like the others,
    its kernels run with its share of the cores)."""

    allocator: CPUAllocator

    def __init__(self, name: str = "CPU"):
        self.threads = device_threads(config.get("CPU_DEVICES"))
        # OpenMP threads that spin after a parallel loop steal the core a descheduled teammate needs: on a busy
        # machine each kernel then waits a scheduler slice (measured: MLP forward 35 ms spinning, 1.9 ms passive).
        # libgomp reads this when it loads (with the first kernel library); OMP_WAIT_POLICY / OMP_NUM_THREADS
        # in the environment still win.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # a short spin keeps an idle core awake between launches (CPU_SPIN_COUNT; docs/performance.md, "Threads
        # that sleep"): a choice for machines of one's own, so it is off unless set
        if spin := config.get("CPU_SPIN_COUNT"):
            os.environ.setdefault("GOMP_SPINCOUNT", str(spin))
        # the matmul plan's packed panel is an array on each thread's stack (up to 512 KiB, codegen/matmul.py):
        # worker threads get room for it whatever the platform's default thread stack is
        os.environ.setdefault("OMP_STACKSIZE", "4M")
        self._queue: CPUQueue | None = None  # made by the first batch queued (`queue`)
        allocator = CPUAllocator()
        allocator.settle = self.settle
        super().__init__(name, allocator, CPUCompiler(), CPUProgram)
        cores = device_cores(name, self.threads)
        self.binding = CoreBinding(self, cores) if cores is not None else None

    def queue(self) -> CPUQueue | None:
        """The launch queue batches of single-threaded kernels go to (queue.py); None: they run on the calling
        thread (CPU_ASYNC=0, virtual devices)."""
        if not config.get("CPU_ASYNC"):
            return None
        if self._queue is None or not self._queue.alive:
            self._queue = queue_for(self)
        return self._queue

    def settle(self) -> None:
        """Wait for what this device's queue holds (before the memory is touched or a kernel runs here)."""
        if (q := self._queue) is not None and q.busy:
            q.wait()

    def synchronize(self) -> None:
        self.settle()

    def load(self, lib: bytes) -> ctypes.CDLL:
        return load_shared(lib)  # loaded once per distinct binary

    def self_test(self) -> str:
        return run_smoke(self, SMOKE)

