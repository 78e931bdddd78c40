"""The C dialect for the CPU: loops over the outputs, OpenMP pragmas for threads and SIMD."""
from __future__ import annotations

from collections.abc import Sequence

from tolk_core.render.cstyle import CStyleRenderer


class CRenderer(CStyleRenderer):
    """C99 for gcc/clang with OpenMP: `parallel` splits a loop across threads, `simd` vectorizes it."""

    device = "CPU"
    _pragmas = {"parallel": "#pragma omp parallel for", "simd": "#pragma omp simd",
                "parallel simd": "#pragma omp parallel for simd", "unroll": "#pragma GCC unroll 16"}

    def loop_pragma(self, kind: str) -> str | None:
        return self._pragmas.get(kind)

    def prelude(self, sources: Sequence[str]) -> str:
        return "#include <math.h>\n\n" if any("NAN" in s or "INFINITY" in s for s in sources) else ""
