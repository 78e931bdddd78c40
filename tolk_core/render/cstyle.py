"""The C-style renderer base: a linearized kernel (see codegen.linearize) to one C-family function.

A dialect (CPU C, OpenCL C, CUDA C) subclasses `CStyleRenderer` and overrides only its differences: type
names, the kernel signature's qualifiers, math builtins, GPU index specials, loop pragmas and the prelude.

Naming in the output: buffers `b<slot>`, integer arguments by their variable's name, loops `r<id>`,
accumulators `acc<n>`, other values `v<n>`. Every computed value gets its own `const` variable, so an
expression is never more than one operation deep and the compiler sees plain SSA.

dtypes. Every value of dtype T holds exactly a value of T on every dialect: the result of each operation is
rounded to T, as numpy (with ml_dtypes for bfloat16) does per operation. A dialect lists in `emulated` the
dtypes it stores in memory but computes in float32 registers (bfloat16 everywhere, half where the device has no
half arithmetic): loads widen to float, every computed value is rounded back to T's precision (`round_to`),
stores narrow. That is exact for + - * / and sqrt (float32 holds more than twice half's and bfloat16's bits),
so emulated and native half agree bit for bit. `unsupported` maps the dtypes a device cannot compute at all to
the reason; rendering one raises DTypeError naming the dtype and the device.

Vector values (dtype count > 1, made by codegen.upcast for dialects with `vector_type_name`; never emulated
dtypes): arithmetic of one vector type is native C vector arithmetic (a scalar operand is broadcast); anything
else is computed lane by lane (`v[l]`) in a statement expression. A vector LOAD/STORE through INDEX(arg="vec")
is one contiguous access at the scalar index; through INDEX(arg="gather") it is one access per lane. A "vec"
load whose gate is a vector (a read through a PAD at a row's border, codegen/borders.py) is a masked load
(`masked_load`): lanes whose gate is false read 0 and touch no memory.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tolk_core.errors import DTypeError
from tolk_core.ir.dtype import DType, PtrDType, dtypes
from tolk_core.ir.ops import Op, identity_element
from tolk_core.ir.uop import UOp
from tolk_core.render.renderer import LoopKind, Renderer


@dataclass(frozen=True)
class KernelParam:
    """One kernel argument: a buffer (slot, element dtype, written?) or an integer variable (name)."""
    slot: int
    dtype: DType
    written: bool = False
    var: str | None = None


def _c_binop(sym: str) -> Callable[[str, str], str]:
    return lambda a, b: f"({a}{sym}{b})"


# bfloat16 as uint16 bits, shared by the C and OpenCL C dialects (valid in both). Widening is a shift;
# narrowing rounds to nearest even, and keeps NaN a (quiet) NaN instead of letting the rounding carry into inf.
BF16_HELPERS = """\
static inline float tolk_bf16_float(unsigned short b) {
  union { unsigned int u; float f; } c; c.u = ((unsigned int)b) << 16; return c.f;
}
static inline unsigned short tolk_bf16_bits(float f) {
  union { unsigned int u; float f; } c; c.f = f;
  if ((c.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((c.u >> 16) | 0x40u);
  return (unsigned short)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}
static inline float tolk_bf16_round(float f) { return tolk_bf16_float(tolk_bf16_bits(f)); }
"""

# ops whose result is one of their (already exact) operands: no rounding needed for emulated dtypes
_SELECTING = frozenset({Op.MAX, Op.NEG, Op.WHERE, Op.TRUNC})
# signed integer ops whose overflow C, OpenCL C and CUDA leave undefined: rendered in the unsigned type of the
# same width (where it wraps modulo 2^n) and converted back (docs/dtypes.md: integer arithmetic wraps as numpy's)
_WRAPPED = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.SHL})
_SIGNED = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64})
_SYMBOLS = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.SHL: "<<"}


class CStyleRenderer(Renderer):
    """Renders linearized kernels as C-family source. Subclass per dialect; see the module docstring. The
    capabilities core reads are `Renderer`'s; the attributes here are the dialect's spelling."""

    kernel_prefix: str = "void"
    buffer_qualifier: str = ""
    restrict: str = "restrict"
    barrier: str = ""                # a work-group barrier statement (GPU dialects; for shared-memory kernels)
    shared_qualifier: str = ""       # declares work-group shared memory (GPU dialects)
    emulated: frozenset[DType] = frozenset({dtypes.bfloat16})
    vector_folds: frozenset[Op] = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.FDIV})  # vector accumulators fold natively
    index64 = True  # a kernel past int32 indices holds every index value in the dialect's int64 type (`wide_index`)

    type_names: dict[DType, str] = {
        dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
        dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float32: "float",
        dtypes.float64: "double", dtypes.index: "int", dtypes.bfloat16: "unsigned short",
    }

    binops: dict[Op, Callable[[str, str], str]] = {
        Op.ADD: _c_binop("+"), Op.SUB: _c_binop("-"), Op.MUL: _c_binop("*"), Op.FDIV: _c_binop("/"),
        Op.IDIV: _c_binop("/"), Op.MOD: _c_binop("%"), Op.CMPLT: _c_binop("<"), Op.CMPNE: _c_binop("!="),
        Op.CMPEQ: _c_binop("=="), Op.AND: _c_binop("&"), Op.OR: _c_binop("|"), Op.XOR: _c_binop("^"),
        Op.SHL: _c_binop("<<"), Op.SHR: _c_binop(">>"),
        # NaN in either operand is the result, as in numpy's maximum and max (operands are names or constants)
        Op.MAX: lambda a, b: f"(({a}<{b}||{b}!={b})?{b}:{a})",
    }

    def __init__(self, device: object = None):
        super().__init__(device)
        # a dtype the dialect names no C type for cannot be rendered: a DTypeError saying so, not a failed lookup
        unnamed = {dt: f"the {type(self).__name__} dialect names no C type for it (type_names)"
                   for dt in dtypes.all if dt not in self.type_names}
        self.unsupported = {**unnamed, **self.unsupported}

    # ---- dtype capability (see Renderer for supports/check_dtype)
    def reg_dtype(self, dt: DType) -> DType:
        """The dtype a value of `dt` is held in while computing (float32 for emulated dtypes)."""
        return dtypes.float32 if dt.scalar() in self.emulated else dt

    # ---- dialect hooks ----
    def type_name(self, dt: DType) -> str:
        return self.type_names[dt.scalar()] if dt.count == 1 else self.vector_type_name(dt)

    def vector_type_name(self, dt: DType) -> str:
        """The name of an unaligned vector type of `dt.count` lanes (declared by the prelude)."""
        raise NotImplementedError(f"{type(self).__name__} renders no vector types")

    def buffer_type_name(self, dt: DType) -> str:
        return self.type_name(dt)

    def reg_type_name(self, dt: DType) -> str:
        return self.type_name(self.reg_dtype(dt))

    def math_suffix(self, dt: DType) -> str:
        """Suffix of the single-precision C math functions, for values held in float registers."""
        return "" if self.reg_dtype(dt) == dtypes.float64 else "f"

    def unary(self, op: Op, x: str, dt: DType) -> str:
        """Unary math; the base uses GCC builtins, which C compilers inline or route to libm."""
        f = self.math_suffix(dt)
        return {Op.NEG: f"(-{x})", Op.EXP2: f"__builtin_exp2{f}({x})", Op.LOG2: f"__builtin_log2{f}({x})",
                Op.SQRT: f"__builtin_sqrt{f}({x})", Op.SIN: f"__builtin_sin{f}({x})", Op.COS: f"__builtin_cos{f}({x})",
                Op.TRUNC: f"__builtin_trunc{f}({x})", Op.RECIPROCAL: f"(1/{x})"}[op]

    def float_mod(self, a: str, b: str, dt: DType) -> str:
        """MOD of floats: C's fmod (exact; the sign of the dividend)."""
        return f"__builtin_fmod{self.math_suffix(dt)}({a},{b})"

    def inf_nan(self, v: float, dt: DType) -> str:
        """A non-finite literal."""
        if math.isnan(v):
            return "NAN"
        return "INFINITY" if v > 0 else "(-INFINITY)"

    def render_const(self, value: int | float, dt: DType) -> str:
        if dtypes.is_bool(dt):
            return "1" if value else "0"
        if dtypes.is_float(dt):
            v = float(value)  # UOp.const already rounded it to dt
            if not math.isfinite(v):
                return self.inf_nan(v, dt)
            return repr(v) if self.reg_dtype(dt) == dtypes.float64 else f"{v!r}f"
        v = int(value)
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dt, "")
        if dt in (dtypes.int64, dtypes.int32) and v == dtypes.min(dt):  # -2^31 is not a C literal
            return f"({v + 1}{suffix}-1)"
        return f"{v}{suffix}"

    def render_cast(self, x: str, dt: DType, src: DType) -> str:
        if dt in self.emulated:
            return self.round_to(dt, x, src)
        return f"(({self.type_name(dt)})({x}))"

    # emulated dtypes: the storage <-> float conversions (bfloat16 as uint16 bits here)
    def round_to(self, dt: DType, x: str, src: DType) -> str:
        """`x` (a value of `src`) rounded to emulated `dt`, as a float. The base emulates bfloat16 only; a dialect
        emulating more overrides this, `to_bits` and `from_bits`."""
        return f"tolk_bf16_round((float)({x}))"  # float64 rounds through float32, as ml_dtypes does

    def to_bits(self, dt: DType, x: str) -> str:
        """The storage bits (an unsigned 16-bit value) of emulated `dt` value `x` (a float)."""
        return f"tolk_bf16_bits({x})"

    def from_bits(self, dt: DType, x: str) -> str:
        """The float value of emulated `dt` storage bits `x`."""
        return f"tolk_bf16_float({x})"

    def render_load(self, buf: str, idx: str, dt: DType) -> str:
        return self.from_bits(dt, f"{buf}[{idx}]") if dt in self.emulated else f"{buf}[{idx}]"

    def render_store(self, buf: str, idx: str, x: str, dt: DType) -> str:
        return f"{buf}[{idx}] = {self.to_bits(dt, x) if dt in self.emulated else x};"

    def reinterpret(self, x: str, src: DType, dt: DType) -> str:
        """The bits of `x` (of `src`) read as `dt`, the same size; neither is emulated. C: a union."""
        return f"((union {{ {self.type_name(src)} s; {self.type_name(dt)} d; }}){{{x}}}).d"

    def render_bitcast(self, x: str, dt: DType, src: DType) -> str:
        if dt.itemsize != src.itemsize or dtypes.is_bool(dt) or dtypes.is_bool(src):
            raise DTypeError(f"bitcast from {src.name} to {dt.name}: bitcast needs two non-bool dtypes of one size")
        if src in self.emulated:
            x, src = self.to_bits(src, x), dtypes.uint16
        out = dtypes.uint16 if dt in self.emulated else dt
        if src != out:
            # equal-size integers convert modulo 2^n, which keeps the bits
            ints = dtypes.is_int(src) and dtypes.is_int(out)
            x = f"(({self.type_name(out)})({x}))" if ints else self.reinterpret(x, src, out)
        return self.from_bits(dt, x) if dt in self.emulated else x

    def as_unsigned(self, x: str, dt: DType, in_vector: bool) -> str:
        """Signed integer value `x` of `dt` viewed as an unsigned integer that wraps. A vector is reinterpreted as
        the unsigned vector of the same lanes (vector lanes are not promoted), a scalar operand of a vector op
        converted to the unsigned type of its width; any other scalar to `unsigned int` (at least int's width,
        so no promotion to signed int follows) or `unsigned long long`."""
        if dt.count > 1:
            return f"(({self.vector_type_name(self.unsigned_of(dt))}){x})"
        wide = self.unsigned_of(dt) if in_vector else (dtypes.uint64 if dt.itemsize == 8 else dtypes.uint32)
        return f"(({self.type_name(wide)}){x})"  # x is a name or a parenthesized constant

    def from_unsigned(self, x: str, dt: DType) -> str:
        """The wrapped unsigned result `x` converted back to signed `dt` (its low bits: modulo 2^n)."""
        return f"(({self.type_name(dt)}){x})"  # x is parenthesized

    @staticmethod
    def unsigned_of(dt: DType) -> DType:
        """The unsigned integer dtype of `dt`'s size, with `dt`'s lane count."""
        base = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dt.itemsize]
        return base.vec(dt.count) if dt.count > 1 else base

    def wrapping(self, op: Op, args: Sequence[str], dt: DType, srcs: Sequence[DType] | None = None) -> str:
        """`op` (in _WRAPPED) on signed `dt` through the unsigned view, so overflow wraps as in numpy; `srcs`
        are the operands' dtypes (default: all `dt`; a scalar operand of a vector op is viewed at its width)."""
        srcs = srcs or [dt] * len(args)
        view = [self.as_unsigned(a, s, dt.count > 1) if s.scalar() in _SIGNED else a
                for a, s in zip(args, srcs, strict=True)]
        if op is Op.SHL:  # only the shifted value is viewed: the count stays what it is
            view[1] = args[1]
        expr = f"(-{view[0]})" if op is Op.NEG else f"({view[0]}{_SYMBOLS[op]}{view[1]})"
        return self.from_unsigned(expr, dt)

    def render_special(self, u: UOp) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no GPU index specials")

    def param_decl(self, p: KernelParam) -> str:
        if p.var is not None:
            return f"const int {p.var}"
        const = "" if p.written else "const "
        return f"{self.buffer_qualifier}{const}{self.buffer_type_name(p.dtype)}* {self.restrict} b{p.slot}"

    def prelude(self, sources: Sequence[str]) -> str:
        return BF16_HELPERS + "\n" if any("tolk_bf16_" in s for s in sources) else ""

    # ---- the kernel ----
    def render_kernel(self, name: str, lin: list[UOp], params: Sequence[KernelParam],
                      loop_kinds: Mapping[UOp, LoopKind] | None = None) -> str:
        """One function `name` computing the linearized kernel `lin` over `params`. Raises DTypeError when a
        dtype of the kernel is not supported on this renderer's device."""
        for p in params:
            self.check_dtype(p.dtype)
        for u in lin:
            if u.dtype != dtypes.void:
                self.check_dtype(u.dtype)
        r = self.wide_index() if self.index_width(lin) == 64 else self
        body = _KernelBody(r, lin, loop_kinds or {})
        for u in lin:
            body.statement(u)
        head = f"{r.kernel_prefix} {name}({', '.join(r.param_decl(p) for p in params)}) {{"
        return "\n".join([head, *body.pre, *body.lines, "}"])

    def wide_index(self) -> CStyleRenderer:
        """This renderer with index values named by the dialect's int64 type, for one kernel whose indices pass
        the 32-bit range: its loop counters, work-item ids, index arithmetic and casts to index become 64-bit;
        integer kernel arguments stay 32-bit (the runtime passes int32)."""
        wide = copy.copy(self)
        wide.type_names = {**self.type_names, dtypes.index: self.type_names[dtypes.int64]}
        return wide

    def multiply_add(self, a: str, b: str, acc: str, operand_dtypes: list[DType], dt: DType) -> str | None:
        """`acc + a * b` rounded once (a fused multiply-add), for a sum of products folding into accumulator
        `acc` of dtype `dt` (`a` or `b` may be a scalar of a vector fold); None: the dialect has none, and the
        fold stays an add of the rounded product."""
        return None

    def alu(self, op: Op, args: list[str], dt: DType) -> str:
        """ALU `op` on rendered operands giving a `dt` value; emulated results are rounded to `dt`."""
        if op is Op.WHERE:
            expr = f"({args[0]}?{args[1]}:{args[2]})"
        elif op is Op.MOD and dtypes.is_float(dt):
            expr = self.float_mod(args[0], args[1], dt)
        elif op in _WRAPPED and dt.scalar() in _SIGNED:
            expr = self.wrapping(op, args, dt)
        elif op in self.binops:
            expr = self.binops[op](*args)
        else:
            expr = self.unary(op, args[0], dt)
        return self.round_to(dt, expr, dtypes.float32) if dt in self.emulated and op not in _SELECTING else expr

    def store(self, u: UOp, ref: Callable[[UOp], str],
              index: Callable[[UOp], tuple[str, str, str | None]]) -> str:
        idx_u, val = u.src[0], u.src[1]
        buf, idx, gate = index(idx_u)
        if idx_u.arg == "gather":  # one store per lane, each under its own gate
            g = f"if ({_lane(idx_u.src[2], gate)}) " if gate else ""
            return (f"for (int _l = 0; _l < {val.dtype.count}; _l++) "
                    f"{g}{buf}[{_lane(idx_u.src[1], idx)}] = {_lane(val, ref(val))};")
        if idx_u.arg == "vec":
            stmt = f"*({self.type_name(val.dtype)}*)(&{buf}[{idx}]) = {ref(val)};"
        elif _in_kernel(idx_u):
            stmt = f"{buf}[{idx}] = {ref(val)};"
        else:
            stmt = self.render_store(buf, idx, ref(val), val.dtype)
        return f"if ({gate}) {stmt}" if gate else stmt

    def vector_expression(self, u: UOp, ref: Callable[[UOp], str],
                          index: Callable[[UOp], tuple[str, str, str | None]]) -> str:
        """A vector value: native where C vector arithmetic means the same, else lane by lane."""
        tname, n = self.type_name(u.dtype), u.dtype.count
        if u.op is Op.VECTORIZE:
            return f"(({tname}){{{', '.join(ref(s) for s in u.src)}}})"
        if u.op is Op.LOAD and u.src[0].arg == "vec":
            buf, idx, gate = index(u.src[0])
            if gate and u.src[0].src[2].dtype.count > 1:
                return self.masked_load(f"&{buf}[{idx}]", u.src[0].src[2], ref, u.dtype)
            vec = f"(*(const {tname}*)(&{buf}[{idx}]))"
            return f"({gate}?{vec}:({tname}){{0}})" if gate else vec
        if u.op in _VECTOR_NATIVE and all(s.dtype in (u.dtype, u.dtype.scalar()) for s in u.src):
            if u.op in _WRAPPED and u.dtype.scalar() in _SIGNED:
                return self.wrapping(u.op, [ref(s) for s in u.src], u.dtype, [s.dtype for s in u.src])
            return self.binops[u.op](*(ref(s) for s in u.src))
        scalar = UOp(u.op, u.dtype.scalar(), u.src, u.arg)

        def lane_ref(s: UOp) -> str:
            return _lane(s, ref(s))

        if u.op is Op.LOAD:  # a gather: one load per lane
            buf, idx, gate = index(u.src[0])
            src = f"{buf}[{_lane(u.src[0].src[1], idx)}]"
            lane = f"({_lane(u.src[0].src[2], gate)}?{src}:{self.render_const(0, scalar.dtype)})" if gate else src
        else:
            lane = self.expression(scalar, lane_ref, index)
        return f"({{ {tname} _r; for (int _l = 0; _l < {n}; _l++) _r[_l] = {lane}; _r; }})"

    def masked_load(self, ptr: str, gate: UOp, ref: Callable[[UOp], str], dt: DType) -> str:
        """The vector of `dt` at pointer `ptr` whose lanes where the vector bool `gate` is false are 0 and are
        not read (lane by lane here; a dialect with masked vector loads overrides it)."""
        return (f"({{ {self.type_name(dt)} _r; const {self.type_name(dt.scalar())}* _p = {ptr}; "
                f"for (int _l = 0; _l < {dt.count}; _l++) _r[_l] = {ref(gate)}[_l] ? _p[_l] : "
                f"{self.render_const(0, dt.scalar())}; _r; }})")

    def expression(self, u: UOp, ref: Callable[[UOp], str],
                   index: Callable[[UOp], tuple[str, str, str | None]]) -> str:
        if u.op is Op.LOAD:
            buf, idx, gate = index(u.src[0])
            load = f"{buf}[{idx}]" if _in_kernel(u.src[0]) else self.render_load(buf, idx, u.dtype)
            return f"({gate}?{load}:{self.render_const(0, u.dtype)})" if gate else load
        args = [ref(s) for s in u.src]
        if u.op is Op.CAST:
            return self.render_cast(args[0], u.dtype, self.reg_dtype(u.src[0].dtype))
        if u.op is Op.BITCAST:
            return self.render_bitcast(args[0], u.dtype, u.src[0].dtype)
        return self.alu(u.op, args, u.dtype)

    def render_module(self, functions: Sequence[str]) -> str:
        """One translation unit holding every kernel of a schedule: compiled by one compiler call."""
        return self.prelude(functions) + "\n\n".join(functions) + "\n"


def _innermost_folds(lin: list[UOp]) -> dict[UOp, list[list[tuple[Op, UOp]]]]:
    """For each loop, one entry per time it is opened (a range may be opened by more than one loop nest: the
    pieces of a row split at its borders share their reduction ranges), in order: the (op, accumulator
    register) pairs that opening folds into when it is innermost (no loop inside), else none."""
    out: dict[UOp, list[list[tuple[Op, UOp]]]] = {}
    open_loops: list[tuple[bool, list]] = []
    for u in lin:
        if u.op is Op.RANGE:
            if open_loops:
                open_loops[-1] = (False, open_loops[-1][1])
            assigns: list[tuple[Op, UOp]] = []
            out.setdefault(u, []).append(assigns)
            open_loops.append((True, assigns))
        elif u.op is Op.ASSIGN and open_loops:
            open_loops[-1][1].append((u.arg, u.src[0]))
        elif u.op is Op.END:
            innermost, assigns = open_loops.pop()
            if not innermost:
                assigns.clear()
    return out


class _KernelBody:
    """The statements of one kernel that renderer `r` is rendering, one linearized UOp at a time (`statement`):
    `names` the C name of each value so far (accumulators acc<n> and values v<n> numbered in one sequence),
    `lines` the statements, `depth` the loop nesting (the indentation), `pre` the GPU index specials' declarations.
    `ref` and `index` render operands for the renderer's `expression`, `vector_expression` and `store`."""

    def __init__(self, r: CStyleRenderer, lin: list[UOp], loop_kinds: Mapping[UOp, LoopKind]):
        self.r, self.loop_kinds = r, loop_kinds
        self.names: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.depth, self.counter = 1, 0
        specials = {u for u in lin for u in (u, *u.src) if u.op is Op.SPECIAL}
        self.folds = _innermost_folds(lin)
        self.pre = [f"  const {r.type_name(u.dtype)} {u.arg[0]} = {r.render_special(u)};"
                    for u in sorted(specials, key=lambda u: u.arg)]
        self.names.update({u: u.arg[0] for u in specials})

    def ref(self, u: UOp) -> str:
        if u.op is Op.CONST:
            return self.r.render_const(u.arg, u.dtype)
        if u.op is Op.DEFINE_VAR:  # a kernel argument
            return u.arg[0]
        if u.op is Op.REDUCE:  # after its loop, a reduction is its accumulator
            return self.names[UOp(Op.DEFINE_REG, u.dtype, (), u)]
        return self.names[u]

    def index(self, u: UOp) -> tuple[str, str, str | None]:
        buf = self.names[u.src[0]] if u.src[0] in self.names else f"b{u.src[0].arg}"
        return buf, self.ref(u.src[1]), (self.ref(u.src[2]) if len(u.src) > 2 else None)

    def fresh(self, u: UOp, prefix: str) -> str:
        self.names[u] = f"{prefix}{self.counter}"
        self.counter += 1
        return self.names[u]

    def statement(self, u: UOp) -> None:
        pad, r = "  " * self.depth, self.r
        if u.op is Op.RANGE:
            self.loop(u, pad)
        elif u.op is Op.END:
            self.depth -= 1
            self.lines.append("  " * self.depth + "}")
        elif u.op in (Op.INDEX, Op.PARAM, Op.DEFINE_VAR, Op.SPECIAL):
            return
        elif u.op is Op.DEFINE_LOCAL:
            self.names[u] = u.arg[0]
            # kernel-local arrays hold values as registers do (float for emulated dtypes: OpenCL has no half
            # variables without cl_khr_fp16), so their loads and stores convert nothing (`_in_kernel`)
            self.lines.append(f"{pad}{r.shared_qualifier}{r.reg_type_name(u.ptrdtype.base)} {u.arg[0]}[{u.arg[1]}];")
        elif u.op is Op.BARRIER:
            self.lines.append(f"{pad}{r.barrier}")
        elif u.op is Op.IF:  # work items past the end of a padded launch stop here
            self.lines.append(f"{pad}if (!{self.ref(u.src[0])}) return;")
        elif u.op is Op.DEFINE_REG and isinstance(u.dtype, PtrDType):  # a kernel-local array
            self.names[u] = u.arg[0]
            self.lines.append(f"{pad}{r.reg_type_name(u.dtype.base)} {u.arg[0]}[{u.arg[1]}];")
        elif u.op is Op.DEFINE_REG:
            self.accumulator(u, pad)
        elif u.op is Op.ASSIGN:
            self.fold(u, pad)
        elif u.op is Op.STORE:
            self.lines.append(pad + r.store(u, self.ref, self.index))
        else:
            expr = r.vector_expression(u, self.ref, self.index) if u.dtype.count > 1 else \
                r.expression(u, self.ref, self.index)
            self.lines.append(f"{pad}const {r.reg_type_name(u.dtype)} {self.fresh(u, 'v')} = {expr};")

    def loop(self, u: UOp, pad: str) -> None:
        rn = self.names[u] = f"r{u.arg[0]}"
        loop_folds = self.folds[u].pop(0) if self.folds.get(u) else ()  # this opening's folds
        # OpenMP folds scalars only: a loop folding vector accumulators already runs lanes in parallel
        fold_names = [] if any(reg.dtype.count > 1 for _, reg in loop_folds) else \
            [(op, self.names[reg], reg.dtype) for op, reg in loop_folds]
        kind = LoopKind.of(self.loop_kinds.get(u, LoopKind.PLAIN))  # plain strings: deprecated, warned
        if (pragma := self.r.loop_pragma(kind, fold_names)) is not None:
            self.lines.append(f"{pad}{pragma}")
        self.lines.append(f"{pad}for ({self.r.type_name(u.dtype)} {rn} = 0; {rn} < {self.ref(u.src[0])}; {rn}++) {{")
        self.depth += 1

    def accumulator(self, u: UOp, pad: str) -> None:
        red = u.arg
        acc = self.fresh(u, "acc")
        init = self.r.render_const(identity_element(red.arg, red.dtype), u.dtype.scalar())
        if u.dtype.count > 1:
            init = "{" + ", ".join([init] * u.dtype.count) + "}"
        self.lines.append(f"{pad}{self.r.reg_type_name(u.dtype)} {acc} = {init};")

    def fold(self, u: UOp, pad: str) -> None:
        acc, val = self.names[u.src[0]], self.ref(u.src[1])
        prod = u.src[1]
        if u.arg is Op.ADD and prod.op is Op.MUL and dtypes.is_float(u.dtype) and \
                (fma := self.r.multiply_add(self.ref(prod.src[0]), self.ref(prod.src[1]), acc,
                                            [s.dtype for s in prod.src], u.dtype)) is not None:
            self.lines.append(f"{pad}{acc} = {fma};")
        elif u.dtype.count > 1 and u.arg not in self.r.vector_folds:
            lanes = self.r.alu(u.arg, [f"{acc}[_l]", f"{val}[_l]"], u.dtype.scalar())
            self.lines.append(f"{pad}for (int _l = 0; _l < {u.dtype.count}; _l++) {acc}[_l] = {lanes};")
        else:
            self.lines.append(f"{pad}{acc} = {self.r.alu(u.arg, [acc, val], u.dtype)};")


# vector ops whose C vector-extension meaning is the lane-wise scalar meaning
_VECTOR_NATIVE = (Op.ADD, Op.SUB, Op.MUL, Op.FDIV)


def _in_kernel(index: UOp) -> bool:
    """Whether INDEX `index` addresses a kernel-local array (shared or private), held in register types."""
    return index.src[0].op in (Op.DEFINE_LOCAL, Op.DEFINE_REG)


def _lane(u: UOp, text: str) -> str:
    """`text` (the rendering of `u`) read at lane `_l` when `u` is a vector."""
    return f"{text}[_l]" if u.dtype.count > 1 else text


