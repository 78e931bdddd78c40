"""The OpenCL C dialect: one work item per output element, OpenCL's overloaded math built-ins.

Vector values (codegen's GPU vector lanes) are OpenCL vector types (`float4` .. `float16`; a bool lane is a
char, as in the C dialect): contiguous accesses are `vloadN`/`vstoreN` (element alignment suffices), float math
built-ins apply to whole vectors, a lane is `v.sN`, and the rest is computed lane by lane (see render.cstyle).

dtypes follow the device's extensions: float64 needs `cl_khr_fp64` (else DTypeError); half is native with
`cl_khr_fp16`, otherwise stored with `vload_half`/`vstore_half_rte` and computed in float; bfloat16 is always
ushort storage with float compute. Without a device (``Device.renderer_for``) the renderer targets the
OpenCL 1.2 baseline: no extensions.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.render.cstyle import CStyleRenderer

# SIN and COS are left out: PoCL's vector sin returns ~0.0079 for a subnormal lane when another lane of the same
# vector needs its large-argument reduction (an infinite or huge value); lane by lane each is right
_VECTOR_MATH = frozenset({Op.EXP2, Op.LOG2, Op.SQRT, Op.TRUNC})

# rounding a float (or double) to half without half values: through a private ushort, by the vload/vstore
# built-ins every OpenCL 1.2 device has
HALF_HELPERS = """\
inline float tolk_half_round(float x) {
  ushort h; vstore_half_rte(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h);
}
inline ushort tolk_half_bits(float x) { ushort h; vstore_half_rte(x, 0, (__private half*)&h); return h; }
inline float tolk_half_float(ushort h) { return vload_half(0, (__private half*)&h); }
"""
HALF_HELPERS_F64 = """\
inline float tolk_half_round_f64(double x) {
  ushort h; vstore_half_rte(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h);
}
"""


class OpenCLRenderer(CStyleRenderer):
    """OpenCL C 1.2. Bool buffers are stored as uchar (OpenCL forbids bool in global memory)."""

    device = "OPENCL"
    has_local = True
    local_max = 256
    kernel_prefix = "__kernel void"
    buffer_qualifier = "__global "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    shared_qualifier = "__local "
    shared_bytes = 32768             # the least CL_DEVICE_LOCAL_MEM_SIZE OpenCL 1.2 allows a full-profile device
    max_lanes = 16                   # the widest OpenCL vector type
    # MAX's `(a<b||b!=b)?b:a` is lane-wise on OpenCL vectors (comparisons give lane masks, `?:` selects per lane)
    vector_folds = CStyleRenderer.vector_folds | {Op.MAX}
    _specials = {"idx": "get_global_id", "gidx": "get_group_id", "lidx": "get_local_id"}
    type_names = {**CStyleRenderer.type_names, dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar",
                  dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong",
                  dtypes.float16: "half", dtypes.bfloat16: "ushort"}

    def __init__(self, device: object = None, extensions: Iterable[str] | None = None):
        super().__init__(device)
        self.extensions = frozenset(extensions if extensions is not None else getattr(device, "extensions", ()))
        if "cl_khr_fp64" not in self.extensions:
            self.unsupported = {dtypes.float64: "the device does not report cl_khr_fp64; use float32"}
        self.native_half = "cl_khr_fp16" in self.extensions
        # a CPU device runs each work group on one thread, this many at once (the optimizer's launch shapes)
        self.cpu_threads = int(getattr(device, "cpu_threads", 0))
        self.emulated = frozenset({dtypes.bfloat16} if self.native_half else {dtypes.bfloat16, dtypes.float16})

    def buffer_type_name(self, dt: DType) -> str:
        return "uchar" if dt == dtypes.bool else self.type_name(dt)

    def unary(self, op: Op, x: str, dt: DType) -> str:
        if op in (Op.NEG, Op.RECIPROCAL):
            return super().unary(op, x, dt)
        return f"{op.name.lower()}({x})"

    def float_mod(self, a: str, b: str, dt: DType) -> str:
        return f"fmod({a},{b})"

    def render_const(self, value: int | float, dt: DType) -> str:
        text = super().render_const(value, dt)
        text = text.replace("ull", "UL").replace("ll", "L")
        return f"(half){text}" if dt == dtypes.float16 and self.native_half else text

    def round_to(self, dt: DType, x: str, src: DType) -> str:
        if dt != dtypes.float16:
            return super().round_to(dt, x, src)
        return f"tolk_half_round_f64({x})" if src == dtypes.float64 else f"tolk_half_round({x})"

    def to_bits(self, dt: DType, x: str) -> str:
        return f"tolk_half_bits({x})" if dt == dtypes.float16 else super().to_bits(dt, x)

    def from_bits(self, dt: DType, x: str) -> str:
        return f"tolk_half_float({x})" if dt == dtypes.float16 else super().from_bits(dt, x)

    def render_load(self, buf: str, idx: str, dt: DType) -> str:
        return f"vload_half({idx}, {buf})" if dt == dtypes.float16 and not self.native_half else \
            super().render_load(buf, idx, dt)

    def render_store(self, buf: str, idx: str, x: str, dt: DType) -> str:
        return f"vstore_half_rte({x}, {idx}, {buf});" if dt == dtypes.float16 and not self.native_half else \
            super().render_store(buf, idx, x, dt)

    def vector_type_name(self, dt: DType) -> str:
        scalar = "char" if dt.scalar() == dtypes.bool else self.type_name(dt.scalar())
        return f"{scalar}{dt.count}"

    def vector_expression(self, u: UOp, ref, index) -> str:
        if u.op is Op.GEP:  # a run of lanes (a half in a vector accumulator's fold): a swizzle, `v.s89abcdef`
            return f"{ref(u.src[0])}.s{''.join(f'{i:x}' for i in u.arg)}"
        if u.op is Op.LOAD and u.src[0].arg == "vec":
            buf, idx, gate = index(u.src[0])
            vec = f"vload{u.dtype.count}(0, {buf}+{idx})"
            return f"({gate}?{vec}:({self.type_name(u.dtype)})(0))" if gate else vec
        if u.op in _VECTOR_MATH and dtypes.is_float(u.dtype) and u.dtype.scalar() not in self.emulated:
            return f"{u.op.name.lower()}({ref(u.src[0])})"
        if u.op is Op.NEG and u.dtype.scalar() in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64):
            return self.wrapping(Op.NEG, [ref(u.src[0])], u.dtype)  # -INT_MIN wraps (docs/dtypes.md)
        if u.op is Op.NEG:
            return f"(-{ref(u.src[0])})"
        if u.op is Op.MAX and dtypes.is_float(u.dtype) and u.dtype.scalar() not in self.emulated:
            # lane-wise on vectors; a scalar operand (a constant or a lane-free value) is broadcast
            tname = self.type_name(u.dtype)
            return self.binops[Op.MAX](*(ref(s) if s.dtype == u.dtype else f"(({tname})({ref(s)}))" for s in u.src))
        return super().vector_expression(u, ref, index)

    def expression(self, u: UOp, ref, index) -> str:
        return f"{ref(u.src[0])}.s{u.arg:x}" if u.op is Op.GEP else super().expression(u, ref, index)

    def store(self, u: UOp, ref, index) -> str:
        idx_u, val = u.src[0], u.src[1]
        if idx_u.arg != "vec":
            return super().store(u, ref, index)
        buf, idx, gate = index(idx_u)
        stmt = f"vstore{val.dtype.count}({ref(val)}, 0, {buf}+{idx});"
        return f"if ({gate}) {stmt}" if gate else stmt

    def as_unsigned(self, x: str, dt: DType, in_vector: bool) -> str:
        # OpenCL C has no casts between vector types: reinterpret the lanes
        return f"as_{self.type_name(self.unsigned_of(dt))}({x})" if dt.count > 1 else \
            super().as_unsigned(x, dt, in_vector)

    def from_unsigned(self, x: str, dt: DType) -> str:
        return f"as_{self.type_name(dt)}({x})" if dt.count > 1 else super().from_unsigned(x, dt)

    def reinterpret(self, x: str, src: DType, dt: DType) -> str:
        return f"as_{self.type_name(dt)}({x})"

    def render_special(self, u: UOp) -> str:
        return f"{self._specials[u.arg[0].rstrip('0123456789')]}({u.arg[1]})"

    def prelude(self, sources: Sequence[str]) -> str:
        # OpenCL C contracts a*b+c into fma by default; numpy and torch round the product first
        out = ["#pragma OPENCL FP_CONTRACT OFF\n"]
        if any("double" in s for s in sources):
            out.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n")
        if self.native_half and any("half" in s for s in sources):
            out.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n")
        if any("tolk_half_" in s for s in sources):
            out.append(HALF_HELPERS)
        if any("tolk_half_round_f64" in s for s in sources):
            out.append(HALF_HELPERS_F64)
        return "".join(out) + "\n" + super().prelude(sources)
