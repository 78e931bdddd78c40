"""EXAMPLE runtime: numpy host memory, C compiled by core's helper, kernels called through ctypes, and a Graph
that builds each launch's ctypes arguments once and replays the batch in one loop."""
from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tolk_core.render.ccompile import compile_c, load_shared
from tolk_core.runtime import Allocator, CompiledDevice, Compiler, Graph, Launch, Program, run_smoke
from tolk_example_device.plugin import compiler_name

FLAGS = ["-O2", "-fvisibility=hidden"]


class ExampleAllocator(Allocator):
    """A handle is a 1-D uint8 numpy array (its memory is the device memory); views are slices of it."""

    def _alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        handle[:] = np.frombuffer(src, np.uint8)

    def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
        np.frombuffer(dest, np.uint8)[:] = handle

    def offset(self, handle: np.ndarray, byte_offset: int, nbytes: int) -> np.ndarray:
        return handle[byte_offset:byte_offset + nbytes]


class ExampleCompiler(Compiler):
    """C -> shared object with core's `compile_c`; usable without an opened device."""
    kind = "example-c"

    def __init__(self) -> None:
        super().__init__()
        self.cc = compiler_name()

    def compile(self, src: str) -> bytes:
        return compile_c(src, self.cc, FLAGS)

    def identity(self) -> str:
        import subprocess
        ver = subprocess.run([self.cc, "--version"], capture_output=True, text=True).stdout.partition("\n")[0]
        return f"cc={self.cc} {ver} flags={' '.join(FLAGS)}"


def _args(bufs: Sequence[np.ndarray], vals: Sequence[int]) -> list[Any]:
    return [ctypes.c_void_p(b.ctypes.data) for b in bufs] + [ctypes.c_int32(v) for v in vals]


class ExampleProgram(Program):
    """A C function of the library; the kernel loops itself, so launch sizes are ignored."""

    def __init__(self, device: ExampleDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        try:
            self.fxn = getattr(device.load(lib), name)
        except AttributeError:
            raise ValueError(f"kernel {name!r} is not in the compiled library") from None
        self.fxn.restype = None

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        t0 = time.perf_counter()
        self.fxn(*_args(bufs, vals))
        return time.perf_counter() - t0 if wait else None


class ExampleGraph(Graph):
    """Replays the launches with ctypes arguments built once (rebuilt for a launch by `update`)."""

    def __init__(self, device: CompiledDevice, launches: Sequence[Launch]):
        super().__init__(device, launches)
        self._calls = [self._prepare(ln) for ln in self.launches]

    @staticmethod
    def _prepare(ln: Launch) -> tuple[Any, list[Any]]:
        return ln.program.fxn, _args(ln.bufs, ln.vals)

    def update(self, index: int, *, bufs: Sequence[Any] | None = None, vals: Sequence[int] | None = None) -> None:
        super().update(index, bufs=bufs, vals=vals)
        self._calls[index] = self._prepare(self.launches[index])

    def __call__(self, wait: bool = False) -> float | None:
        t0 = time.perf_counter()
        for fxn, args in self._calls:
            fxn(*args)
        return time.perf_counter() - t0 if wait else None


SMOKE = """
__attribute__((visibility("default")))
void tolk_smoke(float* restrict out, const float* restrict a, const float* restrict b, int n, int k) {
  for (int i = 0; i < n; i++) out[i] = a[i] * (float)k + b[i];
}
"""


class ExampleDevice(CompiledDevice):
    """The EXAMPLE device."""

    def __init__(self, name: str = "EXAMPLE"):
        super().__init__(name, ExampleAllocator(), ExampleCompiler(), ExampleProgram)

    def load(self, lib: bytes) -> ctypes.CDLL:
        return load_shared(lib)  # loaded once per distinct binary

    def self_test(self) -> str:
        return run_smoke(self, SMOKE)
