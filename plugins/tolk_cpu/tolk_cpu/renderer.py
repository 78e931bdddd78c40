"""The C dialect for the CPU: loops over the outputs, OpenMP pragmas for threads and SIMD.

half is gcc's and clang's `_Float16` (x86-64 and AArch64); bfloat16 is emulated (uint16 storage, float compute,
see tolk_core.render.cstyle) because gcc 12 has no `__bf16` arithmetic type.
"""
from __future__ import annotations

from collections.abc import Sequence

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.render.cstyle import CStyleRenderer

_FOLD_OPS = {Op.ADD: "+", Op.MUL: "*", Op.MAX: "max"}


class CRenderer(CStyleRenderer):
    """C99 for gcc/clang with OpenMP: `parallel` splits a loop across threads, `simd` vectorizes it."""

    device = "CPU"
    type_names = {**CStyleRenderer.type_names, dtypes.float16: "_Float16"}
    _pragmas = {"parallel": "#pragma omp parallel for", "simd": "#pragma omp simd",
                "parallel simd": "#pragma omp parallel for simd", "unroll": "#pragma GCC unroll 16"}

    def loop_pragma(self, kind: str, folds: Sequence[tuple[Op, str]]) -> str | None:
        if folds and kind != "unroll" and all(op in _FOLD_OPS for op, _ in folds):
            # lanes fold separately and meet at the end: the only reordering of float sums we allow
            return "#pragma omp simd " + " ".join(f"reduction({_FOLD_OPS[op]}:{acc})" for op, acc in folds)
        return self._pragmas.get(kind)

    def prelude(self, sources: Sequence[str]) -> str:
        inc = "#include <math.h>\n\n" if any("NAN" in s or "INFINITY" in s for s in sources) else ""
        return inc + super().prelude(sources)
