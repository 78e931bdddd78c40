"""Program (one compiled kernel, launchable) and Graph (a batch of launches replayed at once)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tolk_core.runtime.allocator import Allocator, copy_between

if TYPE_CHECKING:
    from tolk_core.runtime.device import CompiledDevice


class Program:
    """A kernel `name` in the compiled library `lib` on `device`.

    One lib may hold many kernels (one C translation unit, one OpenCL program); `name` selects the function.
    Devices cache loaded libraries, so building several Programs over one lib loads it once.

    ``prg(*bufs, global_size=, local_size=, vals=, wait=)`` launches it. `bufs` are allocator handles, `vals` are
    int32 scalars passed after the buffers. `global_size` is the number of work-groups per dimension (like a
    CUDA grid) and `local_size` the size of one group; backends that loop themselves (CPU) ignore both. With
    ``wait=True`` the call blocks until the kernel finished and returns its run time in seconds, else None.
    """

    def __init__(self, device: CompiledDevice, name: str, lib: bytes):
        self.device, self.name, self.lib = device, name, lib

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        raise NotImplementedError


class CopyProgram(Program):
    """A copy into `device` from another device's allocator `source`, launched like a kernel:
    ``prg(dest, src, vals=(nbytes,))`` copies by `copy_between` (docs/plugins.md, copies between devices). What
    a Graph whose spec says `supports_copy` receives for a copy in its batch; it may perform the copy its own
    way (the same bytes)."""

    def __init__(self, device: CompiledDevice, source: Allocator):
        super().__init__(device, "copy", b"")
        self.source = source

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        t0 = time.perf_counter()
        copy_between(self.device.allocator, bufs[0], self.source, bufs[1], vals[0])
        return time.perf_counter() - t0 if wait else None


@dataclass
class Launch:
    """One kernel launch of a Graph: the program, its buffer handles, values and sizes.

    `source` is the kernel's function text in the device's dialect when known (a graph may compile the batch's
    kernels again into one unit with a driver function); empty otherwise.

    A copy into the graph's device (only for a Graph whose spec says `supports_copy`, docs/plugins.md) is a
    launch of a `CopyProgram`: `bufs` are (destination, source) handles, `vals` holds the byte count.
    """
    program: Program
    bufs: list[Any]
    vals: list[int] = field(default_factory=list)
    global_size: tuple[int, ...] = (1, 1, 1)
    local_size: tuple[int, ...] | None = None
    source: str = ""


class Graph:
    """A batch of launches on one device, built once and replayed with one call.

    Contract: ``Graph(device, launches)`` captures the launches; ``update(i, bufs=, vals=)`` rebinds the
    buffers and/or values of launch `i` (a backend without in-place update may rebuild), ``rebind(bufs)`` the
    buffers of every launch at once; ``graph(wait=)``
    runs every launch in order, returning seconds when `wait`; ``submit()`` runs them too, where the device
    may finish them after it returned. Replay must give exactly the results of launching the programs one by
    one. This base replays them one by one; backends override it.
    """

    def __init__(self, device: CompiledDevice, launches: Sequence[Launch]):
        self.device = device
        self.launches = [Launch(ln.program, list(ln.bufs), list(ln.vals), tuple(ln.global_size),
                                None if ln.local_size is None else tuple(ln.local_size), ln.source)
                         for ln in launches]

    def update(self, index: int, *, bufs: Sequence[Any] | None = None, vals: Sequence[int] | None = None) -> None:
        ln = self.launches[index]
        if bufs is not None:
            if len(bufs) != len(ln.bufs):
                raise ValueError(f"launch {index} takes {len(ln.bufs)} buffers, got {len(bufs)}")
            ln.bufs = list(bufs)
        if vals is not None:
            if len(vals) != len(ln.vals):
                raise ValueError(f"launch {index} takes {len(ln.vals)} values, got {len(vals)}")
            ln.vals = list(vals)

    def rebind(self, bufs: Sequence[Any]) -> None:
        """Rebind every launch's buffers at once: `bufs` holds them in launch order (launch 0's, then launch
        1's, ...; as many as the launches take, else ValueError). What an eager step's realize does before each
        replay (every intermediate is new storage there); this base calls `update` for each launch whose
        buffers changed, and a backend overrides it where one bulk write is cheaper."""
        if len(bufs) != (want := sum(len(ln.bufs) for ln in self.launches)):
            raise ValueError(f"rebind of {len(bufs)} buffers on a graph whose launches take {want}")
        at = 0
        for i, ln in enumerate(self.launches):
            new = bufs[at:at + len(ln.bufs)]
            at += len(ln.bufs)
            if any(a is not b for a, b in zip(ln.bufs, new, strict=True)):
                self.update(i, bufs=new)

    def submit(self) -> None:
        """Run every launch in order, where the device may finish them after this returns: what an eager
        realize calls, whose caller goes on building its next graph meanwhile (the CPU plugin's launch queue,
        docs/performance.md "Launches that do not wait"). The device then makes whatever touches its memory
        wait for them (copies in and out, host views, launches made by themselves) and keeps the buffers bound
        alive until they ran. This base runs them now (`self()`)."""
        self()

    def __call__(self, wait: bool = False) -> float | None:
        total = 0.0
        for ln in self.launches:
            t = ln.program(*ln.bufs, global_size=ln.global_size, local_size=ln.local_size, vals=tuple(ln.vals),
                           wait=wait)
            total += t or 0.0
        return total if wait else None
