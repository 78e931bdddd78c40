"""The C dialect for the CPU: loops over the outputs, OpenMP pragmas for threads and SIMD, GCC vector types."""
from __future__ import annotations

import re
from collections.abc import Sequence

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.render.cstyle import CStyleRenderer

# lanes of a vector type: GCC vector extensions (gcc and clang); a bool lane is a byte (C has no _Bool vectors)
_VEC = re.compile(r"\btolk_(\w+?)_x(\d+)\b")


class CRenderer(CStyleRenderer):
    """C99 + GNU extensions for gcc/clang with OpenMP: `parallel` splits a loop across threads, `simd`
    vectorizes it, `unroll` unrolls it; vector values use unaligned GCC vector types `tolk_<type>_x<lanes>`."""

    device = "CPU"
    vector_bytes = 64  # the widest vector register the optimizer plans lanes for (AVX-512)
    _pragmas = {"parallel": "#pragma omp parallel for", "simd": "#pragma omp simd",
                "parallel simd": "#pragma omp parallel for simd", "unroll": "#pragma GCC unroll 16",
                "unroll4": "#pragma GCC unroll 4"}

    def loop_pragma(self, kind: str) -> str | None:
        return self._pragmas.get(kind)

    def vector_type_name(self, dt: DType) -> str:
        return f"tolk_{self.type_name(dt.scalar()).replace(' ', '_')}_x{dt.count}"

    def prelude(self, sources: Sequence[str]) -> str:
        head = "#include <math.h>\n\n" if any("NAN" in s or "INFINITY" in s for s in sources) else ""
        vecs = sorted({m.groups() for s in sources for m in _VEC.finditer(s)})
        for scalar, lanes in vecs:
            ctype = "signed char" if scalar == "_Bool" else scalar.replace("_", " ")
            size = int(lanes) * _SIZES[ctype]
            head += (f"typedef {ctype} tolk_{scalar}_x{lanes} "
                     f"__attribute__((vector_size({size}), aligned({_SIZES[ctype]})));\n")
        return head + ("\n" if vecs else "")


_SIZES = {CRenderer.type_names[dt].replace("_Bool", "signed char"): dt.itemsize
          for dt in CRenderer.type_names if dt is not dtypes.index}
