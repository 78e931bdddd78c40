"""interop: a tensor's memory shared with numpy, torch and any DLPack library (docs/interop.md).

`np.asarray(t)` (`__array__`), `np.from_dlpack(t)` / `torch.from_dlpack(t)` (`__dlpack__`) and
`Tensor.from_dlpack(x)` share memory instead of copying where it can be shared: a CPU tensor whose storage it
reads whole and in order, or a C-contiguous, writable, aligned host array going to the CPU. Where it cannot (a
transposed or sliced view, a device whose memory is not the host's, a read-only or strided array, a jitted
function's output, whose memory that function's next call overwrites), the data is copied, and `copy=False`
raises CopyRequiredError naming why. `copy=True` always copies. `ndarray op Tensor` is a Tensor:
`__array_ufunc__ = None` makes numpy hand every operator to the Tensor's reflected one (and a ufunc called on a
Tensor, `np.exp(t)`, raise TypeError: call the Tensor's method).

Shared memory is the same bytes on both sides. A write into the Tensor's storage (`assign`, `t[i] = v`) is seen
through an exported array; a write through the array is seen by the Tensor's next read, and by a lazy value
built from it before the write but computed after (Tolk's eager-semantics bookkeeping sees only its own writes).
An exported array keeps the storage alive (the allocator does not hand it out again while the array lives).
"""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.engine import buffers as storage
from tolk_core.engine.run import capturing
from tolk_core.errors import CopyRequiredError
from tolk_core.frontend.construction import resolve_device
from tolk_core.ir.dtype import dtypes
from tolk_core.runtime import Buffer
from tolk_core.schedule import placements

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

_DLPACK_CPU = 1  # DLDeviceType kDLCPU: what every export is (the memory handed out is the host's)


def _shared_view(mv: memoryview, owner: Buffer, shape: tuple[int, ...], np_dtype: np.dtype) -> np.ndarray:
    """An array over host memory `mv` that keeps `owner` alive while it lives: freed, the Buffer would give its
    memory back to the allocator's cache, which hands it to the next allocation."""
    holder = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    holder.tolk_buffer = owner  # type: ignore[attr-defined]  # ctypes arrays take attributes: the pin
    return np.frombuffer(memoryview(holder), np_dtype).reshape(shape)


def _refusal(action: str, why: str) -> CopyRequiredError:
    return CopyRequiredError(f"{action} without a copy (copy=False) is not possible: {why}. Pass copy=None to "
                             "copy where needed, or copy=True")


class InteropMixin:
    """`__array__`, `__dlpack__`, `__dlpack_device__`, `Tensor.from_dlpack` (see the module docstring)."""

    __array_ufunc__ = None

    def _host_array(self: Tensor, copy: bool | None, action: str) -> np.ndarray:
        """This tensor's data as a numpy array: shared where it can be (copy None or False), else a copy
        (copy=False: CopyRequiredError)."""
        if copy:
            return self.numpy()
        if getattr(self, "_read_guard", None) is not None:
            why = "this Tensor is a jitted function's output, whose memory the function's next call overwrites"
        else:
            with self._reading():
                held = storage.host_memory(self.uop)
            if held is not None:
                return _shared_view(*held, self.shape, dtypes.to_np(self.dtype))
            why = (f"{self.device}'s memory is not the host's" if storage.base_buffer(self.uop) is not None else
                   "this Tensor views its storage in part or out of order (a slice, a transpose): take "
                   ".contiguous() first")
        if copy is False:
            raise _refusal(action, why)
        return self.numpy()

    def __array__(self: Tensor, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self._host_array(copy, "np.asarray(tensor)")
        if dtype is None or np.dtype(dtype) == out.dtype:
            return out
        if copy is False:
            raise _refusal("np.asarray(tensor)", f"converting {out.dtype} to {np.dtype(dtype)} makes new data")
        return out.astype(dtype)

    def __dlpack__(self: Tensor, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of this tensor's data in host memory (numpy's exporter over the shared array)."""
        arr = self._host_array(copy, "__dlpack__")
        return arr.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DLPACK_CPU, 0)

    @classmethod
    def from_dlpack(cls: type[Tensor], obj: Any, device: str | None = None, copy: bool | None = None) -> Tensor:
        """A Tensor of DLPack-exporting host data `obj` (a numpy array, a CPU torch tensor, a Tensor) on
        `device` (None: the default), sharing its memory where it can be shared (see the module docstring)."""
        arr = np.from_dlpack(obj)
        dev = resolve_device(device)
        if copy is not True:
            why = ("the array is read-only (Tolk may write into its storage)" if not arr.flags.writeable else
                   "the array is not C-contiguous" if not arr.flags.c_contiguous else
                   "the array's elements are not aligned" if not arr.flags.aligned else
                   "a jitted function is capturing: the capture must upload its argument on every call"
                   if capturing() else None)
            dt = dtypes.from_np(arr.dtype)
            if why is None and (u := storage.adopt_host(arr, dt, dev)) is not None:
                base = storage.base_buffer(u)
                assert base is not None  # adopt_host gives a view of new storage
                placements.seed_input(base)
                return cls(u, dev)
            if copy is False:
                raise _refusal(f"Tensor.from_dlpack onto {dev}", why or f"{dev}'s memory is not the host's")
        # a copy: the constructor uploads (and, inside a capture, records the upload)
        return cls(obj if isinstance(obj, np.ndarray) else arr, dev)
