"""Buffer: typed device storage with lazy allocation and byte-offset views."""
from __future__ import annotations

from typing import Any

from tolk_core.counters import GlobalCounters
from tolk_core.errors import BufferSizeError
from tolk_core.runtime.allocator import Allocator


def _allocator_for(device: str) -> Allocator:
    from tolk_core.plugins import Device  # same layer; imported late to avoid a cycle
    return Device[device].allocator


def _as_bytes(mv: memoryview | bytes | bytearray | Any) -> memoryview:
    mv = memoryview(mv)
    if not mv.c_contiguous:
        raise BufferSizeError("host memory for a copy must be C-contiguous")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


class Buffer:
    """`size` elements of `dtype` (anything with ``.itemsize``) on `device`.

    Storage is allocated on first need (``allocate()``, ``handle``, ``copyin``) and given back to the
    allocator when the Buffer is garbage collected. A view (``base`` given, or ``view()``) shares its base's
    storage from byte ``offset`` and keeps the base alive.
    """

    _owned = False  # whether `_handle` is storage this Buffer allocated (and frees); a class default, so a
    # Buffer whose construction raised has it too

    def __init__(self, device: str, size: int, dtype: Any, *, base: Buffer | None = None, offset: int = 0,
                 allocator: Allocator | None = None):
        if size < 0:
            raise ValueError(f"buffer size must be >= 0, got {size}")
        self.device, self.size, self.dtype = device, size, dtype
        self.nbytes: int = size * dtype.itemsize
        if base is not None:
            if base.base is not None:  # views of views point at the root storage
                offset, base = offset + base.offset, base.base
            if offset < 0 or offset + self.nbytes > base.nbytes:
                raise BufferSizeError(f"view of {self.nbytes} bytes at offset {offset} does not fit in a buffer of "
                                      f"{base.nbytes} bytes")
            if base.device != device:
                raise ValueError(f"a view must be on its base's device ({base.device}), not {device}")
        elif offset:
            raise ValueError("offset is only meaningful for a view (give base=)")
        self.base: Buffer | None = base
        self.offset: int = offset
        self._handle: Any = None
        # the device's allocator, looked up on first use unless the caller holds it (`allocator`)
        self._allocator: Allocator | None = allocator

    def __repr__(self) -> str:
        name = getattr(self.dtype, "name", self.dtype)
        view = f" view of +{self.offset}" if self.base is not None else ""
        return f"<Buffer {self.device} {self.size}x{name}{view}{'' if self.is_allocated else ' unallocated'}>"

    @property
    def allocator(self) -> Allocator:
        if self._allocator is None:
            self._allocator = _allocator_for(self.device)
        return self._allocator

    @property
    def is_allocated(self) -> bool:
        return self._handle is not None

    def allocate(self) -> Buffer:
        """Allocate storage now (idempotent)."""
        if self._handle is not None:
            return self
        if self.base is not None:
            self._handle = self.allocator.offset(self.base.handle, self.offset, self.nbytes)
        else:
            self._handle = self.allocator.alloc(self.nbytes)
            self._owned = True
        return self

    def __del__(self) -> None:
        # the storage goes back to the allocator with its Buffer (a `__del__`, not `weakref.finalize`: an eager
        # step allocates every intermediate anew, and a finalizer costs several times the allocation)
        if self._owned:
            try:
                self.allocator.free(self._handle, self.nbytes)
            except Exception:  # interpreter shutdown: the allocator's module may already be gone
                pass

    def adopt(self, handle: Any) -> Buffer:
        """Use `handle` (memory owned elsewhere: `Allocator.adopt`) as this unallocated root buffer's storage;
        it is never given back to the allocator (it is not the allocator's)."""
        if self._handle is not None or self.base is not None:
            raise ValueError(f"{self!r} already has storage: only an unallocated root buffer adopts memory")
        self._handle = handle
        return self

    @property
    def handle(self) -> Any:
        """The allocator's opaque handle, allocating if needed."""
        if self._handle is None:
            self.allocate()
        return self._handle

    def copyin(self, src: memoryview | bytes | bytearray) -> Buffer:
        """Copy host bytes in; `src` must hold exactly ``nbytes`` bytes."""
        mv = _as_bytes(src)
        if mv.nbytes != self.nbytes:
            raise BufferSizeError(f"copyin: source has {mv.nbytes} bytes but the buffer {self!r} holds {self.nbytes}")
        self.allocator.copyin(self.handle, mv)
        GlobalCounters.bytes_copied += mv.nbytes
        return self

    def copyout(self, dest: memoryview | bytearray) -> memoryview:
        """Copy the buffer's bytes into `dest` (exactly ``nbytes`` bytes) and return it."""
        mv = memoryview(dest)
        raw = _as_bytes(mv)
        if raw.readonly:
            raise BufferSizeError("copyout: destination is read-only")
        if raw.nbytes != self.nbytes:
            raise BufferSizeError(f"copyout: destination has {raw.nbytes} bytes but the buffer {self!r} holds "
                                  f"{self.nbytes}")
        self.allocator.copyout(raw, self.handle)
        GlobalCounters.bytes_copied += raw.nbytes
        return mv

    def view(self, size: int, dtype: Any, offset: int) -> Buffer:
        """A view of `size` elements of `dtype` starting `offset` bytes into this buffer."""
        return Buffer(self.device, size, dtype, base=self, offset=offset)
