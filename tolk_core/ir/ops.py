"""The op set of every IR level, the groups patterns use, and the Python semantics of the ALU ops.

Declaration order of `Op` is meaningful: it is the comparison and tie-break order (toposort, listings).

Integer semantics are C's: IDIV truncates toward zero and MOD takes the sign of the dividend, so
`a == (a // b) * b + a % b` in the IR for every sign. The front end implements numpy's floor `//`/`%`
with an explicit fix-up on top of these.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

from tolk_core.ir.dtype import DType, dtypes


class Op(enum.IntEnum):
    # tensor level
    BUFFER = enum.auto(); PARAM = enum.auto(); CONST = enum.auto(); DEFINE_VAR = enum.auto()  # noqa: E702
    BIND = enum.auto(); DEVICE = enum.auto(); UNIQUE = enum.auto()  # noqa: E702
    RESHAPE = enum.auto(); PERMUTE = enum.auto(); EXPAND = enum.auto(); PAD = enum.auto()  # noqa: E702
    SHRINK = enum.auto(); FLIP = enum.auto()  # noqa: E702
    CAST = enum.auto(); BITCAST = enum.auto(); REDUCE_AXIS = enum.auto(); REDUCE = enum.auto()  # noqa: E702
    STORE = enum.auto(); AFTER = enum.auto(); COPY = enum.auto()  # noqa: E702
    CONTIGUOUS = enum.auto(); DETACH = enum.auto(); CONTIGUOUS_BACKWARD = enum.auto(); CALL = enum.auto()  # noqa: E702
    SINK = enum.auto(); NOOP = enum.auto(); ASSIGN = enum.auto()  # noqa: E702
    # kernel level
    RANGE = enum.auto(); END = enum.auto(); INDEX = enum.auto(); LOAD = enum.auto(); IF = enum.auto()  # noqa: E702
    BARRIER = enum.auto(); DEFINE_LOCAL = enum.auto(); DEFINE_REG = enum.auto()  # noqa: E702
    SPECIAL = enum.auto(); VECTORIZE = enum.auto(); GEP = enum.auto()  # noqa: E702
    # ALU unary
    EXP2 = enum.auto(); LOG2 = enum.auto(); SIN = enum.auto(); COS = enum.auto(); SQRT = enum.auto()  # noqa: E702
    RECIPROCAL = enum.auto(); NEG = enum.auto(); TRUNC = enum.auto()  # noqa: E702
    # ALU binary
    ADD = enum.auto(); SUB = enum.auto(); MUL = enum.auto(); FDIV = enum.auto(); IDIV = enum.auto()  # noqa: E702
    MOD = enum.auto(); MAX = enum.auto(); CMPLT = enum.auto(); CMPNE = enum.auto()  # noqa: E702
    CMPEQ = enum.auto(); AND = enum.auto(); OR = enum.auto(); XOR = enum.auto(); SHL = enum.auto()  # noqa: E702
    SHR = enum.auto()
    # ALU ternary
    WHERE = enum.auto()
    # program level
    PROGRAM = enum.auto(); LINEAR = enum.auto(); CUSTOM_FUNCTION = enum.auto(); SLICE = enum.auto()  # noqa: E702
    # several devices (docs/multi-device.md): a value sharded over devices, and the fold of per-device partials;
    # both are rewritten away (schedule/multi.py, engine) before any per-device schedule
    MULTI = enum.auto(); ALLREDUCE = enum.auto()  # noqa: E702
    # tensor level, declared last so earlier ops keep their order: the integers 0..n-1 along one axis (arg n),
    # computed where read (rangeify lowers it to its index); one-hot gathers compare against it
    IOTA = enum.auto()

    def __repr__(self) -> str:
        return f"Op.{self.name}"


class AxisType(enum.Enum):
    """The kind of a RANGE: its arg is `(axis number, AxisType)`. The number names the loop variable (`ridx3`);
    the kind says what the range walks and which passes treat it how. A member is not equal to its value's
    string, so a range built with a string kind is a different node that no pass takes for a member (and the
    kernel spec rejects it); members print as `AxisType.LOOP`, the same text in every process."""
    LOOP = "loop"
    """An output axis of a kernel: one per axis of the stored value (rangeify's lowerer); the group plans of
    codegen's optimizer also make one for the strided share of the outputs each work item stores."""
    REDUCE = "reduce"
    """An axis a REDUCE folds over: one per reduced axis (rangeify's lowerer), and the partial-result and fold
    loops of codegen's group reductions."""
    LOCAL = "local"
    """An axis of a kernel-local array's fill, the Local value computed once per row (rangeify's lowerer), and
    the strided share of a cooperative fill of shared memory (codegen's row-group plan)."""
    LANE = "lane"
    """A placeholder over `factor` consecutive values of a split range, standing for all of them at once: codegen's
    upcast turns every value depending on it into vector lanes; it never becomes a loop."""
    PROBE = "probe"
    """One range per axis of a tensor value, built only to see which axes an index reaches (prepare's broadcast
    analysis); never part of a kernel."""
    VIEW = "view"
    """One range over the elements of a view, built only to read the view's offset into its storage (prepare's
    contiguous_view); never part of a kernel."""

    def __repr__(self) -> str:
        return f"AxisType.{self.name}"


def identity_element(op: Op, dt: DType) -> int | float | bool:
    """The value `x` of `dt`'s scalar type with `op(x, y) == y` for every y: what a reduction of nothing gives and
    what padding past a reduction's extent folds. ADD: 0 (False for bool), MUL: 1 (True), MAX: the type's
    minimum (-inf for floats); any other op raises ValueError."""
    dt = dt.scalar()
    if op is Op.ADD:
        return False if dtypes.is_bool(dt) else (0.0 if dtypes.is_float(dt) else 0)
    if op is Op.MUL:
        return True if dtypes.is_bool(dt) else (1.0 if dtypes.is_float(dt) else 1)
    if op is Op.MAX:
        return dtypes.min(dt)
    raise ValueError(f"{op.name} has no identity element")


class GroupOp:
    """Sets of ops that rules and passes match on."""
    Unary = frozenset({Op.EXP2, Op.LOG2, Op.SIN, Op.COS, Op.SQRT, Op.RECIPROCAL, Op.NEG, Op.TRUNC})
    Binary = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.FDIV, Op.IDIV, Op.MOD, Op.MAX, Op.CMPLT, Op.CMPNE,
                        Op.CMPEQ, Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR})
    Ternary = frozenset({Op.WHERE})
    ALU = Unary | Binary | Ternary
    Movement = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.PAD, Op.SHRINK, Op.FLIP})
    # what `UOp.storage_base` walks through, down to the node a view reads: movements rearrange the elements,
    # a BITCAST reinterprets their bytes, an AFTER is the storage in its state after some stores
    View = Movement | {Op.BITCAST}
    ViewOfState = View | {Op.AFTER}
    Commutative = frozenset({Op.ADD, Op.MUL, Op.MAX, Op.CMPNE, Op.CMPEQ, Op.AND, Op.OR, Op.XOR})
    Comparison = frozenset({Op.CMPLT, Op.CMPNE, Op.CMPEQ})
    Associative = frozenset({Op.ADD, Op.MUL, Op.AND, Op.OR, Op.MAX, Op.XOR})
    Idempotent = frozenset({Op.AND, Op.OR, Op.MAX})
    Tensor = frozenset({Op.BUFFER, Op.PARAM, Op.CONST, Op.DEFINE_VAR, Op.BIND, Op.DEVICE, Op.UNIQUE, Op.CAST,
                        Op.BITCAST, Op.REDUCE_AXIS, Op.REDUCE, Op.STORE, Op.AFTER, Op.COPY,
                        Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD, Op.CALL, Op.SINK, Op.NOOP,
                        Op.ASSIGN, Op.MULTI, Op.ALLREDUCE, Op.IOTA}) | Movement | ALU
    Kernel = frozenset({Op.RANGE, Op.END, Op.INDEX, Op.LOAD, Op.IF, Op.BARRIER, Op.DEFINE_LOCAL,
                        Op.DEFINE_REG, Op.SPECIAL, Op.VECTORIZE, Op.GEP, Op.STORE, Op.CONST, Op.DEFINE_VAR,
                        Op.PARAM, Op.SINK, Op.NOOP, Op.AFTER, Op.CAST, Op.BITCAST, Op.REDUCE, Op.BIND,
                        Op.CUSTOM_FUNCTION}) | ALU
    Program = frozenset({Op.PROGRAM, Op.LINEAR, Op.CUSTOM_FUNCTION, Op.SLICE, Op.CALL, Op.BUFFER, Op.PARAM,
                         Op.DEVICE, Op.UNIQUE, Op.BIND, Op.DEFINE_VAR, Op.CONST, Op.SINK, Op.COPY, Op.NOOP,
                         Op.AFTER})


def trunc_div(a: int, b: int) -> int:
    """C's integer `/`: the quotient rounded toward zero (Python's `//` rounds toward -inf); `b` is not 0."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _trunc_mod(a: int | float, b: int | float) -> int | float:
    """C's `%` on integers; fmod on floats (the renderers' MOD of a float: NaN for a zero divisor)."""
    if isinstance(a, float) or isinstance(b, float):
        return math.fmod(a, b) if b != 0 and math.isfinite(a) and b == b else math.nan
    return a - b * trunc_div(a, b)


def _fdiv(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _nan_max(a: Any, b: Any) -> Any:
    """MAX as the renderers compute it: NaN in either operand is the result (numpy's `maximum`)."""
    return b if a < b or b != b else a


# Python semantics of each ALU op on scalars; the result is then wrapped to the dtype by `exec_alu`.
python_alu: dict[Op, Callable[..., Any]] = {
    Op.EXP2: lambda x: math.inf if x > 1024 else 2.0 ** x, Op.LOG2: lambda x: math.log2(x) if x > 0 else
    (-math.inf if x == 0 else math.nan), Op.SIN: lambda x: math.sin(x) if math.isfinite(x) else math.nan,
    Op.COS: lambda x: math.cos(x) if math.isfinite(x) else math.nan,
    Op.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan, Op.RECIPROCAL: lambda x: _fdiv(1.0, x),
    Op.NEG: lambda x: (not x) if isinstance(x, bool) else -x, Op.TRUNC: lambda x: x if not math.isfinite(x) else
    float(math.trunc(x)),
    Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b, Op.FDIV: _fdiv,
    Op.IDIV: trunc_div, Op.MOD: _trunc_mod, Op.MAX: _nan_max,
    Op.CMPLT: lambda a, b: a < b, Op.CMPNE: lambda a, b: a != b, Op.CMPEQ: lambda a, b: a == b,
    Op.AND: lambda a, b: a & b, Op.OR: lambda a, b: a | b, Op.XOR: lambda a, b: a ^ b,
    Op.SHL: lambda a, b: a << b, Op.SHR: lambda a, b: a >> b,
    Op.WHERE: lambda c, a, b: a if c else b,
}


def truncate(dt: DType, v: Any) -> Any:
    """`v` converted to a value of scalar dtype `dt`: ints wrap two's complement, bool is truthiness,
    float16/float32 round through numpy."""
    k = dt.kind
    if k == "b":
        return bool(v)
    if k in ("i", "u"):
        v = int(v)
        bits = 8 * dt.itemsize
        v &= (1 << bits) - 1
        return v - (1 << bits) if k == "i" and v >= 1 << (bits - 1) else v
    if k == "f":
        v = float(v)
        if dt.itemsize == 8 or not math.isfinite(v):
            return v
        return float(dtypes.to_np(dt).type(v))
    raise TypeError(f"no values of {dt!r}")


def exec_alu(op: Op, dt: DType, operands: tuple[Any, ...]) -> Any:
    """The value of ALU `op` on Python scalars, as a value of result dtype `dt` (C semantics)."""
    return truncate(dt.scalar(), python_alu[op](*operands))
