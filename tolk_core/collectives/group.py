"""The ProcessGroup contract every collectives provider implements (docs/plugins.md, section 12).

A group is the set of processes (ranks 0..size-1) of one job; each rank calls the same operations in the same
order with arrays of the same dtype and shape (SPMD). The public methods here check and normalize the input
(any strides, numpy arrays or device Buffers), then call the provider's ``_allreduce`` ... ``_barrier`` with a
C-contiguous numpy array. When this rank's input is bad, the provider's ``_abort`` tells the other ranks, so that
every rank raises (CollectiveError) instead of the others waiting forever.

Meanings (checked against numpy by the conformance tier, tolk_core.testing.collectives):
  allreduce(x, op)      op in sum/max/min, elementwise over ranks in rank order, dtype kept (ints wrap; bool sum
                        is logical or)
  allgather(x)          numpy.stack of every rank's x: shape (size, *x.shape)
  broadcast(x, root)    root's x (the other ranks' x give the shape and dtype)
  reduce_scatter(x, op) allreduce(x, op) split along axis 0 into size equal parts; this rank's part
  barrier()             returns once every rank has entered it
"""
from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import numpy as np

from tolk_core.errors import ArgumentTypeError, CollectiveError, DTypeError, ShapeError, TolkError
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.plugins.specs import COLLECTIVE_OPS
from tolk_core.runtime.buffer import Buffer

REDUCE_OPS = ("sum", "max", "min")
DTYPES: tuple[str, ...] = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "float16", "bfloat16", "float32", "float64")
"""The numpy dtypes Tolk supports (tolk_core.ir.dtype), by name; bfloat16 is ml_dtypes'."""
_DTYPE_SET = frozenset(DTYPES)
_NAMES: dict[np.dtype, str] = {}


def dtype_name(dt: np.dtype) -> str:
    """`dt.name`, remembered: numpy computes the name in Python on every access (microseconds per call, which
    is a fair share of a small collective)."""
    name = _NAMES.get(dt)
    if name is None:
        name = _NAMES[dt] = dt.name
    return name


_UFUNCS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def reduce_arrays(arrays: list[np.ndarray], op: str, out: np.ndarray | None = None) -> np.ndarray:
    """The reference reduction: `op` folded over `arrays` in rank order, in their dtype (bool sum: logical or).
    With `out` (their shape and dtype; it may be arrays[0] itself, no other of them) the fold happens there and
    `out` is returned, else in a new array."""
    ufunc = _UFUNCS[op]
    if len(arrays) == 1:
        if out is None:
            return np.array(arrays[0], copy=True)
        if out is not arrays[0]:
            np.copyto(out, arrays[0])
        return out
    # the first pair straight into the result (one pass, not a copy then a fold); an explicit array, because a
    # ufunc of 0-d arrays returns a numpy scalar, which the next fold could not write into
    acc = ufunc(arrays[0], arrays[1], out=np.empty_like(arrays[0]) if out is None else out)
    for a in arrays[2:]:
        ufunc(acc, a, out=acc)
    return acc


def as_bytes(a: np.ndarray) -> memoryview:
    """The bytes of C-contiguous `a` as a flat memoryview (through uint8: buffers of ml_dtypes' bfloat16 do not
    export their own format)."""
    return a.reshape(-1).view(np.uint8).data


def to_host(x: Any, what: str) -> np.ndarray:
    """`x` as a C-contiguous numpy array: an ndarray (copied only when not contiguous) or a device Buffer
    (copied out through its allocator). Raises ArgumentTypeError or DTypeError naming `what`."""
    if type(x) is np.ndarray and x.flags.c_contiguous:  # the common case first: no isinstance against a union
        a = x
    elif isinstance(x, Buffer):
        a = np.empty(x.size, dtype=dtypes.to_np(x.dtype) if isinstance(x.dtype, DType) else np.dtype(x.dtype))
        x.copyout(as_bytes(a))
    elif isinstance(x, np.ndarray | np.generic):
        a = np.asarray(x)
        a = a if a.flags.c_contiguous else a.copy(order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    else:
        raise ArgumentTypeError(f"{what}: expected a numpy array or a device Buffer, got {type(x).__name__}")
    if dtype_name(a.dtype) not in _DTYPE_SET:
        raise DTypeError(f"{what}: dtype {a.dtype} is not one Tolk supports ({', '.join(DTYPES)})")
    return a


def deliver(result: np.ndarray, out: Any, what: str) -> np.ndarray:
    """Write `result` into `out` (an ndarray or a device Buffer of the same size and dtype) when given; returns
    the result as numpy."""
    if out is None:
        return result
    if isinstance(out, Buffer):
        out.copyin(as_bytes(result.copy(order="C")))
        return result
    if not isinstance(out, np.ndarray) or out.shape != result.shape or out.dtype != result.dtype:
        raise ShapeError(f"{what}: out must be an array of shape {result.shape} and dtype {result.dtype}, got "
                         f"{getattr(out, 'shape', type(out).__name__)} {getattr(out, 'dtype', '')}")
    out[...] = result
    return out


def out_array(out: Any, a: np.ndarray, what: str) -> np.ndarray | None:
    """The array an allreduce of `a` may write its result into directly: `out` itself when it is a writable
    C-contiguous ndarray of a's shape and dtype that is either `a` (in place) or shares no memory with it. None
    when the result must go through `deliver` instead (no out, a Buffer, a strided view, or an out that
    partly overlaps `a`: the provider would overwrite input it has yet to read). Raises ShapeError or
    ArgumentTypeError for an out that can never hold the result, before any rank moves data."""
    if type(out) is not np.ndarray:  # the common case (an ndarray) first: no isinstance against the Buffer ABC
        if out is None or isinstance(out, Buffer):
            return None
        if not isinstance(out, np.ndarray):
            raise ShapeError(f"{what}: out must be a numpy array or a device Buffer, got {type(out).__name__}")
    if out.shape != a.shape or out.dtype != a.dtype:
        raise ShapeError(f"{what}: out must be an array of shape {a.shape} and dtype {a.dtype}, got "
                         f"{out.shape} {out.dtype}")
    if not out.flags.writeable:
        raise ArgumentTypeError(f"{what}: out is read-only")
    if out is a:
        return out
    if not out.flags.c_contiguous or np.may_share_memory(out, a):
        return None
    return out


def describe(op: str, a: np.ndarray, extra: str = "") -> str:
    """How an operation is named in mismatch errors, and what every rank must agree on."""
    return f"{op}({dtype_name(a.dtype)}, shape={a.shape}{', ' + extra if extra else ''})"


class PersistentOp(abc.ABC):
    """A collective bound once to an input array (persistent operations: a JIT replays it). Each ``start()`` reads
    the input's current contents; ``wait()`` returns the output array (the same array on every replay)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Begin one replay with the input's current contents."""

    @abc.abstractmethod
    def wait(self) -> np.ndarray:
        """Finish the replay begun by start() and return the output array."""

    def close(self) -> None:  # noqa: B027  # optional: providers holding a request free it
        """Release the bound request."""


class ProcessGroup(abc.ABC):
    """One rank's handle on a group of `size` processes. Subclasses implement the underscore methods on
    C-contiguous numpy arrays and `_abort`; this class checks input and names errors.

    name: the provider (``TCP``, ``MPI``). ops: the operations offered (COLLECTIVE_OPS names). timeout: seconds
    an operation may wait for another rank."""

    name = "?"
    ops: tuple[str, ...] = COLLECTIVE_OPS
    persistent = False

    def __init__(self, rank: int, size: int, timeout: float):
        if not (isinstance(size, int) and size >= 1 and isinstance(rank, int) and 0 <= rank < size):
            raise CollectiveError(f"{self.name}: rank {rank!r} of size {size!r} is not a valid place in a group")
        self.rank, self.size, self.timeout = rank, size, timeout
        self.closed = False

    def __repr__(self) -> str:
        return f"<ProcessGroup {self.name} rank {self.rank}/{self.size}{' closed' if self.closed else ''}>"

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ public operations

    def allreduce(self, x: Any, op: str = "sum", *, out: Any = None) -> np.ndarray:
        """Elementwise `op` (sum, max, min) of every rank's `x`; every rank gets the result. With `out` (an array
        or Buffer of x's shape and dtype; `x` itself reduces in place) the result is written there and `out`
        returned: a contiguous ndarray is handed to the provider, which reduces into it with no copy and no
        new array (the cost of a large allreduce is otherwise a copy and fresh pages per call)."""
        if type(x) is np.ndarray and type(out) is np.ndarray and self._plain_into(x, op, out):
            self._allreduce_into(x, op, out)
            return out
        dst: list[np.ndarray | None] = [None]

        def check(a: np.ndarray) -> None:
            self._check_reduce(op, "allreduce")
            dst[0] = out_array(out, a, "allreduce")
        a = self._prepare(f"allreduce_{op}", x, check)
        if (into := dst[0]) is not None:
            self._allreduce_into(a, op, into)
            return into
        return deliver(self._allreduce(a, op), out, "allreduce")

    def allgather(self, x: Any, *, out: Any = None) -> np.ndarray:
        """Every rank's `x` stacked along a new first axis (shape (size, *x.shape))."""
        a = self._prepare("allgather", x)
        return deliver(self._allgather(a), out, "allgather")

    def broadcast(self, x: Any, root: int = 0, *, out: Any = None) -> np.ndarray:
        """Rank `root`'s `x` on every rank (the others' `x` give only shape and dtype)."""
        def check(a: np.ndarray) -> None:
            if not (isinstance(root, int) and 0 <= root < self.size):
                raise ArgumentTypeError(f"broadcast: root must be a rank in 0..{self.size - 1}, got {root!r}")
        a = self._prepare("broadcast", x, check)
        return deliver(self._broadcast(a, root), out, "broadcast")

    def reduce_scatter(self, x: Any, op: str = "sum", *, out: Any = None) -> np.ndarray:
        """allreduce(x, op) split along axis 0 into `size` equal parts; this rank's part."""
        def check(a: np.ndarray) -> None:
            self._check_reduce(op, "reduce_scatter")
            if x.ndim == 0 or x.shape[0] % self.size:
                raise ShapeError(f"reduce_scatter: the first axis of shape {tuple(x.shape)} must split into "
                                 f"{self.size} equal parts (one per rank)")
        a = self._prepare("reduce_scatter", x, check)
        return deliver(self._reduce_scatter(a, op), out, "reduce_scatter")

    def barrier(self) -> None:
        """Return once every rank has entered the barrier."""
        self._prepare("barrier", np.zeros(0, np.uint8))
        self._barrier()

    def allreduce_init(self, x: np.ndarray, op: str = "sum") -> PersistentOp:
        """A persistent allreduce bound to `x` (a C-contiguous, writable ndarray): each start() reads x's current
        contents. Raises CollectiveError when the provider offers no persistent operations."""
        def check(a: np.ndarray) -> None:
            if not self.persistent:
                raise CollectiveError(f"{self.name} offers no persistent operations (CollectiveSpec.persistent)")
            self._check_reduce(op, "allreduce_init")
            if not (isinstance(x, np.ndarray) and x.flags.c_contiguous and x.flags.writeable):
                raise ArgumentTypeError("allreduce_init: x must be a C-contiguous writable numpy array (it is bound "
                                        "once and read at every start)")
        self._prepare(f"allreduce_init_{op}", x, check)
        return self._allreduce_init(x, op)

    def close(self) -> None:
        """Leave the group (idempotent). Operations on a closed group raise CollectiveError."""
        self.closed = True

    # ------------------------------------------------------------ checks

    def _plain_into(self, x: np.ndarray, op: str, out: np.ndarray) -> bool:
        """Whether `allreduce(x, op, out=out)` of two ndarrays passes every check of the general path with `out`
        taken as it is (open group, an offered op, a supported dtype, x C-contiguous, out of x's shape and dtype,
        writable, C-contiguous, x itself or disjoint from it). A gradient's allreduce in a training loop calls
        this every step right after a large message has swept the caches, where each checking call costs
        microseconds (docs/performance.md, "Collectives"); anything else goes the general way, which raises the
        named errors."""
        if self.closed or op not in self._reduce_offered() or not x.flags.c_contiguous:
            return False
        flags = out.flags
        return (out.shape == x.shape and out.dtype == x.dtype and flags.writeable and flags.c_contiguous
                and dtype_name(x.dtype) in _DTYPE_SET and (out is x or not np.may_share_memory(out, x)))

    def _reduce_offered(self) -> frozenset[str]:
        """The reduce ops this group's allreduce offers (from `ops`), computed once."""
        got = self.__dict__.get("_offered")
        if got is None:
            got = self.__dict__["_offered"] = frozenset(o for o in REDUCE_OPS if f"allreduce_{o}" in self.ops)
        return got

    def _check_reduce(self, op: str, what: str) -> None:
        if op not in REDUCE_OPS:
            raise ArgumentTypeError(f"{what}: op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")
        if f"allreduce_{op}" not in self.ops:
            raise CollectiveError(f"{self.name} does not offer {what} with op {op!r} (CollectiveSpec.ops)")

    def _prepare(self, opname: str, x: Any, check: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
        """The C-contiguous host array of `x` after `check(it)`; on a bad input, the other ranks are told (`_abort`)
        before this rank raises."""
        if self.closed:
            raise CollectiveError(f"{self!r}: the group is closed (an earlier operation failed, or close() was "
                                  "called); join a new group")
        base = opname.split("_init")[0]
        base = "allreduce" if base.startswith("allreduce") else base
        try:
            if base not in ("allreduce", "reduce_scatter") and base not in self.ops:
                raise CollectiveError(f"{self.name} does not offer {base} (CollectiveSpec.ops)")
            a = to_host(x, opname)
            if check is not None:
                check(a)
        except TolkError as e:
            self._abort(f"rank {self.rank} of {self.size} failed {opname}: {type(e).__name__}: {e}")
            raise
        return a

    # ------------------------------------------------------------ what a provider implements

    @abc.abstractmethod
    def _allreduce(self, a: np.ndarray, op: str) -> np.ndarray: ...

    def _allreduce_into(self, a: np.ndarray, op: str, out: np.ndarray) -> None:
        """`_allreduce(a, op)` written into `out`: a writable C-contiguous array of a's shape and dtype that is
        either `a` itself or disjoint from it (`out_array`). This default copies; a provider overrides it to
        reduce into `out` directly."""
        np.copyto(out, self._allreduce(a, op))

    @abc.abstractmethod
    def _allgather(self, a: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _broadcast(self, a: np.ndarray, root: int) -> np.ndarray: ...

    @abc.abstractmethod
    def _reduce_scatter(self, a: np.ndarray, op: str) -> np.ndarray: ...

    @abc.abstractmethod
    def _barrier(self) -> None: ...

    @abc.abstractmethod
    def _abort(self, message: str) -> None:
        """This rank cannot take part in the next operation: make every other rank's next (or current) operation
        raise CollectiveError carrying `message`, and close this group. Must not raise."""

    def _allreduce_init(self, x: np.ndarray, op: str) -> PersistentOp:
        raise CollectiveError(f"{self.name} offers no persistent operations")
