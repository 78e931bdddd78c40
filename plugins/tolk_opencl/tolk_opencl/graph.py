"""OpenCLGraph: "pre-bound replay". One cl.Kernel per recorded launch with its arguments set once at build;
replay enqueues them in order on the device's in-order queue, and `update` resets only the arguments that
change (graph inputs, values).

`cl_khr_command_buffer` is not used: on PoCL 3.1 it is no faster than pre-bound enqueue, has no mutable
dispatch, and gives wrong results when recorded commands share a kernel object (feasibility notes, probe 1).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from tolk_core.runtime import Graph, Launch


class OpenCLGraph(Graph):
    """See the module docstring."""

    def __init__(self, device: Any, launches: Sequence[Launch]):
        super().__init__(device, launches)
        self.queue = device.queue
        self._enqueue: list[tuple[cl.Kernel, tuple[int, ...], tuple[int, ...] | None]] = []
        for ln in self.launches:
            kernel = cl.Kernel(device.load(ln.program.lib), ln.program.name)
            self._set_args(kernel, 0, ln.bufs)
            self._set_args(kernel, len(ln.bufs), [np.int32(v) for v in ln.vals])
            if ln.local_size is None:
                gws, lws = tuple(ln.global_size), None
            else:
                gws = tuple(g * lc for g, lc in zip(ln.global_size, ln.local_size, strict=True))
                lws = tuple(ln.local_size)
            self._enqueue.append((kernel, gws, lws))

    @staticmethod
    def _set_args(kernel: cl.Kernel, first: int, args: Sequence[Any]) -> None:
        for j, a in enumerate(args):
            kernel.set_arg(first + j, a)

    def update(self, index: int, *, bufs: Sequence[Any] | None = None, vals: Sequence[int] | None = None) -> None:
        old = self.launches[index]
        kernel = self._enqueue[index][0]
        if bufs is not None:
            for j, (was, now) in enumerate(zip(old.bufs, bufs, strict=True)):
                if was is not now:
                    kernel.set_arg(j, now)
        if vals is not None:
            for j, (was, now) in enumerate(zip(old.vals, vals, strict=True)):
                if was != now:
                    kernel.set_arg(len(old.bufs) + j, np.int32(now))
        super().update(index, bufs=bufs, vals=vals)

    def __call__(self, wait: bool = False) -> float | None:
        t0 = time.perf_counter()
        for kernel, gws, lws in self._enqueue:
            cl.enqueue_nd_range_kernel(self.queue, kernel, gws, lws)
        if wait:
            self.queue.finish()
            return time.perf_counter() - t0
        return None
