"""The CUDA C dialect: `extern "C" __global__` kernels, one thread per output element.

half and bfloat16 are stored as `__half` (cuda_fp16.h) and `__nv_bfloat16` (cuda_bf16.h) and computed in float
registers, rounded back after every operation (see tolk_core.render.cstyle): the same values as native half
arithmetic, with none of the implicit-conversion ambiguities of the half types in C++. Non-finite literals are
spelled by their bits (`__int_as_float`), which needs no header under NVRTC.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.render.cstyle import CStyleRenderer

_HALF = {dtypes.float16: ("half", "__half"), dtypes.bfloat16: ("bfloat16", "__nv_bfloat16")}


class CUDARenderer(CStyleRenderer):
    """CUDA C++ for NVRTC/nvcc, sm_80 and newer (bfloat16 conversions); the launch has at most `local_max`
    threads a block, which `__launch_bounds__` promises the compiler."""

    device = "CUDA"
    has_local = True
    local_max = 256
    kernel_prefix = f'extern "C" __global__ void __launch_bounds__({local_max})'
    restrict = "__restrict__"
    barrier = "__syncthreads();"
    shared_qualifier = "__shared__ "
    shared_bytes = 49152             # static __shared__ memory a block may declare
    emulated = frozenset(_HALF)
    type_names = {**CStyleRenderer.type_names, dtypes.bool: "bool", dtypes.float16: "__half",
                  dtypes.bfloat16: "__nv_bfloat16"}
    # float and double reinterpretations by the intrinsics, through the signed integer of their size
    _as_int = {dtypes.float32: ("__float_as_int", "int"), dtypes.float64: ("__double_as_longlong", "long long")}
    _from_int = {dtypes.float32: ("__int_as_float", "int"), dtypes.float64: ("__longlong_as_double", "long long")}

    def unary(self, op: Op, x: str, dt: DType) -> str:
        if op in (Op.NEG, Op.RECIPROCAL):
            return super().unary(op, x, dt)
        return f"{op.name.lower()}{self.math_suffix(dt)}({x})"

    def float_mod(self, a: str, b: str, dt: DType) -> str:
        return f"fmod{self.math_suffix(dt)}({a},{b})"

    def inf_nan(self, v: float, dt: DType) -> str:
        if self.reg_dtype(dt) == dtypes.float64:
            bits = "0x7ff8000000000000LL" if math.isnan(v) else "0x7ff0000000000000LL"
            text = f"__longlong_as_double({bits})"
        else:
            text = f"__int_as_float({'0x7fc00000' if math.isnan(v) else '0x7f800000'})"
        return f"(-{text})" if v < 0 else text

    def round_to(self, dt: DType, x: str, src: DType) -> str:
        name = _HALF[dt][0]
        narrow = f"__double2{name}({x})" if src == dtypes.float64 else f"__float2{name}_rn({x})"
        return f"__{name}2float({narrow})"

    def to_bits(self, dt: DType, x: str) -> str:
        name = _HALF[dt][0]
        return f"__{name}_as_ushort(__float2{name}_rn({x}))"

    def from_bits(self, dt: DType, x: str) -> str:
        name = _HALF[dt][0]
        return f"__{name}2float(__ushort_as_{name}({x}))"

    def render_load(self, buf: str, idx: str, dt: DType) -> str:
        return f"__{_HALF[dt][0]}2float({buf}[{idx}])" if dt in _HALF else f"{buf}[{idx}]"

    def render_store(self, buf: str, idx: str, x: str, dt: DType) -> str:
        return f"{buf}[{idx}] = __float2{_HALF[dt][0]}_rn({x});" if dt in _HALF else f"{buf}[{idx}] = {x};"

    def reinterpret(self, x: str, src: DType, dt: DType) -> str:
        if src in self._as_int:
            fn, itype = self._as_int[src]
            return f"(({self.type_name(dt)}){fn}({x}))"
        fn, itype = self._from_int[dt]
        return f"{fn}(({itype})({x}))"

    def render_special(self, u: UOp) -> str:
        """`idx` a global item, `gidx` a block, `lidx` a thread within its block (see codegen/optimize.py)."""
        axis, kind = "xyz"[u.arg[1]], u.arg[0].rstrip("0123456789")
        if (t := self.type_name(dtypes.index)) != "int":  # 64-bit ids: the block offset is a 64-bit product
            return {"idx": f"(({t})blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis})", "gidx": f"({t})blockIdx.{axis}",
                    "lidx": f"({t})threadIdx.{axis}"}[kind]
        return {"idx": f"(int)(blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis})", "gidx": f"(int)blockIdx.{axis}",
                "lidx": f"(int)threadIdx.{axis}"}[kind]

    def prelude(self, sources: Sequence[str]) -> str:
        # every spelling of a half type (the storage type, conversions) contains its name
        heads = [f"#include <cuda_{'fp16' if dt == dtypes.float16 else 'bf16'}.h>\n"
                 for dt, (name, _) in _HALF.items() if any(name in s for s in sources)]
        return "".join(heads) + ("\n" if heads else "")
