"""Upcasting (codegen.upcast via optimize): register-blocked, vector-lane kernels compute what numpy does.

Every case is built first and realized together (one compile). The shapes pick each path: whole vectors with
row and column unrolling (matmul), lanes without a row axis (column sums), lane-wise fallbacks (max, where,
casts inside the reduction, int accumulators), and sizes that are not a whole number of vectors (no upcast).
"""
from __future__ import annotations

import re

import numpy as np

from tests.frontend.helpers import check_cases_together
from tolk_core.codegen import generate
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device


def _cases(rng: np.random.Generator):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    a, b, c = f(64, 48), f(48, 96), f(40, 32)
    bt, b2 = f(3, 16, 24), f(3, 24, 32)
    i1, i2 = rng.integers(-5, 5, (8, 12)).astype(np.int32), rng.integers(-5, 5, (12, 32)).astype(np.int32)
    odd1, odd2 = f(33, 17), f(17, 19)
    return [
        ("matmul", lambda T: T(a) @ T(b), a @ b),
        ("matmul_bias_relu", lambda T: (T(a) @ T(b) + T(b[0])).relu(), np.maximum(a @ b + b[0], 0)),
        ("column_sum", lambda T: T(c).sum(axis=0), c.sum(axis=0)),
        ("column_max", lambda T: T(c).max(axis=0), c.max(axis=0)),
        ("batched", lambda T: T(bt) @ T(b2), bt @ b2),
        ("where_in_reduce", lambda T: (T(c) > 0).where(T(c), T(c) * 2).sum(axis=0),
         np.where(c > 0, c, c * 2).sum(axis=0)),
        ("int_matmul", lambda T: T(i1) @ T(i2), i1 @ i2),
        ("odd_matmul", lambda T: T(odd1) @ T(odd2), odd1 @ odd2),
    ]


def test_upcast_kernels_match_numpy(device):
    """CPU: vector lanes and register blocks; OPENCL: register-blocked work items (GPU_BLOCK tiles)."""
    check_cases_together(_cases(np.random.default_rng(0)), device)


def test_matmul_is_register_blocked_vector_code():
    a, b = Tensor(np.ones((64, 64), np.float32), device="CPU"), Tensor(np.ones((64, 64), np.float32), device="CPU")
    linear, _, _ = schedule(target_for("CPU"), [(a @ b).uop])
    renderer = Device["CPU"].renderer
    src = generate(linear.src[0].src[0], renderer).source
    w = renderer.vector_bytes // 4  # the lanes the compiler targets (AVX2: 8, AVX-512: 16)
    # the matmul plan (codegen/matmul.py): at least 8 vector accumulators, each folded with an FMA; B (16 KiB)
    # fits half the L2 cache, so it is read in place, not copied into a panel
    assert f"tolk_float_x{w}" in src and "panel0[" not in src and src.count(f"= tolk_fma{w}_float(") >= 8


def _cpu_sources(t: Tensor) -> list[str]:
    linear, _, _ = schedule(target_for("CPU"), [t.uop])
    return [generate(call.src[0], Device["CPU"].renderer).source for call in linear.src]


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """numpy's cross-correlation of x (N, C, H, W) with w (O, C, 3, 3), padding 1."""
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w)


def test_rows_narrower_than_a_vector_run_in_narrower_vectors():
    """A convolution whose output rows are 4 wide (narrower than an 8- or 16-float vector) is register-blocked
    over 4-float vectors, and still matches numpy. A row takes the widest vector it holds, the last one moved
    back to end at the row's end where it does not divide the row (fewer vectors than a narrower one that
    divides it: 12 wide, two 8-float vectors at 0 and 4, not three of 4; 6 wide: 4-float vectors at 0 and 2;
    10 and 34 wide: 8-float ones on AVX2); a 3-wide row (no 4-float vector fits) stays scalar."""
    rng = np.random.default_rng(3)
    w8 = Device["CPU"].renderer.vector_bytes // 4
    for width, lanes in ((4, 4), (12, 8 if w8 >= 8 else 4), (6, 4), (10, 8 if w8 >= 8 else 4),
                         (34, w8 if w8 <= 32 else 16), (3, None)):
        x = rng.standard_normal((2, 3, 5, width)).astype(np.float32)
        w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
        t = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1)
        srcs = [s for s in _cpu_sources(t) if "acc" in s]  # the reduction (the pad copy has no accumulator)
        src = "\n".join(srcs)
        assert (f"tolk_float_x{lanes} acc" in src) if lanes else ("tolk_float_x" not in src), src
        np.testing.assert_allclose(t.numpy(), _conv_reference(x, w), rtol=1e-4, atol=1e-4)


def test_overlapping_last_vector_is_not_used_where_the_kernel_reads_what_it_stores():
    """An in-place update `c += a @ b` with 10-wide rows reads the buffer it stores: a last vector moved back
    over its neighbour would read values the neighbour already updated, so the row stays scalar; the values
    are numpy's."""
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((6, 5), (5, 10), (6, 10)))
    t = Tensor(c, device="CPU").realize()
    t.assign(t + Tensor(a, device="CPU") @ Tensor(b, device="CPU"))
    srcs = _cpu_sources(t)
    assert all("tolk_float_x" not in s for s in srcs), srcs
    np.testing.assert_allclose(t.numpy(), c + a @ b, rtol=1e-5, atol=1e-5)


def test_gated_loads_index_in_64_bits_and_match_numpy():
    """A copy through a PAD (gated loads) renders 64-bit indices, which gcc vectorizes with masked loads (in
    32 bits it gathers); the other kernels keep 32-bit indices. Values as numpy's pad."""
    x = np.random.default_rng(4).standard_normal((3, 5, 7)).astype(np.float32)
    t = Tensor(x, device="CPU").pad(((0, 0), (1, 1), (2, 1)))
    (src,) = _cpu_sources(t)
    assert "long long r" in src and not re.search(r"\bint r\d", src), src  # every loop (each piece's) 64-bit
    np.testing.assert_array_equal(t.numpy(), np.pad(x, ((0, 0), (1, 1), (2, 1))))
    (plain,) = _cpu_sources(Tensor(x, device="CPU") * 2)
    assert "int r0" in plain and "long long" not in plain, plain


def test_cpu_exp2_matches_libm_and_keeps_special_values():
    """The CPU dialect's vectorizable exp2f (exp(y) is exp2(y * log2(e)) in float32): within 3 ulp of libm's
    exp2 of the same argument where the result is a normal float; overflow, underflow, infinities and NaN as
    numpy's exp."""
    grid = np.linspace(-86, 88.7, 200_001, dtype=np.float32)
    special = np.array([89, 100, -104, -200, np.nan, np.inf, -np.inf, 0], np.float32)
    got = Tensor(np.concatenate([grid, special]), device="CPU").exp().numpy()
    np.testing.assert_allclose(got[:len(grid)], np.exp2(grid * np.float32(1.4426950216293335)), rtol=4e-7)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[len(grid):], np.exp(special))


def test_long_scalar_reduction_splits_across_threads():
    """Without the two-kernel split, one long sum is one loop that OpenMP splits across threads
    (`parallel reduce`): the partial sums meet at the end."""
    from tolk_core import config
    x = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
    with config.override(SPLIT_REDUCEOP=0):
        t = Tensor(x, device="CPU") * 3
        linear, _, _ = schedule(target_for("CPU"), [t.sum().uop])
        src = generate(linear.src[0].src[0], Device["CPU"].renderer).source
        got = t.sum().numpy()
    assert "#pragma omp parallel for simd reduction(+:acc" in src
    np.testing.assert_allclose(got, (x.astype(np.float64) * 3).sum(), rtol=1e-5)


def test_matmul_in_every_lane_and_narrow_dtype():
    """Vector lanes cover 32- and 64-bit dtypes; half, bfloat16 and 8-bit kernels keep scalar loops. Small
    integers make every product and sum exact in each dtype."""
    rng = np.random.default_rng(2)
    a, b = rng.integers(-3, 3, (32, 48)).astype(np.float32), rng.integers(-3, 3, (48, 64)).astype(np.float32)
    names = ("float16", "bfloat16", "int8", "int32", "float64", "int64")
    outs = [(Tensor(a, device="CPU").cast(n) @ Tensor(b, device="CPU").cast(n)).cast("float32") for n in names]
    outs[0].realize(*outs[1:])
    for name, got in zip(names, outs, strict=True):
        np.testing.assert_array_equal(got.numpy(), a @ b, err_msg=name)


def test_an_elementwise_kernel_counts_its_body_toward_the_threads():
    """Threads pay for an elementwise kernel by elements times its body's operations: 2^18 elements of tanh GELU
    (~45 operations each) run on threads, 2^18 of `x + 1` on one; both equal numpy."""
    x = np.linspace(-6, 6, 1 << 18, dtype=np.float32)

    def kernel_source(t: Tensor) -> str:
        linear, _, _ = schedule(target_for("CPU"), [t.uop])
        (call,) = linear.src
        return generate(call.src[0], Device["CPU"].renderer).source
    t = Tensor(x, device="CPU")
    heavy, light = t.gelu(approximate="tanh"), t + 1
    assert "omp parallel" in kernel_source(heavy) and "omp parallel" not in kernel_source(light)
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(heavy.numpy(), want, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(light.numpy(), x + 1)


def test_vector_accumulators_fold_as_a_tree_of_halves():
    """fold_lanes: a 16-lane vector folds as 8 + 8, 4 + 4, 2 + 2 (runs of lanes, GEP with a tuple arg), then two
    lanes; a count that is not a power of two (no C vector type of half its lanes) folds lane by lane."""
    from tolk_core.codegen.upcast import fold_lanes
    from tolk_core.ir.dtype import dtypes
    from tolk_core.ir.ops import Op
    from tolk_core.ir.uop import UOp
    for n, runs in [(16, [8, 8, 4, 4, 2, 2]), (8, [4, 4, 2, 2]), (12, []), (3, [])]:
        vec = UOp(Op.VECTORIZE, dtypes.float32.vec(n), tuple(UOp.const(dtypes.float32, float(i)) for i in range(n)))
        out = fold_lanes(vec, Op.ADD)
        geps = [u for u in out.toposort() if u.op is Op.GEP]
        assert sorted((len(u.arg) for u in geps if isinstance(u.arg, tuple)), reverse=True) == runs, n
        assert all(u.arg == tuple(range(u.arg[0], u.arg[0] + len(u.arg))) for u in geps if isinstance(u.arg, tuple))
        assert out.dtype == dtypes.float32


def test_folded_lanes_keep_special_values(device):
    """Sums, maxima and products through vector accumulators (a dot product of few rows, row reductions) against
    numpy, with NaN and infinities in some rows: the fold's tree reaches every lane once."""
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((5, 1024)).astype(np.float32), rng.standard_normal((72, 1024)).astype(np.float32)
    x[1, 7], x[2, 900], x[3, 513] = np.nan, np.inf, -np.inf
    y = rng.standard_normal((37, 1000)).astype(np.float32)
    y[3, 999], y[5, 0], y[6, 17], y[6, 18] = np.nan, np.inf, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        check_cases_together([
            ("dot", lambda T: T(x) @ T(w).T, x @ w.T),
            ("row_sum", lambda T: T(y).sum(axis=1), y.sum(axis=1)),
            ("row_max", lambda T: T(y).max(axis=1), y.max(axis=1)),
            ("row_min", lambda T: T(y).min(axis=1), y.min(axis=1)),
        ], device, rtol=1e-4, atol=1e-3)
