"""Allocator: the memory contract a backend implements, with a free-list cache in the base."""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from tolk_core.counters import GlobalCounters
from tolk_core.errors import OutOfMemoryError

if TYPE_CHECKING:
    import numpy as np

# allocations below this many bytes skip the host-memory check (it reads /proc: ~20 us, too much per buffer)
HOST_CHECK_BYTES = 64 << 20


def format_bytes(n: int) -> str:
    """`n` bytes as a short size with its unit, the exact count after it (``4.0 GiB (4294967296 bytes)``)."""
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            break
        size /= 1024
    return f"{size:.1f} {unit} ({n} bytes)" if unit != "B" else f"{n} bytes"


def host_headroom() -> tuple[int, str] | None:
    """The most bytes the host can still give this process, and what sets that: the memory available
    (MemAvailable + SwapFree) or, when lower, the address space left under the process's limit (``ulimit -v``).
    None where neither can be read (not Linux)."""
    limits: list[tuple[int, str]] = []
    try:
        with open("/proc/meminfo") as f:
            info = {k: int(v.split()[0]) * 1024 for k, _, v in (ln.partition(":") for ln in f)}
        limits.append((info["MemAvailable"] + info.get("SwapFree", 0), "the host's available memory "
                       "(MemAvailable + SwapFree)"))
    except (OSError, KeyError, ValueError):
        pass
    import resource  # deferred: only large allocations ask

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            limits.append((soft - used, "the address space left under this process's limit (ulimit -v)"))
        except (OSError, ValueError):
            pass
    return min(limits) if limits else None


class Allocator:
    """Allocates opaque device handles, with an LRU cache of freed handles keyed by size.

    Subclasses implement ``_alloc(nbytes)``, ``_free(handle, nbytes)``, ``copyin``, ``copyout`` and, when the
    backend supports sub-buffers, ``offset``. Callers use ``alloc``/``free``: a freed handle is kept (up to
    ``cache_limit`` bytes in all) and handed out again for the next request of the same size; the least
    recently freed sizes are released first.

    Before ``_alloc`` an allocation is checked against ``limits(nbytes)`` (what the device or host can hold at
    most; none by default): a size past one raises OutOfMemoryError naming the size, the device
    (``device_name``, set by CompiledDevice) and the limit, before the backend is asked: some (PoCL) abort
    the process on a failed allocation instead of reporting it. When ``_alloc`` raises MemoryError the cache is
    released and the allocation retried once; a second MemoryError becomes OutOfMemoryError.
    """

    cache_limit: int = 1 << 30
    # sub-buffer views (``offset``) must start on a multiple of this many bytes (OpenCL reports its own)
    offset_alignment: int = 1
    device_name: str = ""

    def __init__(self) -> None:
        self._cache: OrderedDict[int, list[Any]] = OrderedDict()
        self.cached_bytes = 0

    # --- what callers use
    def alloc(self, nbytes: int) -> Any:
        """A handle to at least `nbytes` bytes (contents undefined)."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        if (free := self._cache.get(nbytes)) is not None:
            handle = free.pop()
            if not free:
                del self._cache[nbytes]
            self.cached_bytes -= nbytes
            return handle
        try:
            self.check(nbytes)
            return self._alloc(nbytes)
        except MemoryError:  # the refused size too: the cache's handles may be what fills the device
            self.free_cache()
        self.check(nbytes)
        try:
            return self._alloc(nbytes)
        except OutOfMemoryError:
            raise
        except MemoryError as e:
            raise OutOfMemoryError(f"cannot allocate {format_bytes(nbytes)} on {self._where()}: the allocation "
                                   f"failed ({e}); free tensors no longer needed, or use smaller ones") from e

    def check(self, nbytes: int) -> None:
        """Raise OutOfMemoryError when `nbytes` exceed one of ``limits(nbytes)``."""
        for limit, what in self.limits(nbytes):
            if nbytes > limit:
                raise OutOfMemoryError(f"cannot allocate {format_bytes(nbytes)} on {self._where()}: more than "
                                       f"{what}, {format_bytes(max(limit, 0))}; use smaller tensors (or fewer at "
                                       "once), or a device with more memory")

    def _where(self) -> str:
        return self.device_name or type(self).__name__

    def free(self, handle: Any, nbytes: int) -> None:
        """Give `handle` back; it goes to the free-list cache (released for real when the cache is full)."""
        if self.cache_limit <= 0 or nbytes > self.cache_limit:
            self._free(handle, nbytes)
            return
        self._cache.setdefault(nbytes, []).append(handle)
        self._cache.move_to_end(nbytes)
        self.cached_bytes += nbytes
        while self.cached_bytes > self.cache_limit:
            size, handles = next(iter(self._cache.items()))
            self._free(handles.pop(0), size)
            self.cached_bytes -= size
            if not handles:
                del self._cache[size]

    def free_cache(self) -> None:
        """Release every cached handle."""
        for size, handles in self._cache.items():
            for h in handles:
                self._free(h, size)
        self._cache.clear()
        self.cached_bytes = 0

    # --- what backends implement
    def limits(self, nbytes: int) -> list[tuple[int, str]]:
        """The most bytes an allocation of `nbytes` may have here, each with what sets it (``"the device's
        largest allocation"``); none known by default. `nbytes` lets a backend skip costly checks for small
        sizes."""
        return []

    def _alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    # --- sharing host memory without a copy (docs/interop.md); a device whose memory is not the host's has none
    def host_memory(self, handle: Any) -> memoryview | None:
        """The bytes of `handle` as writable host memory, where this device computes on host memory; None (the
        default) where it does not. What `__array__` / `__dlpack__` share instead of copying (`mark_shared`
        follows), and what a copy between two such devices reads and writes."""
        return None

    def mark_shared(self, handle: Any) -> None:
        """`handle`'s memory (from `host_memory`) was handed to another library (numpy, torch, DLPack), which reads
        and writes it without asking this allocator: a device that runs launches after its caller returned must
        run the ones touching it where they are asked for from now on (the CPU plugin's launch queue). Nothing by
        default."""

    # --- copies between devices (docs/plugins.md, copies between devices)
    def copy_from_peer(self, dest: Any, src_alloc: Allocator, src: Any, nbytes: int) -> bool:
        """Copy `nbytes` bytes from `src`, a handle of another device's allocator `src_alloc`, into `dest`, a
        handle of this one, by the device itself (no host copy), complete when this returns; True when it did.
        False (the default) where this device cannot copy from that one: the engine then copies host memory to
        host memory where both devices' memory is the host's (`host_memory`), else through the host
        (`copyout`, `copyin`). OpenCL offers it between buffers of one context."""
        return False

    def reads_peer(self, other: Allocator) -> bool:
        """Whether this device's kernels may take handles of `other` (another device's allocator) as arguments
        and read and write that memory in place (docs/plugins.md, copies between devices). False (the
        default): another device's data reaches a kernel here only through a copy. Host-memory devices whose
        kernels take host addresses say True for each other: an allreduce then folds every partial where it
        lies (docs/multi-device.md)."""
        return False

    def adopt(self, arr: Any) -> Any | None:
        """A handle for the memory of `arr` (a C-contiguous, writable, aligned numpy array), used in place: the
        memory stays `arr`'s, never freed nor cached by this allocator. None (the default) where this device
        cannot compute on host memory. What `Tensor.from_dlpack` shares instead of copying."""
        return None

    def _free(self, handle: Any, nbytes: int) -> None:
        pass

    def copyin(self, handle: Any, src: memoryview) -> None:
        """Copy host bytes `src` (C-contiguous, exactly the handle's size) into the handle."""
        raise NotImplementedError

    def copyout(self, dest: memoryview, handle: Any) -> None:
        """Copy the handle's bytes into host memory `dest`; complete when this returns."""
        raise NotImplementedError

    def offset(self, handle: Any, byte_offset: int, nbytes: int) -> Any:
        """A view handle on `nbytes` bytes of `handle` from `byte_offset`; optional per backend."""
        raise NotImplementedError(f"{type(self).__name__} does not support buffer views")


def copy_between(dest_alloc: Allocator, dest: Any, src_alloc: Allocator, src: Any, nbytes: int,
                 staging: np.ndarray | None = None) -> str:
    """Copy `nbytes` from handle `src` (of `src_alloc`) to handle `dest` (of `dest_alloc`, another device's),
    the first way that applies (docs/plugins.md, copies between devices), and return which:

    - "device": the destination's device copies it itself (`Allocator.copy_from_peer`: OpenCL buffers of one
      context), counted in `GlobalCounters.copies_device`;
    - "direct": both devices' memory is host memory (`Allocator.host_memory`: virtual CPU devices), one
      memcpy, counted in `GlobalCounters.copies_direct`;
    - "host": through the host: read out of the source's memory into the destination's (straight from or
      into host memory where one side is host memory), else through `staging` (or a new host array)."""
    if not nbytes:
        return "direct"
    if dest_alloc.copy_from_peer(dest, src_alloc, src, nbytes):
        GlobalCounters.copies_device += 1
        return "device"
    smv, dmv = src_alloc.host_memory(src), dest_alloc.host_memory(dest)
    if smv is not None and dmv is not None:
        dmv[:nbytes] = smv[:nbytes]
        GlobalCounters.copies_direct += 1
        return "direct"
    if smv is not None:
        dest_alloc.copyin(dest, smv[:nbytes])
    elif dmv is not None:
        src_alloc.copyout(dmv[:nbytes], src)
    else:
        import numpy  # deferred: the plugin registry imports this module and must not load numpy (its probes)
        host = staging if staging is not None else numpy.empty(nbytes, numpy.uint8)
        src_alloc.copyout(host.data, src)
        dest_alloc.copyin(dest, host.data)
    return "host"
