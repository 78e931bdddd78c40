"""CPUGraph: a batch of kernel launches replayed by one generated C driver function (one native call).

The driver calls each launch's already loaded kernel through its address:

    void tolk_graph_<digest>(void** b, const int* v, void** f) { ((void (*)(void*, void*))f[0])(b[0], b[1]); ... }

`b` is a pointer table (one entry per buffer argument of every launch), `v` the launches' int arguments and
`f` the kernels' addresses. All three are data read on every call, patched in place when an input changes
(`update`); no address is baked into the code, so the driver is keyed by its source alone (the launches'
signatures) and shared through the compile cache. The unit holds the driver only: the kernels were compiled
before the graph was built, and building it compiles none of them again.

A submitted replay (`submit`: an eager realize's) of kernels that start no OpenMP team goes to the device's
launch queue (queue.py) and returns at once: the tables are copied for it and its buffers held until it ran.
A call (a JIT's replay, a timed one), a replay of kernels that start teams and one touching memory shared with
numpy or torch wait for the queue and run on the calling thread. (A JIT's step has no Python of its own to
overlap with its kernels: handed to another thread, it only waited for the hand-over.)
"""
from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Sequence
from typing import Any

from tolk_core.runtime import Graph, Launch
from tolk_cpu import teams
from tolk_cpu.binding import CoreBinding, launch
from tolk_cpu.runtime import CPUDevice, CPUProgram


class CPUGraph(Graph):
    """See the module docstring."""

    device: CPUDevice

    def __init__(self, device: Any, launches: Sequence[Launch]):
        super().__init__(device, launches)
        self._buf_at: list[int] = []
        self._val_at: list[int] = []
        calls: list[str] = []
        pointers: list[int | None] = []
        nb = nv = 0
        # one pin of the launching thread for the whole batch where any launch starts a team (binding.py)
        self._binding: CoreBinding | None = None
        self._parallel = False  # some kernel starts an OpenMP team: never queued
        for ln in self.launches:
            self._buf_at.append(nb)
            self._val_at.append(nv)
            args = [f"b[{nb + j}]" for j in range(len(ln.bufs))] + [f"v[{nv + j}]" for j in range(len(ln.vals))]
            sig = ", ".join(["void*"] * len(ln.bufs) + ["int"] * len(ln.vals)) or "void"
            calls.append(f"  ((void (*)({sig}))f[{len(pointers)}])({', '.join(args)});")
            if not isinstance(ln.program, CPUProgram):
                raise TypeError(f"CPUGraph replays CPU programs; launch of {ln.program.name!r} holds a "
                                f"{type(ln.program).__name__}")
            pointers.append(ctypes.cast(ln.program.fxn, ctypes.c_void_p).value)
            self._binding = self._binding or ln.program.binding
            self._parallel = self._parallel or ln.program.parallel
            nb, nv = nb + len(ln.bufs), nv + len(ln.vals)
        body = "\n".join(calls)
        name = "tolk_graph_" + hashlib.sha256(body.encode()).hexdigest()[:12]
        module = device.renderer.render_module([f"void {name}(void** b, const int* v, void** f) {{\n{body}\n}}"])
        self._fn = getattr(device.load(device.compiler.compile_cached(module)), name)
        self._fn.restype = None
        self._fn_ptr: int = ctypes.cast(self._fn, ctypes.c_void_p).value or 0
        # the handles behind each pointer of the table, held by a queued replay until it ran
        self._held: list[Any] = [b for ln in self.launches for b in ln.bufs]
        self._bufs = (ctypes.c_void_p * max(nb, 1))(*[b.ptr for ln in self.launches for b in ln.bufs])
        self._nbufs = nb
        self._vals = (ctypes.c_int32 * max(nv, 1))(*[v for ln in self.launches for v in ln.vals])
        self._fns = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        self._args = tuple(ctypes.c_void_p(ctypes.addressof(t)) for t in (self._bufs, self._vals, self._fns))

    def update(self, index: int, *, bufs: Sequence[Any] | None = None, vals: Sequence[int] | None = None) -> None:
        super().update(index, bufs=bufs, vals=vals)
        if bufs is not None:
            at = self._buf_at[index]
            for j, b in enumerate(bufs):
                self._bufs[at + j] = b.ptr
            self._held[at:at + len(bufs)] = bufs
        if vals is not None:
            at = self._val_at[index]
            for j, v in enumerate(vals):
                self._vals[at + j] = v

    def rebind(self, bufs: Sequence[Any]) -> None:
        """Every launch's buffers at once (in launch order): the pointer table written in one slice assignment
        (an eager realize rebinds all of them before each replay). The table is what a replay reads;
        `self.launches` keeps the buffers the launches were built or last updated with."""
        if len(bufs) != self._nbufs:
            raise ValueError(f"rebind of {len(bufs)} buffers on a graph whose launches take {self._nbufs}")
        if bufs:
            self._bufs[:len(bufs)] = [b.ptr for b in bufs]
            self._held = list(bufs)  # (a queued replay holds a copy of the list)

    def submit(self) -> None:
        """To the device's launch queue (queue.py) where the kernels start no OpenMP team and touch no memory
        shared with numpy or torch, with copies of the tables and the bound handles held until it ran; else
        run now."""
        if self._parallel or (q := self.device.queue()) is None or self.device.allocator.touches_shared(self._held):
            self()
            return
        table = type(self._bufs).from_buffer_copy(self._bufs)
        vals = type(self._vals).from_buffer_copy(self._vals)
        q.push(self._fn_ptr, table, vals, self._fns, (self, tuple(self._held)))

    def __call__(self, wait: bool = False) -> float | None:
        self.device.settle()  # after what the queue holds
        if self._parallel:
            teams.prepare(self.device.threads)
        return launch(self._binding, self._fn, self._args, wait)
