"""The profiler: per-kernel work counted from the kernel ASTs (executed operations over the loop nest, FLOPs,
bytes) against the nominal work of the tensor ops each kernel implements, and the rows `tolk_core.profile()`
records from real launches (eager and JIT replay). Counts are checked against hand-computed values; nothing
asserts on a time beyond its being positive."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core import Variable, config
from tolk_core.counters import GlobalCounters
from tolk_core.engine import jit as engine_jit
from tolk_core.engine.profile import launch_cost
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.calls import KernelInfo
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.schedule.prepare import pm_calls

F32 = 4  # bytes


def _costs(*values: Tensor, device: str = "CPU"):
    """(CALL, its LaunchCost) of every kernel computing `values`, scheduled for `device`, not run."""
    s = schedule(target_for(device), [v.uop for v in values])
    return [(c, launch_cost(c, s.var_vals)) for c in s.linear.src]


def _chain(x: Tensor) -> Tensor:
    y = x
    for _ in range(6):
        y = (y * 1.01 + 0.1).tanh()
    return y


def _chain_ops_per_element(y: Tensor) -> int:
    """The ALU nodes of `y`'s tensor graph that read storage (those computed from constants alone fold away),
    counted on the graph with its composites (tanh) expanded as prepare expands them, independently of the
    profiler."""
    reads: set = set()
    for u in graph_rewrite(y.uop, pm_calls).toposort():
        if u.op is Op.BUFFER or any(s in reads for s in u.src):
            reads.add(u)
    return sum(u.op in GroupOp.ALU for u in reads)


M, K, N = 128, 1024, 512  # y is (K, M); y.T @ B with B (K, N)


def test_planted_chain_inlined_into_a_matmul_recomputes_it_per_output_column() -> None:
    """With the fusion bound off, the scheduler inlines the chain into the matmul (what it did before the bound)."""
    x, b = Tensor.empty(K, M), Tensor.empty(K, N)
    y = _chain(x)
    c = _chain_ops_per_element(y)
    # six equal steps (the scale and shift, then tanh: docs/dtypes.md's accurate form, a few dozen ops)
    assert c % 6 == 0 and c // 6 == _chain_ops_per_element((x * 1.01 + 0.1).tanh()) > 20
    with config.override(FUSION_WORK_BOUND=0):
        [(call, cost)] = _costs(y.T @ b)
    # the chain is evaluated inside the matmul's reduction, once per (row, column, k): N times too often
    assert cost.executed == c * M * N * K + 2 * M * N * K
    assert cost.nominal == c * K * M + 2 * M * N * K
    assert cost.work_ratio == pytest.approx((c + 2) * N / (c + 2 * N))  # 29.28 here
    assert cost.work_ratio > 20
    assert cost.flops == cost.executed  # every op is a float op
    assert "REDUCE_AXIS(ADD)" in call.arg.ops_text() and "EXP2 x6" in call.arg.ops_text()


@pytest.mark.parametrize("stored", ["contiguous", "fusion bound"])
def test_planted_chain_stored_first_makes_every_kernel_do_its_nominal_work(stored: str) -> None:
    """Stored by the user (`contiguous()`) or by the scheduler's fusion bound (the default settings)."""
    x, b = Tensor.empty(K, M), Tensor.empty(K, N)
    y = _chain(x)
    c = _chain_ops_per_element(y)
    costs = _costs((y.contiguous() if stored == "contiguous" else y).T @ b)
    assert len(costs) == 2
    assert all(cost.work_ratio == 1.0 for _, cost in costs)
    (_, chain), (_, mm) = costs
    assert chain.executed == c * K * M
    assert mm.flops == mm.executed == 2 * M * N * K  # M*N*K MULs, M*N*K ADDs folded into the sums
    assert mm.bytes == (K * M + K * N + M * N) * F32  # each input and the output counted once


def test_elementwise_a_times_b_plus_c_has_ratio_exactly_one() -> None:
    a, b, c = Tensor.empty(4, 8), Tensor.empty(4, 8), Tensor.empty(8)
    [(call, cost)] = _costs(a * b + c)
    assert (cost.executed, cost.nominal, cost.flops) == (2 * 32, 2 * 32, 2 * 32)
    assert cost.work_ratio == 1.0
    assert cost.bytes == (32 + 32 + 8 + 32) * F32  # the broadcast c is read 32 times but holds 8 elements
    assert call.arg.ops_text() == "MUL, ADD"


@pytest.mark.parametrize("m,k,n", [(3, 7, 5), (16, 32, 8)])
def test_matmul_flops_are_two_m_n_k(m: int, k: int, n: int) -> None:
    [(call, cost)] = _costs(Tensor.empty(m, k) @ Tensor.empty(k, n))
    assert cost.flops == cost.executed == cost.nominal == 2 * m * n * k
    assert cost.bytes == (m * k + k * n + m * n) * F32
    assert call.arg.ops == (("MUL", 1), ("REDUCE_AXIS(ADD)", 1))


def test_a_broadcast_value_inlined_is_recomputed_per_copy() -> None:
    x, v = Tensor.empty(16, 32), Tensor.empty(1, 32)
    [(_, cost)] = _costs(x * v.exp())  # exp = EXP2(v * log2 e): 2 ops on 32 values, computed per (row, col)
    assert cost.nominal == 16 * 32 + 2 * 32
    assert cost.executed == 3 * 16 * 32
    assert cost.work_ratio == pytest.approx(1536 / 576)


def test_softmax_row_fused_on_cpu_does_its_nominal_work() -> None:
    """The row max and sum are computed once per row, broadcast ops (the negated max) once per row too."""
    [(_, cost)] = _costs(Tensor.empty(16, 32).softmax(-1))
    assert cost.work_ratio == 1.0
    # per element: MAX fold, ADD (x - max), MUL (log2 e), EXP2, ADD fold, FDIV; per row: NEG of the max
    assert cost.executed == 6 * 16 * 32 + 16


def test_padding_masks_and_address_maths_are_not_counted() -> None:
    [(_, cost)] = _costs(Tensor.empty(16, 32).pad(((1, 1), (2, 2))) * 2 + 1)
    assert cost.executed == cost.nominal == 2 * 18 * 36


def test_a_kernel_computing_nothing_has_ratio_one() -> None:
    [(call, cost)] = _costs(Tensor.empty(4, 8).T.contiguous())  # a transposing copy
    assert (cost.executed, cost.nominal, cost.work_ratio) == (0, 0, 1.0)
    assert cost.bytes == 2 * 32 * F32
    assert call.arg == KernelInfo()


def test_symbolic_sizes_are_evaluated_per_launch() -> None:
    n = Variable("n", 1, 16)
    x = Tensor.empty(16, 32)
    s = schedule(target_for("CPU"), [(x[:n.bind(5)] * 3).sum(axis=1).uop])
    [call] = s.linear.src
    for value in (5, 9):
        cost = launch_cost(call, {"n": value})
        assert cost.executed == cost.nominal == 2 * value * 32
        assert cost.bytes == (value * 32 + value) * F32


def test_the_schedule_cache_keeps_the_kernel_info() -> None:
    a, b = Tensor.empty(4, 8), Tensor.empty(4, 8)
    first = _costs((a * b).exp())
    again = _costs((Tensor.empty(4, 8) * Tensor.empty(4, 8)).exp())  # structurally equal: a cache hit
    assert [c.arg for c, _ in again] == [c.arg for c, _ in first]
    assert first[0][0].arg.ops_text() == "MUL x2, EXP2" and first[0][0].arg.nominal == 3 * 32


# ---------------------------------------------------------------------------------------------- recorded rows
def _inputs(device: str, *shapes: tuple[int, ...]) -> list[Tensor]:
    rng = np.random.default_rng(0)
    return [Tensor(rng.random(s, dtype=np.float32), device=device).realize() for s in shapes]


def test_rows_count_every_launch(device: str) -> None:
    x, w = _inputs(device, (16, 32), (32, 8))
    out = ((x @ w).relu().contiguous() * 2).sum(axis=1)
    expected = _costs(out, device=device)
    start = GlobalCounters.kernels_launched
    with tolk_core.profile() as prof:
        got = out.numpy()
    np.testing.assert_allclose(got, (np.maximum(x.numpy() @ w.numpy(), 0) * 2).sum(1), rtol=1e-5)
    rows = prof.rows
    assert sum(r.launches for r in rows) == GlobalCounters.kernels_launched - start == len(expected)
    assert sum(r.flops for r in rows) == sum(c.flops for _, c in expected)
    assert sum(r.executed for r in rows) == sum(c.executed for _, c in expected)
    assert all(r.device == target_for(device).device and r.total_s > 0 for r in rows)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert [r.total_s for r in rows] == sorted((r.total_s for r in rows), reverse=True)
    matmul = next(r for r in rows if "REDUCE_AXIS(ADD)" in r.ops and "MUL" in r.ops and "MAX" in r.ops)
    assert matmul.flops == 2 * 16 * 8 * 32 + 16 * 8  # the matmul and its relu
    assert matmul.gflops == pytest.approx(matmul.flops / matmul.total_s / 1e9)
    table = prof.table()
    assert all(r.name in table for r in rows) and table.splitlines()[0].startswith("kernel")


@pytest.mark.parametrize("jit_mode", [1, 2], ids=["graphs", "no-graphs"])
def test_a_jitted_replay_lists_its_kernels(device: str, jit_mode: int) -> None:
    w, = _inputs(device, (16, 16))
    xs = _inputs(device, (4, 16), (4, 16))

    @tolk_core.jit
    def step(x: Tensor) -> Tensor:
        return ((x @ w).relu().contiguous() @ w).exp().contiguous().sum(axis=1)

    with config.override(JIT=jit_mode):
        for i in range(3):
            step(xs[i % 2])
        cap = step.captured
        kernels = cap._flat_calls()
        start = GlobalCounters.kernels_launched
        with tolk_core.profile() as prof:
            for i in range(4):
                out = step(xs[i % 2]).numpy()
        launched = GlobalCounters.kernels_launched - start
        after = step(xs[0]).numpy()  # a replay after the profile: the graph was kept up to date
    graphs = any(isinstance(s, engine_jit._GraphStep) for s in cap._steps)
    assert graphs == (jit_mode == 1 and engine_jit._device(device).graph is not None)
    rows = prof.rows
    assert sorted(r.name for r in rows) == sorted(c.src[0].arg.source.name for c in kernels)
    assert all(r.launches == 4 and r.total_s > 0 and r.ops for r in rows)
    assert sum(r.launches for r in rows) == launched == 4 * len(kernels)
    # in float64: the exponents reach ~50, where exp turns the float32 rounding of a 16-term dot product
    # (a few 1e-6 absolute) into that much relative error, so a float32 reference differs by ~1e-5 from any
    # summation order but its own (seen on an AMD machine's PoCL)
    w64 = w.numpy().astype(np.float64)
    ref = lambda x: np.exp(np.maximum(x.astype(np.float64) @ w64, 0) @ w64).sum(1)  # noqa: E731
    np.testing.assert_allclose(out, ref(xs[1].numpy()), rtol=1e-4)
    np.testing.assert_allclose(after, ref(xs[0].numpy()), rtol=1e-4)


def test_a_profile_without_kernels_has_no_rows() -> None:
    x, = _inputs("CPU", (4, 4))
    with tolk_core.profile() as prof:
        x.numpy()  # already computed: a copy out, no kernel
    assert prof.rows == [] and prof.total_s == 0.0
    assert len(prof.table().splitlines()) == 2  # the header and the total


def test_profiles_nest(device: str) -> None:
    a, b = _inputs(device, (8,), (8,))
    with tolk_core.profile() as outer:
        (a + b).numpy()
        with tolk_core.profile() as inner:
            (a * b).numpy()
    assert [r.ops for r in inner.rows] == ["MUL"]
    assert sorted(r.ops for r in outer.rows) == ["ADD", "MUL"]


def test_debug_2_prints_gflops_and_the_work_ratio(capsys) -> None:
    a, b = _inputs("CPU", (4, 8), (4, 8))
    with config.override(DEBUG=2):
        (a * b + 1).numpy()
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("***")]
    assert len(lines) == 1 and "GFLOP/s" in lines[0] and lines[0].endswith("work x1.00")


def test_a_kernel_given_as_code_is_timed_with_no_counts() -> None:
    """Its source is opaque to the profiler: a row with its launch and time, and no operations or bytes."""
    src = ("void twice(float* restrict out, const float* restrict x) {\n"
           "  for (int i = 0; i < 6; i++) out[i] = 2.0f * x[i];\n}\n")
    x, = _inputs("CPU", (6,))
    with tolk_core.profile() as prof:
        out, = tolk_core.custom_kernel(src, "twice", [((6,), "float32")], [x])
        got = out.numpy()
    np.testing.assert_allclose(got, 2 * x.numpy())
    [row] = [r for r in prof.rows if r.name == "twice"]
    assert (row.launches, row.executed, row.nominal, row.bytes, row.ops, row.work_ratio) == (1, 0, 0, 0, "", 1.0)
    assert row.total_s > 0
