"""The OpenCL C dialect: one work item per output element, OpenCL's overloaded math built-ins."""
from __future__ import annotations

from collections.abc import Sequence

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.render.cstyle import CStyleRenderer


class OpenCLRenderer(CStyleRenderer):
    """OpenCL C 1.2. Bool buffers are stored as uchar (OpenCL forbids bool in global memory)."""

    device = "OPENCL"
    has_local = True
    local_max = 256
    kernel_prefix = "__kernel void"
    buffer_qualifier = "__global "
    local_qualifier = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    _specials = {"idx": "get_global_id", "gidx": "get_group_id", "lidx": "get_local_id"}
    type_names = {**CStyleRenderer.type_names, dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar",
                  dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong"}

    def buffer_type_name(self, dt: DType) -> str:
        return "uchar" if dt == dtypes.bool else self.type_name(dt)

    def unary(self, op: Op, x: str, dt: DType) -> str:
        if op in (Op.NEG, Op.RECIPROCAL):
            return super().unary(op, x, dt)
        return f"{op.name.lower()}({x})"

    def render_const(self, value: object, dt: DType) -> str:
        text = super().render_const(value, dt)
        return text.replace("ull", "UL").replace("ll", "L")

    def render_special(self, u: UOp) -> str:
        return f"{self._specials[u.arg[0].rstrip('0123456789')]}({u.arg[1]})"

    def prelude(self, sources: Sequence[str]) -> str:
        return "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n\n" if any("double" in s for s in sources) else ""
