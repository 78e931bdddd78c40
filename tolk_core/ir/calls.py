"""The args that say what a CALL calls: vocabulary of the IR, built by the front end and read by the scheduler.

- `InlineCall(name)`: the arg of `CALL(body, *args)` for a function without its own compilation
  (`tolk_core.function`); prepare_rangeify replaces the call by its body.
- `KernelCode(...)`: the arg of the callee `SINK()` of `CALL(callee, *args)` for a kernel given as code
  (`tolk_core.custom_kernel`); the engine compiles and runs it on its own.
- `Composite(name, expand, slope, out_shape)`: the arg of `CALL(*xs)` for a function the front end keeps as one
  node (sigmoid, tanh, matmul); prepare_rangeify replaces the call by `expand(*xs)`, autograd differentiates it
  by `slope`.
- `KernelInfo(ops, nominal)`: the arg of a kernel's `CALL(kernel SINK, *buffers)` in a schedule's LINEAR: the
  tensor ops the kernel implements and their nominal operation count.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


@dataclass(frozen=True)
class InlineCall:
    """The arg of a CALL to a function without its own compilation (`is_inline_call`): `CALL(body, *args)`,
    the body reading its parameters as `PARAM` nodes of arg `(slot, shape)`: shape `(size,)` for storage
    (the argument's elements, flat), `()` for a scalar."""
    name: str


@dataclass(frozen=True)
class KernelCode:
    """A kernel given as code (a call compiled on its own): the arg of the callee `SINK()` of
    `CALL(callee, *args)`. `source` is one function in the device's dialect (C for CPU, OpenCL C for OPENCL)
    named `name`, taking one pointer per argument in order; `written[i]` says whether it writes argument i.
    `global_size` counts work groups of `local_size` items (None: the device chooses; loops on a CPU)."""
    source: str
    name: str
    written: tuple[bool, ...]
    global_size: tuple[int, int, int] = (1, 1, 1)
    local_size: tuple[int, int, int] | None = None


@dataclass(frozen=True, eq=False)
class Composite:
    """A function kept whole until prepare_rangeify: `CALL(*xs)` with this arg; `expand(*xs)` is its formula over
    the sources (the nodes prepare puts in its place), `slope(y, g)` the gradients reaching each source, in order
    (None where none does), when g reaches the call's value y (docs/training.md, "Activation gradients");
    `out_shape(xs)` the call's shape from its sources' (None: the first source's, an elementwise function's).
    The dtype is the CALL's own. One node per use instead of the formula's dozens keeps an eager step's graph
    and its walks small. One instance per function: equal and hashed by identity (UOp interning hashes the arg
    of every node it builds)."""
    name: str
    expand: Callable[..., UOp]
    slope: Callable[[UOp, UOp], tuple[UOp | None, ...]]
    out_shape: Callable[[tuple[UOp, ...]], tuple | None] | None = None

    def __repr__(self) -> str:
        return f"Composite({self.name})"


def is_composite(u: UOp) -> bool:
    """Whether `u` is a composite prepare_rangeify expands."""
    return u.op is Op.CALL and type(u.arg) is Composite


@dataclass(frozen=True)
class KernelInfo:
    """What a kernel implements: `ops`, its tensor-level operations counted by name in the order they are first
    computed ((("MUL", 2), ("ADD", 1), ("REDUCE_AXIS(ADD)", 1))), and `nominal`, the operations they stand for
    (`schedule/work.py` counts them; symbolic where a shape is). What the profiler reads (docs/performance.md,
    "Profiling"); kept out of the kernel AST, which keys the program caches."""
    ops: tuple[tuple[str, int], ...] = ()
    nominal: int | UOp = 0

    def ops_text(self) -> str:
        """`ops` as text: "MUL x2, ADD, REDUCE_AXIS(ADD)"."""
        return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in self.ops)

    def __repr__(self) -> str:
        return f"KernelInfo({self.ops_text() or '-'}; nominal {self.nominal})"


def is_inline_call(u: UOp) -> bool:
    """Whether `u` is a call prepare_rangeify replaces by its body."""
    return u.op is Op.CALL and isinstance(u.arg, InlineCall)


def is_code_call(u: UOp) -> bool:
    """Whether `u` calls a kernel given as code."""
    return u.op is Op.CALL and isinstance(u.src[0].arg, KernelCode)
