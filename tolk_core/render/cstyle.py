"""The C-style renderer base: a linearized kernel (see codegen.linearize) to one C-family function.

A dialect (CPU C, OpenCL C, CUDA C) subclasses `CStyleRenderer` and overrides only its differences: type
names, the kernel signature's qualifiers, math builtins, GPU index specials, loop pragmas and the prelude.

Naming in the output: buffers `b<slot>`, integer arguments by their variable's name, loops `r<id>`,
accumulators `acc<n>`, other values `v<n>`. Every computed value gets its own `const` variable, so an
expression is never more than one operation deep and the compiler sees plain SSA.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


@dataclass(frozen=True)
class KernelParam:
    """One kernel argument: a buffer (slot, element dtype, written?) or an integer variable (name)."""
    slot: int
    dtype: DType
    written: bool = False
    var: str | None = None


def _c_binop(sym: str) -> Callable[[str, str], str]:
    return lambda a, b: f"({a}{sym}{b})"


class CStyleRenderer:
    """Renders linearized kernels as C-family source. Subclass per dialect; see the module docstring."""

    device: str = ""
    has_local: bool = False          # GPU-style launch: work items instead of loops over the outputs
    local_max: int = 0
    kernel_prefix: str = "void"
    buffer_qualifier: str = ""
    restrict: str = "restrict"
    supports_float64: bool = True
    local_qualifier: str = ""        # how group-shared memory is declared
    barrier: str = ""                # the statement that orders group-shared memory

    type_names: dict[DType, str] = {
        dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
        dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float32: "float",
        dtypes.float64: "double", dtypes.index: "int",
    }

    binops: dict[Op, Callable[[str, str], str]] = {
        Op.ADD: _c_binop("+"), Op.SUB: _c_binop("-"), Op.MUL: _c_binop("*"), Op.FDIV: _c_binop("/"),
        Op.IDIV: _c_binop("/"), Op.MOD: _c_binop("%"), Op.CMPLT: _c_binop("<"), Op.CMPNE: _c_binop("!="),
        Op.CMPEQ: _c_binop("=="), Op.AND: _c_binop("&"), Op.OR: _c_binop("|"), Op.XOR: _c_binop("^"),
        Op.SHL: _c_binop("<<"), Op.SHR: _c_binop(">>"),
        # NaN in the first operand propagates, as relu(nan) = nan in numpy and torch
        Op.MAX: lambda a, b: f"(({a}<{b})?{b}:{a})",
    }

    def __init__(self, device: object = None):
        self.device_obj = device

    # ---- dialect hooks ----
    def type_name(self, dt: DType) -> str:
        return self.type_names[dt.scalar() if dt.count == 1 else dt]

    def buffer_type_name(self, dt: DType) -> str:
        return self.type_name(dt)

    def unary(self, op: Op, x: str, dt: DType) -> str:
        """Unary math; the base uses GCC builtins, which C compilers inline or route to libm."""
        f = "f" if dt == dtypes.float32 else ""
        return {Op.NEG: f"(-{x})", Op.EXP2: f"__builtin_exp2{f}({x})", Op.LOG2: f"__builtin_log2{f}({x})",
                Op.SQRT: f"__builtin_sqrt{f}({x})", Op.SIN: f"__builtin_sin{f}({x})",
                Op.TRUNC: f"__builtin_trunc{f}({x})", Op.RECIPROCAL: f"(1/{x})"}[op]

    def render_const(self, value: object, dt: DType) -> str:
        if dtypes.is_bool(dt):
            return "1" if value else "0"
        if dtypes.is_float(dt):
            v = float(value)  # type: ignore[arg-type]
            if math.isnan(v):
                return "NAN"
            if math.isinf(v):
                return "INFINITY" if v > 0 else "(-INFINITY)"
            text = repr(v)
            return f"{text}f" if dt == dtypes.float32 else text
        v = int(value)  # type: ignore[call-overload]
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dt, "")
        if dt in (dtypes.int64, dtypes.int32) and v == dtypes.min(dt):  # -2^31 is not a C literal
            return f"({v + 1}{suffix}-1)"
        return f"{v}{suffix}"

    def render_cast(self, x: str, dt: DType) -> str:
        return f"(({self.type_name(dt)})({x}))"

    def render_special(self, u: UOp) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no GPU index specials")

    def loop_pragma(self, kind: str) -> str | None:
        return None

    def param_decl(self, p: KernelParam) -> str:
        if p.var is not None:
            return f"const int {p.var}"
        const = "" if p.written else "const "
        return f"{self.buffer_qualifier}{const}{self.buffer_type_name(p.dtype)}* {self.restrict} b{p.slot}"

    def prelude(self, sources: Sequence[str]) -> str:
        return ""

    # ---- the kernel ----
    def render_kernel(self, name: str, lin: list[UOp], params: Sequence[KernelParam],
                      loop_kinds: dict[UOp, str] | None = None) -> str:
        """One function `name` computing the linearized kernel `lin` over `params`."""
        loop_kinds = loop_kinds or {}
        names: dict[UOp, str] = {}
        lines: list[str] = []
        depth = 1
        counter = 0
        specials = {u for u in lin for u in (u, *u.src) if u.op is Op.SPECIAL}
        pre = [f"  const int {u.arg[0]} = {self.render_special(u)};" for u in sorted(specials, key=lambda u: u.arg)]
        names.update({u: u.arg[0] for u in specials})

        def ref(u: UOp) -> str:
            if u.op is Op.CONST:
                return self.render_const(u.arg, u.dtype)
            if u.op is Op.DEFINE_VAR:  # a kernel argument
                return u.arg[0]
            if u.op is Op.REDUCE:  # after its loop, a reduction is its accumulator
                return names[UOp(Op.DEFINE_REG, u.dtype, (), u)]
            return names[u]

        def index(u: UOp) -> tuple[str, str | None]:
            buf, idx = names[u.src[0]] if u.src[0] in names else f"b{u.src[0].arg}", ref(u.src[1])
            return f"{buf}[{idx}]", (ref(u.src[2]) if len(u.src) > 2 else None)

        for u in lin:
            pad = "  " * depth
            if u.op is Op.RANGE:
                rn = names[u] = f"r{u.arg[0]}"
                if (pragma := self.loop_pragma(loop_kinds.get(u, ""))) is not None:
                    lines.append(f"{pad}{pragma}")
                lines.append(f"{pad}for (int {rn} = 0; {rn} < {ref(u.src[0])}; {rn}++) {{")
                depth += 1
                continue
            if u.op is Op.END:
                depth -= 1
                lines.append("  " * depth + "}")
                continue
            if u.op in (Op.INDEX, Op.PARAM, Op.DEFINE_VAR):
                continue
            if u.op is Op.SPECIAL:
                continue
            if u.op is Op.DEFINE_LOCAL:
                names[u] = u.arg[0]
                lines.append(f"{pad}{self.local_qualifier}{self.type_name(u.dtype.base)} {u.arg[0]}[{u.arg[1]}];")
                continue
            if u.op is Op.BARRIER:
                lines.append(f"{pad}{self.barrier}")
                continue
            if u.op is Op.IF:  # work items past the end of a padded launch stop here
                lines.append(f"{pad}if (!{ref(u.src[0])}) return;")
                continue
            if u.op is Op.DEFINE_REG:
                red = u.arg
                names[u] = f"acc{counter}"
                counter += 1
                init = self.render_const(_identity(red), u.dtype)
                lines.append(f"{pad}{self.type_name(u.dtype)} {names[u]} = {init};")
                continue
            if u.op is Op.ASSIGN:
                acc, val = names[u.src[0]], ref(u.src[1])
                lines.append(f"{pad}{acc} = {self.binops[u.arg](acc, val)};")
                continue
            if u.op is Op.STORE:
                dst, gate = index(u.src[0])
                stmt = f"{dst} = {ref(u.src[1])};"
                lines.append(f"{pad}if ({gate}) {stmt}" if gate else f"{pad}{stmt}")
                continue
            expr = self.expression(u, ref, index)
            names[u] = f"v{counter}"
            counter += 1
            lines.append(f"{pad}const {self.type_name(u.dtype)} {names[u]} = {expr};")
        head = f"{self.kernel_prefix} {name}({', '.join(self.param_decl(p) for p in params)}) {{"
        return "\n".join([head, *pre, *lines, "}"])

    def expression(self, u: UOp, ref: Callable[[UOp], str], index: Callable[[UOp], tuple[str, str | None]]) -> str:
        if u.op is Op.LOAD:
            src, gate = index(u.src[0])
            return f"({gate}?{src}:{self.render_const(0, u.dtype)})" if gate else src
        args = [ref(s) for s in u.src]
        if u.op is Op.CAST:
            return self.render_cast(args[0], u.dtype)
        if u.op is Op.WHERE:
            return f"({args[0]}?{args[1]}:{args[2]})"
        if u.op in self.binops:
            return self.binops[u.op](*args)
        return self.unary(u.op, args[0], u.dtype)

    def render_module(self, functions: Sequence[str]) -> str:
        """One translation unit holding every kernel of a schedule: compiled by one compiler call."""
        return self.prelude(functions) + "\n\n".join(functions) + "\n"


def _identity(reduce: UOp) -> object:
    dt = reduce.dtype
    if reduce.arg is Op.ADD:
        return False if dtypes.is_bool(dt) else 0
    if reduce.arg is Op.MUL:
        return 1
    return -math.inf if dtypes.is_float(dt) else dtypes.min(dt)
