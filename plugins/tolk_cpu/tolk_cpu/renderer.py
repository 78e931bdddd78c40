"""The C dialect for the CPU: loops over the outputs, OpenMP pragmas for threads and SIMD, GCC vector types.

half is gcc's and clang's `_Float16` (x86-64 and AArch64); bfloat16 is emulated (uint16 storage, float compute,
see tolk_core.render.cstyle) because gcc 12 has no `__bf16` arithmetic type.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.render import host
from tolk_core.render.cstyle import CStyleRenderer
from tolk_core.render.renderer import LoopKind

_FOLD_OPS = {Op.ADD: "+", Op.MUL: "*", Op.MAX: "max"}
_FLOAT_MAX = "tolk_max"  # an OpenMP reduction declared per float type by the prelude (`_declare_float_max`)


def _fold_op(op: Op, dt: DType) -> str:
    return _FLOAT_MAX if op is Op.MAX and dtypes.is_float(dt) else _FOLD_OPS[op]

# float32 2^x as arithmetic the C compiler vectorizes (libm's exp2f is a scalar call): 2^x = 2^n * 2^f with
# n = rint(x) (x clamped to [-150, 128]), f in [-1/2, 1/2], 2^f by its Taylor series in f*ln2 to degree 7
# (truncation < 5.1e-9 relative, a tenth of an ulp), 2^n as two factors applied one after the other: p * s1 stays
# a float and the second product is the result (n = 128 only for x in [127.5, 128), where p < 1 keeps it finite).
# Saturates to 0 and inf; NaN stays NaN. Within 1.2 ulp of numpy's exp2 (float64) where the result is a normal
# float (degree 9 with n <= 127: 1.4). Below -150 (softmax's masked -inf scores) the series runs on 0 and the
# result is selected 0: computed, its product would underflow, and a multiply whose result is subnormal or
# underflows costs a microcode assist per lane (about 2x on a causal softmax row; docs/performance.md
# "Attention"). Every select tests one comparison: gcc 12 vectorized no loop where
# a select chose between two comparisons' combined masks (`x != x || x < -150` did: erf ran scalar, 10x slower).
# the prelude's helpers are always inlined: gcc's inliner stops inlining plain `static inline` functions once a
# compile unit grows past its limits (a batch of kernels compiled together), and a call left in a loop keeps the
# loop from vectorizing (a GRU's gate kernel ran lane by lane through out-of-line tolk_exp2f calls, 10x slower)
_INLINE = "static inline __attribute__((always_inline))"

_EXP2F = _INLINE + """ float tolk_exp2f(float x) {
  const float a = x >= -150.0f ? x : 0.0f, c = a > 128.0f ? 128.0f : a;
  const float n = __builtin_rintf(c), f = (c - n) * 0.6931471805599453f;
  const float p = 1.0f + f * (1.0f + f * (0.5f + f * (1.6666667e-1f + f * (4.1666667e-2f + f * (8.3333333e-3f
                  + f * (1.3888889e-3f + f * 1.9841270e-4f))))));
  const int k = (int)n, k1 = k / 2, k2 = k - k1;
  union { int i; float f; } s1 = {(k1 + 127) << 23}, s2 = {(k2 + 127) << 23};
  const float y = x < -150.0f ? 0.0f : (p * s1.f) * s2.f, z = x >= 128.0f ? __builtin_inff() : y;
  return x != x ? x : z;
}
"""

_SCALAR_FMA = {dtypes.float32: "__builtin_fmaf", dtypes.float64: "__builtin_fma"}
_SCALAR_FMA_NAMES = {"float": "__builtin_fmaf", "double": "__builtin_fma"}
_FMA = re.compile(r"\btolk_fma(\d+)_(float|double)\b")

_MASKLOAD = re.compile(r"\btolk_maskload(\d+)_(float|double|int)\b")
# (lanes, C type) -> (the masked load of `p` under the integer mask vector `m` of -1/0 lanes, the macro that offers
# it): AVX's take the mask as a vector (a lane's sign bit), AVX-512's as a bit mask (set where the lane is nonzero)
_AVX_MASKLOADS = {(8, "float"): ("_mm256_maskload_ps(p, (__m256i)m)", "__AVX__"),
                  (4, "float"): ("_mm_maskload_ps(p, (__m128i)m)", "__AVX__"),
                  (4, "double"): ("_mm256_maskload_pd(p, (__m256i)m)", "__AVX__"),
                  (8, "int"): ("_mm256_maskload_epi32(p, (__m256i)m)", "__AVX2__"),
                  (4, "int"): ("_mm_maskload_epi32(p, (__m128i)m)", "__AVX2__"),
                  (16, "float"): ("_mm512_maskz_loadu_ps(_mm512_test_epi32_mask((__m512i)m, (__m512i)m), p)",
                                  "__AVX512F__"),
                  (8, "double"): ("_mm512_maskz_loadu_pd(_mm512_test_epi64_mask((__m512i)m, (__m512i)m), p)",
                                  "__AVX512F__"),
                  (16, "int"): ("_mm512_maskz_loadu_epi32(_mm512_test_epi32_mask((__m512i)m, (__m512i)m), p)",
                                "__AVX512F__")}


def _maskload(lanes: int, scalar: str) -> str:
    """The prelude's `tolk_maskload<lanes>_<scalar>(p, mask)`: the vector at `p` with the lanes whose integer
    `mask` lane is 0 (not -1) zero and unread (a border vector of a padded convolution reads past the row's
    ends only in those lanes). An AVX or AVX-512 masked load where the target has one, else lane by lane (a loop
    gcc leaves scalar, with a branch a lane, once it is inlined into a kernel: a padded convolution with 64-byte
    vectors ran at a quarter of its speed with 32-byte ones)."""
    vec = f"tolk_{scalar}_x{lanes}"
    mask = f"tolk_{'long_long' if scalar == 'double' else 'int'}_x{lanes}"
    head = f"{_INLINE} {vec} tolk_maskload{lanes}_{scalar}(const {scalar}* p, {mask} m) {{\n"
    loop = f"{head}  {vec} r; for (int i = 0; i < {lanes}; i++) r[i] = m[i] ? p[i] : 0; return r;\n}}\n"
    if (avx := _AVX_MASKLOADS.get((lanes, scalar))) is None:
        return loop
    load, macro = avx
    return f"#if defined({macro})\n#include <immintrin.h>\n{head}  return ({vec}){load};\n}}\n#else\n{loop}#endif\n"


# a run of lanes of a vector (`tolk_float_x8_of16_at8(v)`: lanes 8..15 of a 16-lane vector)
_SLICE = re.compile(r"\btolk_(\w+?)_x(\d+)_of(\d+)_at(\d+)\b")


def _slice(scalar: str, n: int, width: int, at: int) -> str:
    """The prelude's `tolk_<scalar>_x<n>_of<width>_at<at>(v)`: lanes at..at+n-1 of a `width`-lane vector. A shuffle
    where the compiler has one (clang; gcc from 12: one register move or extraction), else a copy of the bytes."""
    dst, src = f"tolk_{scalar}_x{n}", f"tolk_{scalar}_x{width}"
    lanes = ", ".join(str(i) for i in range(at, at + n))
    return (f"{_INLINE} {dst} {dst}_of{width}_at{at}({src} v) {{\n#if defined(__clang__) || __GNUC__ >= 12\n"
            f"  return __builtin_shufflevector(v, v, {lanes});\n#else\n  {dst} r; __builtin_memcpy(&r, (const char*)&v"
            f" + {at} * sizeof(v[0]), sizeof r); return r;\n#endif\n}}\n")


# lanes of a vector type: GCC vector extensions (gcc and clang); a bool lane is a byte (C has no _Bool vectors)
_VEC = re.compile(r"\btolk_(\w+?)_x(\d+)\b")


class CRenderer(CStyleRenderer):
    """C99 + GNU extensions for gcc/clang with OpenMP: `LoopKind.PARALLEL` splits a loop across threads, `SIMD`
    vectorizes it, `UNROLL` unrolls it, `PARALLEL_REDUCE` splits a reduction loop across threads (`loop_pragmas`,
    `loop_pragma`); vector values use unaligned GCC vector types `tolk_<type>_x<lanes>` (`vector_bytes`)."""

    device = "CPU"
    vector_bytes = 64  # the widest vector register the optimizer plans lanes for (AVX-512) ...
    vector_registers = 32  # ... and how many: each instance reads its compiler's target (`__init__`)
    type_names = {**CStyleRenderer.type_names, dtypes.float16: "_Float16"}
    loop_pragmas = {LoopKind.PARALLEL: "#pragma omp parallel for",
                    LoopKind.PARALLEL_TILES: "#pragma omp parallel for schedule(dynamic)",
                    LoopKind.SIMD: "#pragma omp simd", LoopKind.PARALLEL_SIMD: "#pragma omp parallel for simd",
                    LoopKind.UNROLL: "#pragma GCC unroll 16",
                    LoopKind.UNROLL4: "#pragma GCC unroll 4"}

    def __init__(self, device: object = None):
        super().__init__(device)
        # plans follow the machine: vectors the compiler targets with CFLAGS (a 64-byte GCC vector on an AVX2
        # CPU is lowered through memory: matmul ran at 1 GFLOP/s), caches the OS reports
        from tolk_cpu.runtime import CPUCompiler  # deferred: the entry point stays import-light
        self.vector_bytes, self.vector_registers = CPUCompiler().vector_target()
        caches = host.cache_sizes()
        self.cache_bytes = (caches.l1, caches.l2, caches.l3)

    def index_width(self, lin: Sequence[UOp]) -> int:
        """64 for a kernel with a gated buffer access (a read through a PAD): in 32-bit index arithmetic gcc
        cannot prove the gated addresses affine and vectorizes the loop with gathers instead of masked loads
        (the convolution's pad copy ran 2.2x slower, docs/performance.md "Convolutions (CPU)"); else as
        every renderer (32 unless an index may pass the int32 range). A kernel whose gated accesses are all
        vector accesses (masked loads, codegen/borders.py) keeps 32 bits: its lane masks are compared in index
        vectors, and 8 lanes of 64 bits are a 64-byte vector that AVX2 code keeps in memory (the border of a
        padded convolution ran 7x slower)."""
        if any(u.op is Op.INDEX and len(u.src) > 2 and u.src[0].op is Op.PARAM and u.arg != "vec" for u in lin):
            return 64
        return super().index_width(lin)

    def loop_pragma(self, kind: LoopKind, folds: Sequence[tuple[Op, str, DType]]) -> str | None:
        kind = LoopKind.of(kind)  # a subclass passing a plain string: deprecated, warned
        if folds and kind not in (LoopKind.UNROLL, LoopKind.UNROLL4) and all(op in _FOLD_OPS for op, _, _ in folds):
            # lanes (and, for PARALLEL_REDUCE, threads) fold separately and meet at the end: the only
            # reordering of float sums we allow. OpenMP's own `max` drops NaN where lanes meet: floats fold with
            # tolk_max, declared by the prelude with the NaN-keeping MAX.
            head = "#pragma omp parallel for simd " if kind is LoopKind.PARALLEL_REDUCE else "#pragma omp simd "
            return head + " ".join(f"reduction({_fold_op(op, dt)}:{acc})" for op, acc, dt in folds)
        return super().loop_pragma(kind, folds)

    def multiply_add(self, a: str, b: str, acc: str, operand_dtypes: list[DType], dt: DType) -> str | None:
        # a sum of products folds with FMA (one rounding per term, as BLAS does): twice the throughput of a
        # multiply and an add, which -ffp-contract=off keeps apart elsewhere. Vectors: a lane-wise
        # __builtin_fma* helper (prelude), which gcc and clang compile to one vector FMA
        fn = _SCALAR_FMA.get(dt.scalar())
        if fn is None:
            return None
        if dt.count == 1:
            return f"{fn}({a}, {b}, {acc})"
        vec = self.vector_type_name(dt)
        a, b = (x if d.count > 1 else f"(({vec}){{{', '.join([x] * dt.count)}}})"
                for x, d in zip((a, b), operand_dtypes, strict=True))
        return f"tolk_fma{dt.count}_{self.type_name(dt.scalar())}({a}, {b}, {acc})"

    def buffer_type_name(self, dt: DType) -> str:
        # bool buffers as bytes (numpy's bools are bytes of 0 or 1): gcc 12 vectorizes no loop that selects
        # on a value loaded through a _Bool pointer ("no vectype" on AVX2), so a masked softmax ran scalar
        return "unsigned char" if dt == dtypes.bool else super().buffer_type_name(dt)

    def masked_load(self, ptr: str, gate: UOp, ref: Callable[[UOp], str], dt: DType) -> str:
        # the prelude's helper: one AVX masked load where the target has it (a padded convolution's border
        # vectors, codegen/borders.py), else lane by lane. Its mask is an integer vector of the lanes' width,
        # -1 where the gate holds, built with native vector compares where the gate is bounds tests of the
        # lane index (a bool vector is computed lane by lane, which cost more than the loads it guards)
        scalar = self.type_name(dt.scalar())
        if scalar not in ("float", "double", "int"):  # the prelude declares helpers for these only
            return super().masked_load(ptr, gate, ref, dt)
        mask_t = self.vector_type_name((dtypes.int64 if dt.itemsize == 8 else dtypes.int32).vec(dt.count))
        mask = self._lane_mask(gate, ref, mask_t)
        if mask is None:
            mask = f"(-__builtin_convertvector({ref(gate)}, {mask_t}))"
        return f"tolk_maskload{dt.count}_{scalar}({ptr}, {mask})"

    def _lane_mask(self, u: UOp, ref: Callable[[UOp], str], mask_t: str) -> str | None:
        """Bool `u` as a `mask_t` vector of -1 / 0 lanes by native vector operations (a scalar bool is -1 or 0
        in every lane), or None where it is not made of ANDs, negations and compares of index vectors of
        `mask_t`'s lanes."""
        if u.dtype.count == 1:
            return f"(-({mask_t.split('_x')[0].removeprefix('tolk_').replace('_', ' ')})({ref(u)}))"
        if u.op is Op.AND:
            parts = [self._lane_mask(s, ref, mask_t) for s in u.src]
            return None if None in parts else f"({parts[0]}&{parts[1]})"
        if u.op is Op.CMPNE and u.src[1].op is Op.CONST and u.src[1].arg is True:
            inner = self._lane_mask(u.src[0], ref, mask_t)
            return None if inner is None else f"(~{inner})"
        if u.op is Op.CMPLT and all(s.dtype.count == 1 or self.type_name(s.dtype) == mask_t for s in u.src):
            return f"({ref(u.src[0])}<{ref(u.src[1])})"
        return None

    def vector_expression(self, u: UOp, ref: Callable[[UOp], str],
                          index: Callable[[UOp], tuple[str, str, str | None]]) -> str:
        # compares and selects of 4- and 8-byte lanes in gcc's vector operations instead of a loop over the lanes
        # (a matmul's GELU epilogue spent three times the matmul's own time in those loops)
        if u.op in _NATIVE_COMPARES and (native := self._vector_compare(u, ref)) is not None:
            return native
        if u.op is Op.WHERE and (native := self._vector_select(u, ref)) is not None:
            return native
        if u.op is Op.GEP:  # a contiguous run of lanes (a half in the fold of a vector accumulator): a shuffle
            start, n = u.arg[0], len(u.arg)
            if u.arg != tuple(range(start, start + n)):
                raise NotImplementedError(f"GEP of lanes {u.arg}: the C renderer takes one lane or a contiguous run")
            return f"{self.vector_type_name(u.dtype)}_of{u.src[0].dtype.count}_at{start}({ref(u.src[0])})"
        return super().vector_expression(u, ref, index)

    def _operand(self, s: UOp, vec: DType, ref: Callable[[UOp], str]) -> str:
        """Operand `s` as a vector of `vec`: itself, or a scalar copied into every lane (a braced list: adding it
        to a zero vector would turn -0.0 into +0.0)."""
        return ref(s) if s.dtype.count > 1 else f"(({self.type_name(vec)}){{{', '.join([ref(s)] * vec.count)}}})"

    def _vector_compare(self, u: UOp, ref: Callable[[UOp], str]) -> str | None:
        """A lane-wise compare as gcc's vector compare (-1 / 0 lanes of the operands' width), narrowed to the
        bool vector's 0 / 1 lanes; None for lanes it does not cover."""
        vec = next(s.dtype for s in u.src if s.dtype.count > 1)
        if vec.scalar() not in _MASK_LANES or any(s.dtype.scalar() != vec.scalar() for s in u.src):
            return None
        a, b = (self._operand(s, vec, ref) for s in u.src)
        return f"(-__builtin_convertvector(({a}){_COMPARE_SYMBOLS[u.op]}({b}), {self.type_name(u.dtype)}))"

    def _vector_select(self, u: UOp, ref: Callable[[UOp], str]) -> str | None:
        """`where(c, x, y)` with a bool vector `c` as a bitwise select under c's lanes widened to -1 / 0 masks of
        x's width; None for a scalar condition or lanes it does not cover."""
        cond, x, y = u.src
        if cond.dtype.count == 1 or u.dtype.scalar() not in _MASK_LANES:
            return None
        mask_t = self.type_name(_MASK_LANES[u.dtype.scalar()].vec(u.dtype.count))
        m = f"(-__builtin_convertvector({ref(cond)}, {mask_t}))"
        xs, ys = (f"(({mask_t}){self._operand(s, u.dtype, ref)})" for s in (x, y))
        return f"(({self.type_name(u.dtype)})(({m}&{xs})|(~{m}&{ys})))"

    def expression(self, u: UOp, ref: Callable[[UOp], str],
                   index: Callable[[UOp], tuple[str, str, str | None]]) -> str:
        # one lane of a vector (a vector accumulator's lanes folded after its loop): gcc's vector subscript
        return f"{ref(u.src[0])}[{u.arg}]" if u.op is Op.GEP else super().expression(u, ref, index)

    def unary(self, op: Op, x: str, dt: DType) -> str:
        return f"tolk_exp2f({x})" if op is Op.EXP2 and dt == dtypes.float32 else super().unary(op, x, dt)

    def vector_type_name(self, dt: DType) -> str:
        return f"tolk_{self.type_name(dt.scalar()).replace(' ', '_')}_x{dt.count}"

    def prelude(self, sources: Sequence[str]) -> str:
        head = "#include <math.h>\n\n" if any("NAN" in s or "INFINITY" in s for s in sources) else ""
        if any("tolk_exp2f(" in s for s in sources):
            head += _EXP2F + "\n"
        if any(f"reduction({_FLOAT_MAX}:" in s for s in sources):
            head += "".join(f"#pragma omp declare reduction({_FLOAT_MAX} : {t} : omp_out = (omp_out<omp_in||omp_in!="
                            f"omp_in)?omp_in:omp_out) initializer(omp_priv = -({t})__builtin_inf())\n"
                            for t in ("float", "double", "_Float16"))
        fmas = sorted({m.groups() for s in sources for m in _FMA.finditer(s)})
        masked = sorted({m.groups() for s in sources for m in _MASKLOAD.finditer(s)})
        slices = sorted({m.groups() for s in sources for m in _SLICE.finditer(s)})
        vecs = sorted({m.groups() for s in sources for m in _VEC.finditer(s)} | {(t, n) for n, t in fmas + masked} |
                      {("long_long" if t == "double" else "int", n) for n, t in masked} |
                      {(t, n) for t, n, _, _ in slices} | {(t, w) for t, _, w, _ in slices})
        for scalar, lanes in vecs:
            ctype = "signed char" if scalar == "_Bool" else scalar.replace("_", " ")
            size = int(lanes) * _SIZES[ctype]
            head += (f"typedef {ctype} tolk_{scalar}_x{lanes} "
                     f"__attribute__((vector_size({size}), aligned({_SIZES[ctype]})));\n")
        for lanes, scalar in fmas:
            vec = f"tolk_{scalar}_x{lanes}"
            head += (f"{_INLINE} {vec} tolk_fma{lanes}_{scalar}({vec} a, {vec} b, {vec} c) {{ {vec} r; "
                     f"for (int i = 0; i < {lanes}; i++) r[i] = {_SCALAR_FMA_NAMES[scalar]}(a[i], b[i], c[i]); "
                     "return r; }\n")
        head += "".join(_maskload(int(lanes), scalar) for lanes, scalar in masked)
        head += "".join(_slice(scalar, int(n), int(w), int(at)) for scalar, n, w, at in slices)
        return head + ("\n" if vecs else "") + super().prelude(sources)


# lane types whose compares and selects run as gcc vector operations, with the integer lanes of their masks
_MASK_LANES = {dtypes.float32: dtypes.int32, dtypes.int32: dtypes.int32, dtypes.uint32: dtypes.int32,
               dtypes.float64: dtypes.int64, dtypes.int64: dtypes.int64, dtypes.uint64: dtypes.int64}
_NATIVE_COMPARES = frozenset({Op.CMPLT, Op.CMPNE, Op.CMPEQ})
_COMPARE_SYMBOLS = {Op.CMPLT: "<", Op.CMPNE: "!=", Op.CMPEQ: "=="}

_SIZES = {CRenderer.type_names[dt].replace("_Bool", "signed char"): dt.itemsize
          for dt in CRenderer.type_names if dt is not dtypes.index}
