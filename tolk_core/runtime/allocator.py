"""Allocator: the memory contract a backend implements, with a free-list cache in the base."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any


class Allocator:
    """Allocates opaque device handles, with an LRU cache of freed handles keyed by size.

    Subclasses implement ``_alloc(nbytes)``, ``_free(handle, nbytes)``, ``copyin``, ``copyout`` and, when the
    backend supports sub-buffers, ``offset``. Callers use ``alloc``/``free``: a freed handle is kept (up to
    ``cache_limit`` bytes in all) and handed out again for the next request of the same size; the least
    recently freed sizes are released first. When ``_alloc`` raises MemoryError the cache is released and the
    allocation retried once.
    """

    cache_limit: int = 1 << 30
    # sub-buffer views (``offset``) must start on a multiple of this many bytes (OpenCL reports its own)
    offset_alignment: int = 1

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
            return self._alloc(nbytes)
        except MemoryError:
            self.free_cache()
            return self._alloc(nbytes)

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
    def _alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

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
