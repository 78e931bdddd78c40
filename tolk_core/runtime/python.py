"""PYTHON: the reference device built into tolk-core. Slow, dependency-free (numpy only), always available.

Memory is host memory from numpy; a "binary" is the text written by `tolk_core.render.python` (checked by the
compiler, then parsed once per device); a launch interprets the kernel with numpy.

The kernel text format, one instruction per line (leading spaces are indentation only)::

    kernel NAME(b0:float32:w, b1:float32:r, $n)   buffers in slot order (w = written), then int variables
    vK = RANGE index SIZE                         open a loop; vK is its counter
    END vK                                        close loop vK
    vK = DEFINE_REG DTYPE OP                      an accumulator starting at OP's identity (ADD, MUL, MAX)
    ASSIGN OP vR X                                fold X over the loops opened since vR was defined into vR
    vK = LOAD DTYPE bS IDX [GATE]                 bS[IDX], or 0 where GATE is false
    STORE bS IDX X [GATE]                         bS[IDX] = X where GATE (if given)
    vK = OPNAME DTYPE A [B [C]]                   an ALU op or CAST/BITCAST of its operands

Operands are values ``vK``, buffers ``bS``, variables ``$name`` and constants ``DTYPE:VALUE``.

Semantics are the C renderers' (loops run in order, integer division truncates, ``MAX(a, b)`` is ``a < b || b != b ?
b : a``: NaN in either operand wins), but execution is vectorized: every loop is an axis of a numpy array, every
value an array broadcast over the loops it depends on, a reduction a numpy reduce over its loop axes, and a store
one fancy assignment (in loop order, so a later iteration's write wins). A kernel that reads, within one launch,
what it wrote in an earlier iteration is outside that model; Tolk's kernels never do. Indices are bounds-checked: an
out-of-range access raises instead of reading or writing memory it does not own.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tolk_core.errors import CompileError, TolkError
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op, identity_element
from tolk_core.runtime.allocator import Allocator
from tolk_core.runtime.compiler import Compiler
from tolk_core.runtime.device import CompiledDevice
from tolk_core.runtime.program import Program
from tolk_core.runtime.smoke import run_smoke


class KernelRuntimeError(TolkError):
    """A PYTHON kernel did something the reference refuses: an out-of-range index, an unknown op."""


# ---------------------------------------------------------------- parsing

_DTYPES: dict[str, DType] = {d.name: d for d in (*dtypes.all, dtypes.index)}


@dataclass(frozen=True)
class Instr:
    op: str                      # RANGE, END, DEFINE_REG, ASSIGN, LOAD, STORE, or an Op name
    dest: str | None
    dtype: DType | None
    operands: tuple[str, ...]

    @property
    def out(self) -> str:
        """The value this instruction defines; END, ASSIGN and STORE define none, so asking is a kernel error."""
        if self.dest is None:
            raise KernelRuntimeError(f"{self.op} {' '.join(self.operands)} defines no value")
        return self.dest

    @property
    def out_dtype(self) -> DType:
        """The dtype of the value this instruction defines (see `out`)."""
        if self.dtype is None:
            raise KernelRuntimeError(f"{self.op} {' '.join(self.operands)} defines no value")
        return self.dtype


@dataclass(frozen=True)
class Kernel:
    name: str
    buffers: tuple[tuple[int, DType], ...]   # (slot, element dtype) in argument order
    variables: tuple[str, ...]
    body: tuple[Instr, ...]


def _dtype(name: str, line: str) -> DType:
    if (dt := _DTYPES.get(name)) is None:
        raise CompileError(f"unknown dtype {name!r} in {line!r}", line)
    return dt


def parse_module(src: str) -> dict[str, Kernel]:
    """Every kernel of a module text by name; raises CompileError naming the offending line."""
    kernels: dict[str, Kernel] = {}
    for block in src.split("\nkernel ") if not src.startswith("kernel ") else ("\n" + src).split("\nkernel "):
        if not block.strip():
            continue
        head, *lines = block.strip().splitlines()
        name, sep, sig = head.partition("(")
        if not sep or not sig.endswith(")"):
            raise CompileError(f"bad kernel header {head!r}: expected 'kernel NAME(b0:float32:w, ...)'", src)
        bufs: list[tuple[int, DType]] = []
        variables: list[str] = []
        for p in filter(None, (x.strip() for x in sig[:-1].split(","))):
            if p.startswith("$"):
                variables.append(p[1:])
                continue
            slot, _, rest = p.partition(":")
            if not slot.startswith("b") or not slot[1:].isdigit():
                raise CompileError(f"bad parameter {p!r} in {head!r}", src)
            bufs.append((int(slot[1:]), _dtype(rest.partition(":")[0], head)))
        body = []
        for line in (x.strip() for x in lines):
            if not line:
                continue
            toks = line.split()
            if len(toks) >= 3 and toks[1] == "=":
                if len(toks) < 4:
                    raise CompileError(f"bad instruction {line!r}", src)
                dest, op, dt, operands = toks[0], toks[2], _dtype(toks[3], line), tuple(toks[4:])
            else:
                dest, op, dt, operands = None, toks[0], None, tuple(toks[1:])
            if op not in _KNOWN:
                raise CompileError(f"unknown op {op!r} in {line!r}", src)
            body.append(Instr(op, dest, dt, operands))
        kernels[name.strip()] = Kernel(name.strip(), tuple(bufs), tuple(variables), tuple(body))
    return kernels


# ---------------------------------------------------------------- numpy semantics of the ops

def _np(dt: DType) -> np.dtype:
    return dtypes.to_np(dt)


def _idiv(a: Any, b: Any) -> Any:
    q = np.floor_divide(a, b)
    return np.where((np.remainder(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)), q + 1, q)


_ALU: dict[str, Callable[..., Any]] = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "FDIV": np.true_divide, "IDIV": _idiv, "MOD": np.fmod,
    "MAX": lambda a, b: np.where((a < b) | (b != b), b, a), "CMPLT": np.less, "CMPNE": np.not_equal,
    "CMPEQ": np.equal, "AND": np.bitwise_and, "OR": np.bitwise_or, "XOR": np.bitwise_xor,
    "SHL": np.left_shift, "SHR": np.right_shift, "WHERE": np.where,
    "EXP2": np.exp2, "LOG2": np.log2, "SIN": np.sin, "COS": np.cos, "SQRT": np.sqrt, "TRUNC": np.trunc,
    "RECIPROCAL": lambda x: np.true_divide(1, x),
    "NEG": lambda x: np.logical_not(x) if np.asarray(x).dtype == np.bool_ else np.negative(x),
}
_REDUCE = {"ADD": np.add, "MUL": np.multiply, "MAX": np.maximum}
_KNOWN = frozenset({"RANGE", "END", "DEFINE_REG", "ASSIGN", "LOAD", "STORE", "CAST", "BITCAST", *_ALU})
assert all(hasattr(Op, k) for k in _KNOWN)


def _const(tok: str) -> Any:
    name, _, text = tok.partition(":")
    dt = _DTYPES[name]
    return _np(dt).type(float(text) if dtypes.is_float(dt) else int(text))


# ---------------------------------------------------------------- the interpreter

class _Interpreter:
    """One launch of kernel `k`: every loop is an axis of the launch's arrays (`axis`), `sizes` the extents of
    the loops open now (1 for the others), `env` the values, buffers and variables by name. One method per
    instruction (`_STEPS`)."""

    def __init__(self, k: Kernel, bufs: Sequence[np.ndarray], vals: Sequence[int]):
        self.k = k
        ranges = [i.out for i in k.body if i.op == "RANGE"]
        self.ndim = len(ranges)
        self.axis = {r: a for a, r in enumerate(ranges)}
        self.env: dict[str, Any] = {f"b{slot}": b for (slot, _), b in zip(k.buffers, bufs, strict=True)}
        self.env.update({f"${v}": np.int64(x) for v, x in zip(k.variables, vals, strict=True)})
        self.open_loops: list[str] = []
        self.reg_depth: dict[str, int] = {}  # an accumulator: how many loops were open where it was defined
        self.reg_dtype: dict[str, DType] = {}
        self.sizes = [1] * self.ndim

    def run(self) -> None:
        with np.errstate(all="ignore"):
            for ins in self.k.body:
                _STEPS.get(ins.op, _Interpreter.alu)(self, ins)
        if self.open_loops:
            raise KernelRuntimeError(f"kernel {self.k.name}: loops {self.open_loops} are never closed")

    def val(self, tok: str) -> Any:
        return _const(tok) if ":" in tok else self.env[tok]

    def checked(self, buf: np.ndarray, idx: Any, gate: Any, what: str) -> Any:
        """`idx` as int64, after checking that every index a live lane (where `gate` holds) uses is in `buf`."""
        idx = np.asarray(idx, dtype=np.int64)
        live = idx
        if gate is not None:
            shape = np.broadcast_shapes(idx.shape, np.shape(gate))
            live = np.broadcast_to(idx, shape)[np.broadcast_to(gate, shape)]
        if live.size and (live.min() < 0 or live.max() >= buf.size):
            bad = int(live.min()) if live.min() < 0 else int(live.max())
            raise KernelRuntimeError(f"kernel {self.k.name}: {what} index {bad} out of range for a buffer of "
                                     f"{buf.size} elements")
        return idx

    def open_loop(self, ins: Instr) -> None:
        n, a = int(self.val(ins.operands[0])), self.axis[ins.out]
        self.sizes[a] = n
        counter_shape = [1] * self.ndim
        counter_shape[a] = n
        self.env[ins.out] = np.arange(n, dtype=np.int64).reshape(counter_shape)
        self.open_loops.append(ins.out)

    def close_loop(self, ins: Instr) -> None:
        loop = ins.operands[0]
        if not self.open_loops or self.open_loops[-1] != loop:
            raise KernelRuntimeError(f"kernel {self.k.name}: END {loop} does not close the innermost loop")
        self.open_loops.pop()
        self.sizes[self.axis[loop]] = 1

    def define_reg(self, ins: Instr) -> None:
        self.env[ins.out] = _np(ins.out_dtype).type(identity_element(Op[ins.operands[0]], ins.out_dtype))
        self.reg_depth[ins.out], self.reg_dtype[ins.out] = len(self.open_loops), ins.out_dtype

    def assign(self, ins: Instr) -> None:
        red, reg, x = ins.operands[0], ins.operands[1], self.val(ins.operands[2])
        axes = tuple(self.axis[r] for r in self.open_loops[self.reg_depth[reg]:])
        acc = self.env[reg]
        x = np.broadcast_to(x, np.broadcast_shapes(np.shape(x), tuple(
            self.sizes[i] if i in axes else 1 for i in range(self.ndim))))
        # `initial` makes a reduction over an empty loop give the identity (numpy refuses max of nothing)
        part = _REDUCE[red].reduce(x, axis=axes, keepdims=True, dtype=acc.dtype,
                                   initial=acc.dtype.type(identity_element(Op[red], self.reg_dtype[reg])))
        self.env[reg] = _REDUCE[red](acc, part).astype(acc.dtype, copy=False)

    def load(self, ins: Instr) -> None:
        ops = ins.operands
        buf = self.val(ops[0])
        gate = self.val(ops[2]) if len(ops) > 2 else None
        idx = self.checked(buf, self.val(ops[1]), gate, "load")
        if gate is None:
            self.env[ins.out] = buf[idx]
        elif buf.size == 0:
            self.env[ins.out] = np.zeros(np.broadcast_shapes(idx.shape, np.shape(gate)), buf.dtype)
        else:
            self.env[ins.out] = np.where(gate, buf[np.where(gate, idx, 0)], buf.dtype.type(0))

    def store(self, ins: Instr) -> None:
        ops = ins.operands
        buf, x = self.val(ops[0]), self.val(ops[2])
        gate = self.val(ops[3]) if len(ops) > 3 else None
        idx = self.checked(buf, self.val(ops[1]), gate, "store")
        shape = np.broadcast_shapes(tuple(self.sizes), idx.shape, np.shape(x), () if gate is None else np.shape(gate))
        idx, x = np.broadcast_to(idx, shape).ravel(), np.broadcast_to(x, shape).ravel()
        if gate is not None:
            mask = np.broadcast_to(gate, shape).ravel()
            idx, x = idx[mask], x[mask]
        buf[idx] = x

    def cast(self, ins: Instr) -> None:
        self.env[ins.out] = np.asarray(self.val(ins.operands[0])).astype(_np(ins.out_dtype))

    def bitcast(self, ins: Instr) -> None:
        self.env[ins.out] = np.ascontiguousarray(self.val(ins.operands[0])).view(_np(ins.out_dtype))

    def alu(self, ins: Instr) -> None:
        out = _ALU[ins.op](*(self.val(t) for t in ins.operands))
        self.env[ins.out] = np.asarray(out).astype(_np(ins.out_dtype), copy=False)


_STEPS: dict[str, Callable[[_Interpreter, Instr], None]] = {
    "RANGE": _Interpreter.open_loop, "END": _Interpreter.close_loop, "DEFINE_REG": _Interpreter.define_reg,
    "ASSIGN": _Interpreter.assign, "LOAD": _Interpreter.load, "STORE": _Interpreter.store,
    "CAST": _Interpreter.cast, "BITCAST": _Interpreter.bitcast,
}


def run_kernel(k: Kernel, bufs: Sequence[np.ndarray], vals: Sequence[int]) -> None:
    """Execute kernel `k` on typed 1-D arrays `bufs` (in argument order) and int `vals`."""
    _Interpreter(k, bufs, vals).run()


# ---------------------------------------------------------------- the device

class PythonAllocator(Allocator):
    """Host memory: a handle is a 1-D uint8 numpy array; a view is a slice of its base."""

    def _alloc(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, np.uint8)

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        handle[:] = np.frombuffer(src, np.uint8)

    def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
        np.frombuffer(dest, np.uint8)[:] = handle

    def offset(self, handle: np.ndarray, byte_offset: int, nbytes: int) -> np.ndarray:
        return handle[byte_offset:byte_offset + nbytes]


class PythonCompiler(Compiler):
    """Checks that the kernel text parses; the binary is the text itself."""
    kind = "python"

    def compile(self, src: str) -> bytes:
        parse_module(src)
        return src.encode()

    def identity(self) -> str:
        return f"tolk-python-interpreter numpy={np.__version__}"


class PythonProgram(Program):
    """Kernel `name` of a parsed module; buffers are viewed with the kernel's declared element dtypes."""

    def __init__(self, device: PythonDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        kernels = device.load(lib)
        if name not in kernels:
            raise ValueError(f"kernel {name!r} is not in the compiled module (it has {', '.join(kernels)})")
        self.kernel = kernels[name]

    def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
        k = self.kernel
        if len(bufs) != len(k.buffers) or len(vals) != len(k.variables):
            raise TypeError(f"kernel {k.name} takes {len(k.buffers)} buffers and {len(k.variables)} values, got "
                            f"{len(bufs)} and {len(vals)}")
        views = []
        for h, (_, dt) in zip(bufs, k.buffers, strict=True):
            npdt = _np(dt)
            views.append(h[:h.size - h.size % npdt.itemsize].view(npdt))
        t0 = time.perf_counter()
        run_kernel(k, views, vals)
        return time.perf_counter() - t0 if wait else None


SMOKE = """kernel tolk_smoke(b0:float32:w, b1:float32:r, b2:float32:r, $n, $k)
  v0 = RANGE index $n
    v1 = LOAD float32 b1 v0
    v2 = CAST float32 $k
    v3 = MUL float32 v1 v2
    v4 = LOAD float32 b2 v0
    v5 = ADD float32 v3 v4
    STORE b0 v0 v5
  END v0
"""


class PythonDevice(CompiledDevice):
    """The reference device. One parsed module per distinct binary."""

    def __init__(self, name: str = "PYTHON"):
        super().__init__(name, PythonAllocator(), PythonCompiler(), PythonProgram)
        self._modules: dict[str, dict[str, Kernel]] = {}

    def load(self, lib: bytes) -> dict[str, Kernel]:
        key = hashlib.sha256(lib).hexdigest()
        if (mod := self._modules.get(key)) is None:
            mod = self._modules[key] = parse_module(lib.decode())
        return mod

    def self_test(self) -> str:
        return run_smoke(self, SMOKE)
