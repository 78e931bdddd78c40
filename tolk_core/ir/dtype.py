"""Data types of the IR: scalars, vectors, pointers with address spaces, and the promotion lattice.

Contracts:
  * `DType` values are immutable and interned: constructing one with the fields of an existing one returns that
    object, so equal dtypes are the same object and compare and hash by identity, in C (UOp interning hashes
    a dtype on every node construction and drop; a Python-level `__hash__` was a tenth of building a graph).
  * bfloat16 converts to and from numpy through `ml_dtypes.bfloat16` (a real 2-byte float dtype, not
    uint16 storage).
  * `promote_types` follows the torch/tinygrad category rules documented in docs/ir.md.
"""
from __future__ import annotations

import builtins
import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tolk_core.errors import DTypeError, ScalarOverflowError


class AddrSpace(enum.Enum):
    """Where a pointer points: device global memory, workgroup-local memory, or registers."""
    GLOBAL = "global"
    LOCAL = "local"
    REG = "reg"


# (class, fields) -> the one DType with those fields (see the module contract)
_interned: dict[tuple, DType] = {}


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar or vector type. `kind` is 'b' bool, 'i' signed, 'u' unsigned, 'f' float, 'v' void;
    `count` is the number of vector lanes (1 for scalars); `itemsize` is bytes per lane. Interned: equal
    fields give the same object, so `==` and `hash` are identity's (object's, in C)."""
    name: str
    itemsize: int
    kind: str
    count: int = 1

    def __new__(cls, name: str, itemsize: int, kind: str, count: int = 1) -> DType:
        return _intern(cls, (name, itemsize, kind, count))

    def __reduce__(self) -> tuple:  # unpickled and copied through the constructor: the interned object
        return DType, (self.name, self.itemsize, self.kind, self.count)

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"

    def vec(self, n: int) -> DType:
        """This scalar type with `n` lanes (n == 1 gives the scalar)."""
        if self.count != 1:
            raise DTypeError(f"cannot vectorize {self!r}: it is already a vector")
        if n < 1:
            raise DTypeError(f"vector width must be >= 1, got {n}")
        return self if n == 1 else DType(self.name, self.itemsize, self.kind, n)

    def scalar(self) -> DType:
        """The lane type of a vector (itself for scalars)."""
        return self if self.count == 1 else DType(self.name, self.itemsize, self.kind)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to `size` elements of this type (-1: unknown size) in `addrspace`."""
        return PtrDType(self.name, self.itemsize, self.kind, 1, base=self, addrspace=addrspace, size=size)

    @property
    def nbytes(self) -> int:
        return self.itemsize * self.count


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
    """A pointer. `name`/`itemsize`/`kind` mirror the pointee `base`; `count` > 1 is a vector of pointers.
    Interned like every DType."""
    base: DType = None  # type: ignore[assignment]  # always given by DType.ptr
    addrspace: AddrSpace = AddrSpace.GLOBAL
    size: int = -1

    def __new__(cls, name: str, itemsize: int, kind: str, count: int = 1, base: DType | None = None,
                addrspace: AddrSpace = AddrSpace.GLOBAL, size: int = -1) -> PtrDType:
        return _intern(cls, (name, itemsize, kind, count, base, addrspace, size))  # type: ignore[return-value]

    def __reduce__(self) -> tuple:
        return PtrDType, (self.name, self.itemsize, self.kind, self.count, self.base, self.addrspace, self.size)

    def __repr__(self) -> str:
        args = [] if self.size == -1 else [str(self.size)]
        if self.addrspace is not AddrSpace.GLOBAL:
            args.append(f"AddrSpace.{self.addrspace.name}")
        r = f"{self.base!r}.ptr({', '.join(args)})"
        return r if self.count == 1 else f"{r}.vec({self.count})"

    def vec(self, n: int) -> PtrDType:
        if n < 1:
            raise DTypeError(f"vector width must be >= 1, got {n}")
        return PtrDType(self.name, self.itemsize, self.kind, n, base=self.base, addrspace=self.addrspace,
                        size=self.size)

    def scalar(self) -> PtrDType:
        return self if self.count == 1 else self.vec(1)


def _intern(cls: type, fields: tuple) -> DType:
    """The one `cls` with `fields` (made on first request; the dataclass `__init__` that follows `__new__` sets
    the same values again)."""
    key = (cls, *fields)
    if (known := _interned.get(key)) is None:
        known = _interned[key] = object.__new__(cls)
    return known


_NP_NAMES: dict[str, Any] = {
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "index": np.int64,
}


class dtypes:
    """Namespace of the dtype singletons and dtype queries. Inside it `bool` names the dtype, so the queries'
    annotations spell Python's type `builtins.bool`."""
    void = DType("void", 0, "v")
    bool = DType("bool", 1, "b")
    int8 = DType("int8", 1, "i")
    int16 = DType("int16", 2, "i")
    int32 = DType("int32", 4, "i")
    int64 = DType("int64", 8, "i")
    uint8 = DType("uint8", 1, "u")
    uint16 = DType("uint16", 2, "u")
    uint32 = DType("uint32", 4, "u")
    uint64 = DType("uint64", 8, "u")
    float16 = DType("float16", 2, "f")
    bfloat16 = DType("bfloat16", 2, "f")
    float32 = DType("float32", 4, "f")
    float64 = DType("float64", 8, "f")
    index = DType("index", 8, "i")  # addressing/symbolic integers; lowered to int32/int64 by codegen
    default_float = float32
    default_int = int32
    all: tuple[DType, ...] = (bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
                              float16, bfloat16, float32, float64)
    ints: tuple[DType, ...] = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
    floats: tuple[DType, ...] = (float16, bfloat16, float32, float64)

    @staticmethod
    def is_float(dt: DType) -> builtins.bool:
        return dt.kind == "f"

    @staticmethod
    def is_int(dt: DType) -> builtins.bool:
        """Signed or unsigned integer, including index; bool is not an int."""
        return dt.kind in ("i", "u")

    @staticmethod
    def is_unsigned(dt: DType) -> builtins.bool:
        return dt.kind == "u"

    @staticmethod
    def is_bool(dt: DType) -> builtins.bool:
        return dt.kind == "b"

    @staticmethod
    def min(dt: DType) -> int | float:
        """Smallest value of `dt` (ints exact, floats -inf, bool False)."""
        dt = dt.scalar()
        if dt.kind == "b":
            return False
        if dt.kind == "u":
            return 0
        if dt.kind == "i":
            return -(1 << (8 * dt.itemsize - 1))
        if dt.kind == "f":
            return -math.inf
        raise DTypeError(f"{dt!r} has no values")

    @staticmethod
    def max(dt: DType) -> int | float:
        """Largest value of `dt` (ints exact, floats inf, bool True)."""
        dt = dt.scalar()
        if dt.kind == "b":
            return True
        if dt.kind == "u":
            return (1 << (8 * dt.itemsize)) - 1
        if dt.kind == "i":
            return (1 << (8 * dt.itemsize - 1)) - 1
        if dt.kind == "f":
            return math.inf
        raise DTypeError(f"{dt!r} has no values")

    @staticmethod
    def from_py(x: Any) -> DType:
        """The dtype a Python scalar gets: bool -> bool, float -> default_float, int -> `int_dtype_of(x)`
        (default_int, or int64 / uint64 for a value default_int cannot hold)."""
        if isinstance(x, (bool, np.bool_)):
            return dtypes.bool
        if isinstance(x, (int, np.integer)):
            return dtypes.int_dtype_of(int(x), int(x))
        if isinstance(x, (float, np.floating)):
            return dtypes.default_float
        raise DTypeError(f"no dtype for Python value {x!r} of type {type(x).__name__}")

    @staticmethod
    def fits(dt: DType, value: int) -> builtins.bool:
        """Whether integer dtype `dt` holds the Python int `value` exactly."""
        return dtypes.min(dt) <= value <= dtypes.max(dt)

    @staticmethod
    def int_dtype_of(lo: int, hi: int) -> DType:
        """The dtype Python ints in [lo, hi] take when none is given: default_int (int32) when it holds them,
        else int64, else uint64 (all non-negative); beyond that ScalarOverflowError (docs/dtypes.md)."""
        for dt in (dtypes.default_int, dtypes.int64, dtypes.uint64):
            if dtypes.fits(dt, lo) and dtypes.fits(dt, hi):
                return dt
        bad = lo if lo < dtypes.min(dtypes.int64) else hi
        raise ScalarOverflowError(f"Python integer {bad} fits no integer dtype (int64 and uint64 are the widest): "
                                  "pass it as a float, or split it")

    @staticmethod
    def check_fits(dt: DType, value: Any) -> None:
        """Raise ScalarOverflowError when Python int `value` (not a bool) must become integer dtype `dt` and
        does not fit: numpy 2 raises OverflowError there rather than wrap (NEP 50)."""
        if dt.kind in ("i", "u") and isinstance(value, int) and not isinstance(value, builtins.bool) \
                and not dtypes.fits(dt, value):
            raise ScalarOverflowError(f"Python integer {value} is out of bounds for {dt.name} "
                                      f"([{dtypes.min(dt)}, {dtypes.max(dt)}]): pass dtype=int64 (or a float "
                                      f"dtype), or cast the tensor to a wider dtype first")

    @staticmethod
    def to_np(dt: DType) -> np.dtype:
        """The numpy dtype of a scalar dtype (bfloat16 -> ml_dtypes.bfloat16, index -> int64)."""
        if dt.count != 1 or isinstance(dt, PtrDType) or (dt.name not in _NP_NAMES and dt.name != "bfloat16"):
            raise DTypeError(f"{dt!r} has no numpy equivalent")
        if dt.name == "bfloat16":  # imported on first use: ml_dtypes costs ~5 ms of every process's start-up
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(_NP_NAMES[dt.name])

    @staticmethod
    def from_np(npdt: Any) -> DType:
        """The dtype of a numpy dtype (or scalar type)."""
        try:
            d = np.dtype(npdt)
        except TypeError:
            raise DTypeError(f"{npdt!r} is not a numpy dtype") from None
        if (r := _FROM_NP.get(d, dtypes.bfloat16 if d.name == "bfloat16" else None)) is None:
            raise DTypeError(f"numpy dtype {d} is not supported; supported: {', '.join(x.name for x in dtypes.all)}")
        return r

    @staticmethod
    def parse(x: Any) -> DType:
        """A DType from a DType, a numpy dtype or type, a Python type (bool/int/float) or a name such as
        "float32", "half", "bool". Raises DTypeError naming the accepted spellings otherwise."""
        if isinstance(x, DType):
            return x
        if isinstance(x, str):
            if (r := _ALIASES.get(x.lower())) is None:
                raise DTypeError(f"unknown dtype name {x!r}; known: {', '.join(sorted(_ALIASES))}")
            return r
        if x is bool:
            return dtypes.bool
        if x is int:
            return dtypes.default_int
        if x is float:
            return dtypes.default_float
        try:
            return dtypes.from_np(x)
        except DTypeError:
            raise DTypeError(f"cannot interpret {x!r} as a dtype: pass a tolk dtype, a numpy dtype or a name "
                             "such as 'float32'") from None


_FROM_NP: dict[np.dtype, DType] = {np.dtype(_NP_NAMES[d.name]): d for d in dtypes.all if d.name in _NP_NAMES}
_ALIASES: dict[str, DType] = {d.name: d for d in dtypes.all} | {
    "half": dtypes.float16, "float": dtypes.float32, "double": dtypes.float64, "bf16": dtypes.bfloat16,
    "char": dtypes.int8, "short": dtypes.int16, "int": dtypes.int32, "long": dtypes.int64,
    "uchar": dtypes.uint8, "ushort": dtypes.uint16, "uint": dtypes.uint32, "ulong": dtypes.uint64,
    "index": dtypes.index, "void": dtypes.void,
}
_SIGNED_BY_SIZE = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def promote_types(a: DType, b: DType) -> DType:
    """The common type of two operands (scalar types; vector lanes must agree and are kept).

    bool < ints < floats by category; inside a category the wider type wins. signed with unsigned gives the
    smallest signed type holding both (uint64 with a signed type gives int64: Tolk keeps integer maths
    integer, where numpy would give float64). float16 with bfloat16 gives float32. index wins over the
    other integer types.
    """
    if a == b:
        return a
    if a.count != b.count:
        raise DTypeError(f"cannot promote {a!r} with {b!r}: different vector widths")
    sa, sb = a.scalar(), b.scalar()
    r = _promote_scalar(sa, sb)
    return r if a.count == 1 else r.vec(a.count)


def _promote_scalar(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if a.kind == "v" or b.kind == "v" or isinstance(a, PtrDType) or isinstance(b, PtrDType):
        raise DTypeError(f"cannot promote {a!r} with {b!r}")
    order = "biuf"
    if a.kind == "b" or b.kind == "b":
        return b if a.kind == "b" else a
    if a == dtypes.index or b == dtypes.index:
        if a.kind == "f" or b.kind == "f":
            return a if a.kind == "f" else b
        return dtypes.index
    if a.kind == b.kind:
        if a.kind == "f" and a.itemsize == b.itemsize:  # float16 with bfloat16
            return dtypes.float32
        return a if a.itemsize > b.itemsize else b
    if a.kind == "f" or b.kind == "f":
        return a if a.kind == "f" else b
    s, u = (a, b) if order.index(a.kind) < order.index(b.kind) else (b, a)  # s signed, u unsigned
    if s.itemsize > u.itemsize:
        return s
    return _SIGNED_BY_SIZE.get(u.itemsize * 2, dtypes.int64)


def least_upper_dtype(*dts: DType) -> DType:
    """Promotion folded over all arguments."""
    if not dts:
        raise DTypeError("least_upper_dtype needs at least one dtype")
    r = dts[0]
    for d in dts[1:]:
        r = promote_types(r, d)
    return r


def weak_promote(dt: DType, x: Any) -> DType:
    """The result dtype of `dt` combined with a weakly typed Python scalar `x` (numpy 2's NEP 50): the scalar
    only changes the category (a float with a bool or int tensor gives default_float; an int with a bool tensor
    gives the int's own dtype, `dtypes.from_py`). An int that the result dtype cannot hold is the caller's to
    refuse (`dtypes.check_fits`)."""
    if isinstance(x, float) and dt.kind in "biu":
        return dtypes.default_float
    if isinstance(x, int) and not isinstance(x, bool) and dt.kind == "b":
        return dtypes.from_py(x)
    return dt


def sum_acc_dtype(dt: DType) -> DType:
    """The accumulator dtype of a sum or product over `dt`, numpy's on 64-bit platforms: bool and signed ints
    -> int64, unsigned ints -> uint64 (an int32 accumulator wraps silently past 2^31: a sum of a few large
    int32 values, or of 2^31 bytes), float16/bfloat16 -> float32, other floats unchanged."""
    if dt.kind in ("b", "i"):
        return dtypes.int64
    if dt.kind == "u":
        return dtypes.uint64
    if dt.kind == "f" and dt.itemsize < 4:
        return dtypes.float32
    return dt
