"""The CPU matmul plan (codegen/matmul.py): packed B panels, a register tile sized from the vector registers,
edge tiles moved back over their neighbours. Every case is built first and realized together (one compile) and
must equal numpy; on CPU each float32/float64 case must also have taken the plan (its kernel packs a panel).
OPENCL keeps its own plan (work items with vector lanes) and must give the same values.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from tolk_cpu.renderer import CRenderer
from tolk_cpu.runtime import CPUCompiler, _parse_vector_target

from tests.frontend.helpers import check_cases_together
from tolk_core import Tensor, config
from tolk_core.codegen import generate
from tolk_core.codegen.choices import Choices, current, using
from tolk_core.codegen.matmul import dot_tile, k_block, match, register_tile, tile_sizes
from tolk_core.codegen.optimize import _output_ranges
from tolk_core.render import host
from tolk_core.render.ccompile import run_compiler
from tolk_core.testing import kernels

SIZES = [(1, 7, 1), (1, 129, 65), (7, 7, 7), (65, 65, 65), (129, 257, 129), (257, 129, 65), (1, 64, 40), (40, 64, 1),
         (9, 300, 17), (130, 70, 200)]


def _layouts(a: np.ndarray, b: np.ndarray, size: str) -> list:
    """a @ b with each operand as given and one of them stored transposed (a transposed view read in place)."""
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    return [(size, lambda T: T(a) @ T(b), a @ b), (f"A.T@B {size}", lambda T: T(at).T @ T(b), a @ b),
            (f"A@B.T {size}", lambda T: T(a) @ T(bt).T, a @ b)]


def _cases(rng: np.random.Generator):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    out = []
    for m, k, n in SIZES:
        out += _layouts(f(m, k), f(k, n), f"{m}x{k}x{n}")
    x, w, bias = f(4, 33, 40), f(4, 40, 72), f(72)
    x2, w2 = f(130, 40), f(40, 72)
    d1, d2 = x2.astype(np.float64), w2.astype(np.float64)
    out += [("batched", lambda T: T(x) @ T(w), x @ w),
            ("batch of A, one B", lambda T: T(x) @ T(w2), x @ w2),
            ("bias relu", lambda T: (T(x2) @ T(w2) + T(bias)).relu(), np.maximum(x2 @ w2 + bias, 0)),
            ("scaled residual", lambda T: (T(x2) @ T(w2)) * 0.5 + T(x2 @ w2), (x2 @ w2) * 0.5 + x2 @ w2),
            ("float64", lambda T: T(d1) @ T(d2), d1 @ d2)]
    return out


def test_matmuls_match_numpy(device):
    check_cases_together(_cases(np.random.default_rng(0)), device, rtol=1e-5, atol=2e-4)  # sums of <= 300 terms


def _blocked_cases(rng: np.random.Generator):
    """Sums blocked 32 deep at most (the MATMUL_KC knob): K = 96 in three blocks, 300 in ten of 30, 257 (a
    prime) whole; sizes that fill no tile, one row (A @ B.T: packed), transposed operands, a batch, a bias and
    relu after the last block, float64."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    out = []
    for m, k, n in [(65, 96, 129), (130, 300, 70), (9, 257, 17), (7, 64, 8), (1, 96, 40)]:
        out += _layouts(f(m, k), f(k, n), f"{m}x{k}x{n}")
    x, w, bias = f(3, 33, 96), f(3, 96, 40), f(40)
    d1, d2 = f(65, 96).astype(np.float64), f(96, 40).astype(np.float64)
    out += [("batched", lambda T: T(x) @ T(w), x @ w),
            ("bias relu", lambda T: (T(x) @ T(w) + T(bias)).relu(), np.maximum(x @ w + bias, 0)),
            ("float64", lambda T: T(d1) @ T(d2), d1 @ d2)]
    return out


def test_k_blocked_matmuls_match_numpy(device):
    with using(Choices.of({"MATMUL_KC": 32, "MATMUL_PACK_B": 1})):  # small Bs: packed, so blocked
        check_cases_together(_blocked_cases(np.random.default_rng(5)), device, rtol=1e-5, atol=2e-4)


def test_k_blocks_keep_a_c_block():
    """With K past the block, the tile's sums go through a kernel-local C block, one block of k at a time; a
    prime K keeps the whole sum in the tile's registers."""
    with using(Choices.of({"MATMUL_KC": 32})):
        blocked, = _kernel_sources(lambda a, b: a @ b, ((65, 96), "float32"), ((96, 129), "float32"))
        whole, = _kernel_sources(lambda a, b: a @ b, ((65, 257), "float32"), ((257, 129), "float32"))
    assert "cblock0[" in blocked and "< 3;" in blocked and "< 32;" in blocked and "tolk_fma" in blocked
    assert "cblock0" not in whole and "panel0[" in whole


def _kernel_sources(fn, *specs, renderer=None, pack: bool = True) -> list[str]:
    """The CPU sources of `fn`'s kernels; `pack`: B copied into panels whatever its size (knob MATMUL_PACK_B),
    so these small shapes show the packed plan, which a B that fits half the L2 cache would not take."""
    renderer = renderer or CRenderer()
    with using(Choices.of({**current().as_dict(), **({"MATMUL_PACK_B": 1} if pack else {})})):
        return [generate(c.src[0], renderer).source for c in kernels.build(fn, *specs).calls]


@pytest.mark.parametrize("name,fn,specs", [
    ("A@B", lambda a, b: a @ b, [((257, 129), "float32"), ((129, 65), "float32")]),
    ("A.T@B", lambda a, b: a.T @ b, [((129, 257), "float32"), ((129, 65), "float32")]),
    ("A@B.T", lambda a, b: a @ b.T, [((257, 129), "float32"), ((65, 129), "float32")]),
    ("batched", lambda a, b: a @ b, [((4, 33, 40), "float32"), ((4, 40, 72), "float32")]),
    ("epilogue", lambda a, b, c: (a @ b + c).relu(), [((64, 40), "float32"), ((40, 72), "float32"),
                                                      ((72,), "float32")]),
    ("float64", lambda a, b: a @ b, [((64, 40), "float64"), ((40, 72), "float64")]),
])
def test_the_plan_is_taken(name, fn, specs):
    """Transposed operands, batches and an epilogue keep the packed-panel plan: one kernel, which packs a panel
    and folds vector accumulators with FMAs."""
    srcs = _kernel_sources(fn, *specs)
    assert len(srcs) == 1, name
    assert "panel0[" in srcs[0] and "tolk_fma" in srcs[0], name


def test_one_row_of_tiles_reads_b_in_place_where_it_can():
    """A matrix-vector product reads each value of B once: B is read in place (no panel) when its rows are
    contiguous; transposed, by the dot plan (vectors along k) when K is a whole number of vectors, else packed
    (a vector load along the row needs contiguous columns)."""
    gemv, = _kernel_sources(lambda a, b: a @ b, ((1, 129), "float32"), ((129, 65), "float32"))
    assert "panel0" not in gemv and "tolk_fma" in gemv
    gemv_t, = _kernel_sources(lambda a, b: a @ b.T, ((1, 512), "float32"), ((65, 512), "float32"))
    assert "panel0" not in gemv_t and "tolk_fma" in gemv_t
    gemv_odd, = _kernel_sources(lambda a, b: a @ b.T, ((1, 513), "float32"), ((65, 513), "float32"))
    assert "panel0[" in gemv_odd and "tolk_fma" in gemv_odd


def _dot_cases(rng: np.random.Generator):
    """x @ W.T with few rows and W past any L1 cache (64 KiB and more: the dot plan): tiles that do not fill
    (1-31 rows, 1-384 columns), K of 4-float vectors only, a batch, a bias and relu, float64; beside them A
    read transposed (not contiguous along k: not the dot plan), K of no whole vector and small Ws (packed)."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    out = []
    for m, k, n in [(1, 2048, 9), (2, 4100, 7), (5, 1200, 17), (16, 128, 384), (31, 264, 65), (3, 8200, 1),
                    (32, 1000, 20), (2, 12, 7), (7, 4, 9), (4, 6, 5), (3, 2051, 9)]:
        a, w = f(m, k), f(n, k)
        out.append((f"{m}x{k}x{n}", lambda T, a=a, w=w: T(a) @ T(w).T, a @ w.T))
    at, w = f(1000, 5), f(11, 1000)
    x, wb, bias = f(3, 5, 1024), f(3, 17, 1024), f(17)
    d1, d2 = f(6, 1024).astype(np.float64), f(10, 1024).astype(np.float64)
    out += [("A.T@W.T", lambda T: T(at).T @ T(w).T, at.T @ w.T),
            ("batched", lambda T: T(x) @ T(wb).transpose(1, 2), x @ wb.transpose(0, 2, 1)),
            ("one W for a batch", lambda T: T(x) @ T(wb[0]).T, x @ wb[0].T),
            ("bias relu", lambda T: (T(x[0]) @ T(wb[0]).T + T(bias)).relu(), np.maximum(x[0] @ wb[0].T + bias, 0)),
            ("float64", lambda T: T(d1) @ T(d2).T, d1 @ d2.T)]
    return out


def test_dot_plan_matmuls_match_numpy(device):
    check_cases_together(_dot_cases(np.random.default_rng(7)), device, rtol=1e-4, atol=1e-3)  # sums of <= 8200


def test_dot_plan_with_more_rows_matches_numpy():
    """The knob lets the dot plan take 40-130 rows (several rows of tiles, the last moved back)."""
    with using(Choices.of({"MATMUL_DOT_ROWS": 256})):
        check_cases_together(_dot_cases(np.random.default_rng(8))[:5] + [
            (f"{m}x1024x{n}", lambda T, a=a, w=w: T(a) @ T(w).T, a @ w.T)
            for m, n in [(41, 70), (130, 9)]
            for a, w in [(np.random.default_rng(m).standard_normal((m, 1024)).astype(np.float32),
                          np.random.default_rng(n).standard_normal((n, 1024)).astype(np.float32))]], "CPU",
            rtol=1e-4, atol=1e-3)


def test_few_rows_times_a_transposed_b_take_the_dot_plan():
    """x @ W.T with at most MATMUL_DOT_ROWS rows and W past the L1 cache reads W in place, folding each vector
    accumulator's lanes after the loop (a tree of halves): no panel. More rows, the knob at 0, a K of no whole
    vector, or a W the L1 cache holds (here fake L1s of 32 and 64 KiB against W's 36 KiB): packed."""
    def src(m: int, k: int = 512, renderer=None) -> str:
        s, = _kernel_sources(lambda a, w: a @ w.T, ((m, k), "float32"), ((72, k), "float32"), renderer=renderer)
        return s
    for m in (1, 16, 32):
        assert "panel0" not in src(m) and "tolk_fma" in src(m) and re.search(r"_of\d+_at\d+\(acc", src(m)), m
    assert "panel0[" in src(33) and "panel0[" in src(16, 513)
    small_l1, big_l1 = CRenderer(), CRenderer()  # not this machine's L1 (32 KiB on Zen 3, 48 KiB on Ice Lake)
    small_l1.cache_bytes = (32 << 10, *small_l1.cache_bytes[1:])
    big_l1.cache_bytes = (64 << 10, *big_l1.cache_bytes[1:])
    assert "panel0" not in src(16, 128, small_l1) and "panel0[" in src(16, 128, big_l1)
    with using(Choices.of({"MATMUL_DOT_ROWS": 0})):
        assert "panel0[" in src(16)


def test_the_dot_tile_follows_the_registers():
    """MR x NR accumulators + MR A vectors + one B vector + one spare fit the registers, fewest loads per FMA:
    AVX2 2 x 6, AVX-512 5 x 5; never more rows or columns than the matrix has."""
    assert dot_tile(16, 384, 16) == (2, 6) and dot_tile(16, 384, 32) == (5, 5)
    assert dot_tile(1, 512, 16) == (1, 8) and dot_tile(16, 3, 16) == (3, 3) and dot_tile(1, 1, 16) == (1, 1)
    for regs in (8, 16, 32):
        mr, nr = dot_tile(64, 64, regs)
        assert mr * nr + mr + 2 <= regs


def test_a_b_that_fits_half_the_l2_cache_is_read_in_place():
    """Left to the heuristics, a B of 40 x 72 floats (11.5 KiB) fits half the L2 cache: no panel copy, B read in
    place (its rows contiguous), values equal to numpy's; with a fake 16 KiB L2 (8 KiB of it for B) it is
    packed; transposed it is packed whatever its size."""
    small, = _kernel_sources(lambda a, b: a @ b, ((64, 40), "float32"), ((40, 72), "float32"), pack=False)
    assert "panel0" not in small and "tolk_fma" in small
    tiny_l2 = CRenderer()
    tiny_l2.cache_bytes = (tiny_l2.cache_bytes[0], 16 << 10)
    packed, = _kernel_sources(lambda a, b: a @ b, ((64, 40), "float32"), ((40, 72), "float32"), renderer=tiny_l2,
                              pack=False)
    assert "panel0[" in packed
    transposed, = _kernel_sources(lambda a, b: a @ b.T, ((64, 40), "float32"), ((72, 40), "float32"), pack=False)
    assert "panel0[" in transposed
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((64, 40)).astype(np.float32), rng.standard_normal((40, 72)).astype(np.float32)
    np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_a_b_read_in_place_is_shared_out_in_several_column_blocks():
    """With B read in place past one panel's budget (64 x 256 @ 256 x 1040 floats: 1 MiB of B, half of a fake
    4 MiB L2, over the 512 KiB a panel may take; AVX2-sized tiles of 16 columns), the threads' loop runs over 8
    column blocks of 9 micro-panels (65 in all, the last block short) instead of 3: blocks the first thread to
    start takes more of when the other starts late. Values equal numpy's at shapes that do not fill a block, on
    this machine's own plan."""
    r = CRenderer()
    r.cache_bytes, r.vector_bytes, r.vector_registers = (48 << 10, 4 << 20), 32, 16
    src, = _kernel_sources(lambda a, b: a @ b, ((64, 256), "float32"), ((256, 1040), "float32"), renderer=r,
                           pack=False)
    assert "panel0" not in src
    loop = re.search(r"#pragma omp parallel for schedule\(dynamic\)\s*for \(int \w+ = 0; \w+ < (\d+);", src)
    assert loop is not None and int(loop[1]) == 8
    rng = np.random.default_rng(3)
    for m, k, n in ((64, 256, 1040), (37, 200, 1000), (7, 33, 530)):
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_a_row_narrower_than_a_vector_keeps_the_generic_plan():
    src, = _kernel_sources(lambda a, b: a @ b, ((64, 40), "float32"), ((40, 3), "float32"))
    assert "panel0" not in src


def _shape(m: int, k: int, n: int):
    call, = kernels.build(lambda a, b: a @ b, ((m, k), "float32"), ((k, n), "float32")).calls
    ast = call.src[0].simplify()
    return match(ast, _output_ranges(ast))


def test_tile_sizes_follow_the_registers_and_the_caches():
    """AVX2 (32-byte vectors, 16 registers): 6 x 16 tiles (12 accumulators, 2 B vectors, one A value and one
    register left to the compiler: 8 loads per 12 FMAs); AVX-512 (64, 32): 6 x 64. K = 1024 is blocked 256 deep
    (a 6-row sliver of A in a quarter of a 32 KiB L1: at most 341), and the blocked panel fills the L2 cache: with
    512 KiB (4 KiB per column), 128 columns; with 256 KiB, 64. With 64 KiB a micro-panel of two vectors (64 KiB)
    does not fit half of it: one vector per row does, the rows grow to the 12 the registers allow, and k is
    blocked 128 deep (12-row slivers: at most 170); with 16 KiB not even one, and B is read in place."""
    assert register_tile(16, 100) == (2, 6) and register_tile(32, 100) == (4, 6)
    assert register_tile(16, 1) == (1, 12)  # a row one vector wide: the tallest tile
    mm = _shape(1024, 1024, 1024)
    assert mm is not None
    avx2 = tile_sizes(mm, 32, 16, 512 << 10, 32 << 10)
    assert avx2 is not None and (avx2.w, avx2.mr, avx2.nr, avx2.nc, avx2.panels, avx2.kc) == (8, 6, 16, 128, 8, 256)
    avx512 = tile_sizes(mm, 64, 32, 2 << 20, 48 << 10)
    assert avx512 is not None and (avx512.w, avx512.mr, avx512.nr) == (16, 6, 64)
    small = tile_sizes(mm, 32, 16, 256 << 10, 32 << 10)
    assert small is not None and (small.nc, small.panels) == (64, 16)
    narrow = tile_sizes(mm, 32, 16, 64 << 10, 32 << 10)
    assert narrow is not None and (narrow.mr, narrow.nr, narrow.nc, narrow.packed, narrow.kc) == (12, 8, 16, True, 128)
    unpacked = tile_sizes(mm, 32, 16, 16 << 10, 32 << 10)
    assert unpacked is not None and not unpacked.packed


def test_a_few_wide_panels_become_eight_for_the_threads():
    """The panels are the units the threads share: 128 x 384 x 1536 on AVX-512 with a 1 MiB L2 fits 320 columns
    a panel (five), and is cut into eight of 192 instead; a row of only eight micro-panels gets four panels of
    two (each keeps two micro-panels); six micro-panels keep their two panels (a power of two: three would leave
    one of two threads idle a third of the time); one panel stays one (the threads share its rows); a knob's
    width is kept."""
    mm = _shape(128, 384, 1536)
    assert mm is not None
    t = tile_sizes(mm, 64, 32, 1 << 20, 32 << 10)
    assert t is not None and (t.nr, t.nc, t.panels) == (64, 192, 8)
    eight = _shape(128, 512, 512)  # 8 micro-panels, 256 columns a panel by the L2 (two panels)
    assert eight is not None
    t = tile_sizes(eight, 64, 32, 1 << 20, 32 << 10)
    assert t is not None and (t.nc, t.panels) == (128, 4)
    one = _shape(128, 384, 256)
    assert one is not None
    t = tile_sizes(one, 64, 32, 1 << 20, 32 << 10)
    assert t is not None and t.panels == 1
    two = _shape(128, 384, 384)  # two panels of three micro-panels by the L2: not three panels of two
    assert two is not None
    t = tile_sizes(two, 64, 32, 1 << 20, 32 << 10)
    assert t is not None and (t.nc, t.panels) == (192, 2)
    with using(Choices.of({"MATMUL_NC": 320})):
        t = tile_sizes(mm, 64, 32, 1 << 20, 32 << 10)
    assert t is not None and (t.nc, t.panels) == (320, 5)


def test_k_blocks_divide_k():
    """A block of k is the largest divisor of K within the L1 bound and above half of it; K within the bound,
    or without such a divisor (a prime), is summed whole."""
    assert k_block(2048, 6, 4, 32 << 10) == 256 and k_block(768, 6, 4, 32 << 10) == 256
    assert k_block(300, 6, 4, 4 << 10) == 30  # at most 42 (4 KiB / 96 B): 30 divides 300, 31..42 do not
    assert k_block(341, 6, 4, 32 << 10) == 0 and k_block(1021, 6, 4, 32 << 10) == 0  # within; prime
    assert k_block(1024, 6, 8, 32 << 10) == 128  # float64: half as deep


def test_odd_sizes_get_whole_tiles_and_even_panels():
    mm = _shape(65, 100, 1000)
    assert mm is not None
    t = tile_sizes(mm, 32, 16, 128 << 10)  # 64 KiB per panel: 160 columns of K = 100
    assert t is not None and t.nr == 16 and t.nc * t.panels >= 1000 and t.nc % 16 == 0
    assert t.nc * (t.panels - 1) < 1000  # no panel lies wholly past the last column


def test_knobs_set_the_tile():
    mm = _shape(256, 256, 256)
    assert mm is not None
    with using(Choices.of({"MATMUL_MR": 4, "MATMUL_NR_VECTORS": 1, "MATMUL_NC": 64})):
        t = tile_sizes(mm, 32, 16, 512 << 10)
    assert t is not None and (t.mr, t.nr, t.nc, t.panels) == (4, 8, 64, 4)


def test_the_vector_target_comes_from_the_compiler_macros():
    assert _parse_vector_target("__AVX2__ __AVX__ __SSE2__") == (32, 16)
    assert _parse_vector_target("__AVX512F__ __AVX__ __SSE2__") == (64, 32)
    assert _parse_vector_target("__ARM_NEON __aarch64__") == (16, 32)
    assert _parse_vector_target("") == (16, 16)
    with config.override(CPU_VECTOR_BYTES=64):
        assert _parse_vector_target("__AVX__") == (64, 32)
    # a width the user prefers caps the vectors the renderer writes (wider ones the compiler would split)
    assert _parse_vector_target("__AVX512F__ __AVX__", ["-O2", "-mprefer-vector-width=256"]) == (32, 32)
    assert _parse_vector_target("__AVX__", ["-mprefer-vector-width=512"]) == (32, 16)


@pytest.mark.parametrize("macros, flags, added", [
    ("__AVX512F__ __AVX__ __SSE2__", ["-O2"], ["-mprefer-vector-width=512"]),
    ("__AVX512F__ __AVX__ __SSE2__", ["-O2", "-mprefer-vector-width=256"], []),  # the user's choice stands
    ("__AVX__ __SSE2__", ["-O2"], []),
    ("__ARM_NEON __aarch64__", ["-O2"], []),
])
def test_compile_flags_let_64_byte_vectors_be_one_register(monkeypatch, macros, flags, added):
    cc = CPUCompiler(flags=flags)
    monkeypatch.setattr(cc, "_vector_macros", lambda: macros)
    assert cc.target_flags == [*cc.flags, *added]


def test_a_64_byte_fma_helper_is_one_instruction(tmp_path):
    """The renderer's lane-wise FMA helper over 16 floats, compiled with the kernels' flags, is one zmm FMA: under
    gcc's 256-bit preference (its tuning for recent Intel CPUs) it became two halves joined through the stack."""
    cc = CPUCompiler()
    if "__AVX512F__" not in cc._vector_macros().split():
        pytest.skip("the compiler targets no AVX-512 on this CPU: the renderer writes no 64-byte vectors")
    src = tmp_path / "k.c"
    src.write_text(CRenderer().prelude(["tolk_fma16_float(a, b, c)"]) +
                   "tolk_float_x16 f(tolk_float_x16 a, tolk_float_x16 b, tolk_float_x16 c) "
                   "{ return tolk_fma16_float(a, b, c); }\n")
    asm = run_compiler([cc.cc, *cc.target_flags, "-S", "-o", "-", str(src)]).stdout
    body = [ln.split()[0] for ln in asm.splitlines() if ln.startswith("\t") and not ln.startswith("\t.")]
    assert sum("fmadd" in op for op in body) == 1, asm
    assert any("fmadd" in ln and "zmm" in ln for ln in asm.splitlines()), asm
    assert not any("extract" in op for op in body), asm


def _fake_sysfs(root: Path, caches: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_cache_sizes_from_sysfs_and_the_setting(tmp_path):
    root = _fake_sysfs(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                  (3, "Unified", "105M")])
    got = host.cache_sizes(root)
    assert (got.l1, got.l2, got.l3) == (48 << 10, 2 << 20, 105 << 20)
    with config.override(CPU_CACHE_SIZES="32K,1M,32M"):
        got = host.cache_sizes(root)
        assert (got.l1, got.l2, got.l3) == (32 << 10, 1 << 20, 32 << 20) and "CPU_CACHE_SIZES" in got.source
    with config.override(CPU_CACHE_SIZES="32K,1M"), pytest.raises(ValueError, match="three sizes"):
        host.cache_sizes(root)
    with config.override(CPU_CACHE_SIZES="32K,1Q,32M"), pytest.raises(ValueError, match="not a cache size"):
        host.cache_sizes(root)


def test_fake_cache_sizes_reach_the_plan():
    """A renderer made under CPU_CACHE_SIZES sizes its plan from them: a 16 KiB L1 blocks K = 256 128 deep (at
    most 170) in a 6 x 64 C block, and the blocked panel fills the 64 KiB L2 (four 16-column micro-panels of
    K = 256); a 32 KiB L1 sums K = 256 whole, and half of a 1 MiB L2 holds the whole row (32 micro-panels)."""
    fn, specs = (lambda a, b: a @ b), (((256, 256), "float32"), ((256, 512), "float32"))
    with config.override(CPU_CACHE_SIZES="16K,64K,1M", CPU_VECTOR_BYTES=32):
        small, = _kernel_sources(fn, *specs)
    with config.override(CPU_CACHE_SIZES="32K,1M,8M", CPU_VECTOR_BYTES=32):
        large, = _kernel_sources(fn, *specs)
    assert f"panel0[{256 * 64}]" in small and f"cblock0[{6 * 64}]" in small and "< 128;" in small
    assert f"panel0[{256 * 512}]" in large and "cblock0" not in large
    with config.override(CPU_CACHE_SIZES="4K,8K,16K", CPU_VECTOR_BYTES=32):  # K x 8 floats > 4 KiB: in place
        tiny, = _kernel_sources(fn, *specs)
    assert "panel0" not in tiny and "tolk_fma8_float(" in tiny


def test_scalar_sums_of_products_fold_with_fma():
    """A dot product folds with one rounding per term (__builtin_fmaf) and matches numpy."""
    src, = _kernel_sources(lambda a, b: (a * b).sum(), ((1000,), "float32"), ((1000,), "float32"))
    assert "__builtin_fmaf(" in src
    from tolk_core import Tensor
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    got = (Tensor(a, device="CPU") * Tensor(b, device="CPU")).sum().numpy()
    np.testing.assert_allclose(got, np.dot(a.astype(np.float64), b.astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_an_in_place_update_keeps_the_generic_plan():
    """`c += a @ b` into c's own buffer reads its output (overlapping edge tiles would read values already
    updated: `match` refuses such a kernel); into a new buffer the same expression takes the plan. Both odd-sized
    results are numpy's."""
    from tolk_core import Tensor
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((65, 33), (33, 70), (65, 70)))
    src, = _kernel_sources(lambda x, y, z: z + x @ y, ((65, 33), "float32"), ((33, 70), "float32"),
                           ((65, 70), "float32"))
    assert "panel0" in src  # into a new buffer: the plan
    got = (Tensor(c, device="CPU") + Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy()
    np.testing.assert_allclose(got, c + a @ b, rtol=1e-5, atol=1e-4)
    tc = Tensor(c.copy(), device="CPU").realize()
    tc.assign(tc + Tensor(a, device="CPU") @ Tensor(b, device="CPU")).realize()
    np.testing.assert_allclose(tc.numpy(), c + a @ b, rtol=1e-5, atol=1e-4)


def _fill_loop_bounds(src: str) -> list[int]:
    """The bounds of the loops that fill panel0 (from the panel's declaration to its first store), outermost
    first."""
    fill = src[src.index("panel0["):]
    fill = fill[:fill.index("panel0[", fill.index("]") + 1)]
    return [int(n) for n in re.findall(r"for \(int r\d+ = 0; r\d+ < (\d+);", fill)]


@pytest.mark.parametrize("k,run", [(96, 16), (40, 8), (300, 4), (257, 1)])
def test_a_b_stored_along_k_is_packed_a_run_of_k_at_a_time(k, run):
    """x @ W.T (W stored out x in): the fill copies each column's run of consecutive k (contiguous in W) before
    the next column, the run the largest of 16, 8, 4 dividing K (a prime K: one k at a time, across the columns);
    a B stored along its rows keeps one k for all the columns (contiguous across them). Values equal numpy's."""
    src, = _kernel_sources(lambda a, b: a @ b.T, ((64, k), "float32"), ((72, k), "float32"), pack=False)
    bounds = _fill_loop_bounds(src)
    if run > 1:
        assert bounds[-1] == run and bounds[-3] == k // run, (bounds, src)  # runs of k, columns, k in the run
    else:
        assert bounds[-2] == k, (bounds, src)  # each k, the panel's columns inside it
    rows, = _kernel_sources(lambda a, b: a @ b, ((64, k), "float32"), ((k, 72), "float32"))
    assert _fill_loop_bounds(rows)[-2] == k
    rng = np.random.default_rng(7)
    a, w = rng.standard_normal((64, k)).astype(np.float32), rng.standard_normal((72, k)).astype(np.float32)
    np.testing.assert_allclose((Tensor(a) @ Tensor(w).T).numpy(), a @ w.T, rtol=1e-5, atol=1e-4)
