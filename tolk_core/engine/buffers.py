"""The binding between BUFFER UOps and runtime Buffers.

A BUFFER UOp (`UOp.new_buffer`) has arg = size and src = (UNIQUE(id), DEVICE(name)): the unique id makes
each storage distinct under hash-consing. Its runtime Buffer is created on first use and lives exactly as long as
the UOp does (a weak-key table), so dropping every Tensor that reads a storage frees the device memory.
"""
from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from tolk_core.engine import concurrent
from tolk_core.errors import ShapeError
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.runtime import Buffer, copy_between

_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
_RESHAPES = frozenset({Op.RESHAPE})


def new_buffer(device: str, size: int, dtype: DType) -> UOp:
    """A fresh BUFFER UOp of `size` elements; its device memory is allocated lazily."""
    return UOp.new_buffer(device, size, dtype)


def buffer_device(buf: UOp) -> str:
    return buf.src[1].arg


def runtime_buffer(buf: UOp, allocator: Any = None) -> Buffer:
    """The runtime Buffer behind a BUFFER UOp, created (unallocated) on first request; `allocator`, the
    device's allocator where the caller holds it, spares the Buffer looking its device up."""
    if (rb := _buffers.get(buf)) is None:
        rb = _buffers[buf] = Buffer(buffer_device(buf), buf.arg, buf.dtype, allocator=allocator)
    return rb


def from_numpy(arr: np.ndarray, dtype: DType, device: str) -> UOp:
    """Upload a C-contiguous array into new storage; the result is viewed in the array's shape."""
    buf = new_buffer(device, arr.size, dtype)
    if arr.size:
        runtime_buffer(buf).copyin(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)
    return view_as(buf, arr.shape)


def view_as(buf: UOp, shape: tuple[int, ...]) -> UOp:
    """A BUFFER viewed in `shape` (a RESHAPE, unless the shape is already the flat one). Plain sizes that fill the
    buffer are recorded on the node (every realized tensor's `shape` would otherwise work it out)."""
    shape = tuple(shape)
    if shape == (buf.arg,):
        return buf
    if all(type(s) is int for s in shape) and math.prod(shape) == buf.arg:
        return UOp.shaped(Op.RESHAPE, buf.dtype, (buf,), shape, shape)
    return UOp(Op.RESHAPE, buf.dtype, (buf,), shape)


def base_buffer(u: UOp) -> UOp | None:
    """The BUFFER that `u` reads whole and in order (u is the buffer or a RESHAPE of it), else None."""
    base = u.storage_base(_RESHAPES)
    return base if base.op is Op.BUFFER else None


def host_memory(u: UOp) -> tuple[memoryview, Buffer] | None:
    """The host memory of realized value `u` (its BUFFER read whole and in order) and the runtime Buffer
    holding it, where the device computes on host memory (`Allocator.host_memory`); None otherwise. It is
    handed to another library (an export): the allocator is told (`Allocator.mark_shared`)."""
    if (buf := base_buffer(u)) is None:
        return None
    concurrent.settle()  # launches still queued may write it
    rb = runtime_buffer(buf)
    if (mv := rb.allocator.host_memory(rb.handle)) is None:
        return None
    rb.allocator.mark_shared(rb.handle)
    return mv, rb


def adopt_host(arr: np.ndarray, dtype: DType, device: str) -> UOp | None:
    """New storage on `device` that is `arr`'s own memory (C-contiguous, writable, aligned), viewed in its
    shape, where the device's allocator can compute on host memory (`Allocator.adopt`); None where it cannot."""
    rb = Buffer(device, arr.size, dtype)
    if (handle := rb.allocator.adopt(arr)) is None:
        return None
    buf = new_buffer(device, arr.size, dtype)
    _buffers[buf] = rb.adopt(handle)
    return view_as(buf, arr.shape)


def to_numpy(u: UOp, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """Copy a realized value (a BUFFER viewed by reshapes) out to a new numpy array."""
    buf = base_buffer(u)
    if buf is None:
        raise ShapeError("internal: to_numpy of an unrealized value")
    out = np.empty(shape, dtypes.to_np(dtype))
    concurrent.settle()
    if math.prod(shape):
        runtime_buffer(buf).copyout(out.reshape(-1).view(np.uint8).data)
    return out


def copy_buffer(dest: UOp, src: UOp) -> str:
    """Copy BUFFER `src`'s bytes into BUFFER `dest` (same size, on another device) by `copy_handles`; returns
    how the copy went."""
    rs, rd = runtime_buffer(src), runtime_buffer(dest)
    return copy_handles(rd.allocator, rd.allocate().handle, rs.allocator, rs.allocate().handle, rs.nbytes)


def copy_handles(dest_alloc: Any, dest: Any, src_alloc: Any, src: Any, nbytes: int,
                 staging: np.ndarray | None = None) -> str:
    """`runtime.copy_between` (which way the copy went: "device", "direct", "host"), after the launches still
    queued have run: the source may be a value still being computed (engine/concurrent.py)."""
    if nbytes:
        concurrent.settle()
    return copy_between(dest_alloc, dest, src_alloc, src, nbytes, staging)
