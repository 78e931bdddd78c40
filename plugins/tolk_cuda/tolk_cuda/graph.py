"""CUDAGraph: a batch replayed as one CUDA graph, built on the driver API through ctypes.

pycuda has no graph API and its Function exposes no CUfunction handle, so the batch's binaries are loaded a
second time through the driver (`cuModuleLoadData` in the context pycuda made current) and each launch becomes
a kernel node (`cuGraphAddKernelNode`, the v1 CUDA_KERNEL_NODE_PARAMS struct) depending on the node before it.
Kernel arguments live in ctypes storage this object owns (a `c_uint64` per buffer, a `c_int32` per value);
`update` rewrites that storage and marks the node, and the next call pushes the marked nodes with
`cuGraphExecKernelNodeSetParams` before one `cuGraphLaunch`.

Import-light: libcuda is loaded when a graph is built (`driver` is replaceable; the unit test uses a fake).
"""
from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from typing import Any

from tolk_core.runtime import Graph, Launch


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS (v1)."""
    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.POINTER(ctypes.c_void_p)), ("extra", ctypes.POINTER(ctypes.c_void_p))]


def load_driver() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def _dims(d: Sequence[int] | None) -> tuple[int, int, int]:
    x, y, z, *_ = (*(d or ()), 1, 1, 1)  # missing trailing dimensions are 1
    return x, y, z


class CUDAGraph(Graph):
    """See the module docstring."""

    driver: Callable[[], Any] = staticmethod(load_driver)

    def __init__(self, device: Any, launches: Sequence[Launch]):
        super().__init__(device, launches)
        self.cu = type(self).driver()
        self._modules: dict[bytes, ctypes.c_void_p] = {}
        self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p()
        self._check("cuGraphCreate", ctypes.byref(self.graph), 0)
        self.nodes: list[ctypes.c_void_p] = []
        self.params: list[KernelNodeParams] = []
        self._bufs: list[list[ctypes.c_uint64]] = []
        self._vals: list[list[ctypes.c_int32]] = []
        self._keep: list[Any] = []
        for ln in self.launches:
            bufs = [ctypes.c_uint64(int(b)) for b in ln.bufs]
            vals = [ctypes.c_int32(v) for v in ln.vals]
            ptrs = (ctypes.c_void_p * max(len(bufs) + len(vals), 1))(
                *[ctypes.addressof(x) for x in (*bufs, *vals)])
            gx, gy, gz = _dims(ln.global_size)
            bx, by, bz = _dims(ln.local_size)
            p = KernelNodeParams(self._function(ln.program.lib, ln.program.name), gx, gy, gz, bx, by, bz, 0,
                                 ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p)), None)
            node = ctypes.c_void_p()
            deps = (ctypes.c_void_p * 1)(self.nodes[-1]) if self.nodes else None
            self._check("cuGraphAddKernelNode", ctypes.byref(node), self.graph, deps, 1 if self.nodes else 0,
                        ctypes.byref(p))
            self.nodes.append(node)
            self.params.append(p)
            self._bufs.append(bufs)
            self._vals.append(vals)
            self._keep.append(ptrs)
        self._check("cuGraphInstantiateWithFlags", ctypes.byref(self.exec), self.graph, ctypes.c_ulonglong(0))
        self._dirty: set[int] = set()

    def _check(self, name: str, *args: Any) -> None:
        rc = getattr(self.cu, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed with CUDA error {rc}")

    def _function(self, lib: bytes, name: str) -> ctypes.c_void_p:
        if (mod := self._modules.get(lib)) is None:
            mod = self._modules[lib] = ctypes.c_void_p()
            self._check("cuModuleLoadData", ctypes.byref(mod), ctypes.c_char_p(lib))
        fn = ctypes.c_void_p()
        self._check("cuModuleGetFunction", ctypes.byref(fn), mod, name.encode())
        return fn

    def update(self, index: int, *, bufs: Sequence[Any] | None = None, vals: Sequence[int] | None = None) -> None:
        super().update(index, bufs=bufs, vals=vals)
        for buf_arg, b in zip(self._bufs[index], bufs or (), strict=False):
            buf_arg.value = int(b)
        for val_arg, v in zip(self._vals[index], vals or (), strict=False):
            val_arg.value = v
        self._dirty.add(index)

    def __call__(self, wait: bool = False) -> float | None:
        for i in self._dirty:
            self._check("cuGraphExecKernelNodeSetParams", self.exec, self.nodes[i], ctypes.byref(self.params[i]))
        self._dirty.clear()
        t0 = time.perf_counter()
        self._check("cuGraphLaunch", self.exec, None)
        if wait:
            self._check("cuStreamSynchronize", None)
            return time.perf_counter() - t0
        return None

    def __del__(self) -> None:
        try:
            if self.exec:
                self.cu.cuGraphExecDestroy(self.exec)
            if self.graph:
                self.cu.cuGraphDestroy(self.graph)
        except Exception:  # interpreter shutdown
            pass
