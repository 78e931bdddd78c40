"""The ExampleC dialect: plain C99 with <math.h> functions (no compiler builtins, no OpenMP), each kernel
exported explicitly so the library can be built with hidden visibility."""
from __future__ import annotations

from collections.abc import Sequence

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.render.cstyle import CStyleRenderer


class ExampleRenderer(CStyleRenderer):
    device = "EXAMPLE"
    kernel_prefix = '__attribute__((visibility("default"))) void'
    _math = {Op.EXP2: "exp2", Op.LOG2: "log2", Op.SQRT: "sqrt", Op.SIN: "sin", Op.COS: "cos",
             Op.TRUNC: "trunc"}

    def unary(self, op: Op, x: str, dt: DType) -> str:
        if op in self._math:
            return f"{self._math[op]}{'f' if dt == dtypes.float32 else ''}({x})"
        return super().unary(op, x, dt)

    def loop_pragma(self, kind: str, folds: Sequence[tuple[Op, str]]) -> str | None:
        # no memory dependencies between iterations of an output loop: let GCC vectorize it without a check
        return "#pragma GCC ivdep" if "simd" in kind and not folds else None

    def prelude(self, sources: Sequence[str]) -> str:
        return "#include <math.h>\n\n"
