"""Placements driving the scheduler (docs/placements.md, "What the scheduler records"), on every compiled device.

Each test compiles from its own `Lineage` (not the process root), so tests cannot see each other's decisions.
"""
from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.frontend.helpers import close, np_attention, np_mlp
from tolk_core import config
from tolk_core.codegen import generate
from tolk_core.counters import GlobalCounters
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device
from tolk_core.schedule import placements as pm
from tolk_core.schedule.placements import OD, L, Lineage, PlacementUserError, Provenance, V
from tolk_core.schedule.rangeify import (
    CROSSES_KERNEL,
    INLINED,
    KERNEL_SCRATCH,
    OUTPUT,
    ROW_SCRATCH,
    rangeify,
    realize_points,
)


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def _dump(capsys, fn) -> tuple[object, list[str]]:
    """Run `fn` under DEBUG=3 and return its result and the placement lines printed."""
    with config.override(DEBUG=3):
        out = fn()
    return out, [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("placement ")]


def test_mlp_and_attention_leave_no_node_undecided(device, capsys) -> None:
    x, w1, b1, w2, b2 = _rand(64, 784), _rand(784, 256, seed=1), _rand(256, seed=2), _rand(256, 10, seed=3), \
        _rand(10, seed=4)
    q, k, v = _rand(1, 128, 64, seed=5), _rand(1, 128, 64, seed=6), _rand(1, 128, 64, seed=7)
    t = [Tensor(a, device=device) for a in (x, w1, b1, w2, b2, q, k, v)]
    with Lineage():
        mlp, mlp_lines = _dump(capsys, lambda: ((t[0] @ t[1] + t[2]).relu() @ t[3] + t[4]).numpy())
        att, att_lines = _dump(capsys, lambda: (((t[5] @ t[6].transpose(-1, -2)) * (1 / 8)).softmax() @ t[7]).numpy())
    close(mlp, np_mlp(x, w1, b1, w2, b2))
    close(att, np_attention(q, k, v))
    for lines in (mlp_lines, att_lines):
        assert lines and not [ln for ln in lines if "undecided" in ln]
        # every line names a settled mode and a provenance "code:reason" (or a chain of them)
        assert all(re.fullmatch(r"placement \S+\(.*?\)\s+(Virtual|Local|On-dev)/\d+:[a-z-]+( -> \d+:[a-z-]+)*", ln)
                   for ln in lines), lines
    assert any("On-dev/39:inline-reduction-cap -> 43:crosses-kernel" in ln for ln in att_lines)
    assert any("On-dev/42:realize-output" in ln for ln in mlp_lines)


def _chain(x: Tensor) -> tuple[Tensor, Tensor]:
    mid = (x * 2 + 1).exp()
    return mid, (mid * 3).sum(axis=1)


def test_sibling_compiles_are_hermetic(device, kernels) -> None:
    """Row 52: two siblings from one context, one deciding an intermediate On_device: different kernel counts,
    equal numbers, the parent's table unchanged, intent untouched."""
    a = _rand(32, 48)
    x = Tensor(a, device=device)
    mid = _chain(x)[0]
    ctx = Lineage()
    plain, stored = ctx.fork(), ctx.decide_materialized([mid])
    results, counts = [], []
    for lineage in (plain, stored):
        with lineage, kernels() as k:
            results.append(_chain(x)[1].numpy())  # rebuilt: a realized graph would be served from its cache
        counts.append(k.count)
    assert counts == [1, 2]
    close(results[0], results[1])
    close(results[0], (np.exp(a * 2 + 1) * 3).sum(1), rtol=1e-4)
    assert len(ctx.placements) == 0 and pm.intent(mid.uop) is None
    assert plain.placements.raw_entry(mid.uop) == (V, INLINED)
    assert stored.placements.raw_entry(mid.uop) == (OD, pm.DECIDE_MATERIALIZED)


def _softmax(x: Tensor) -> tuple[Tensor, Tensor]:
    m = x.max(axis=-1, keepdim=True)
    e = (x - m).exp()
    return m, e / e.sum(axis=-1, keepdim=True)


def _np_softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# how each dialect declares the exp row: a C stack array; GPU work-group shared memory, filled by the group's
# items together and read behind a barrier
_LOCAL_ROW = {"CPU": (r"^\s*float loc0\[1000\];$", None),
              "OPENCL": (r"^\s*__local float loc0\[1000\];$", "barrier(CLK_LOCAL_MEM_FENCE);"),
              "CUDA": (r"^\s*__shared__ float loc0\[1000\];$", "__syncthreads();")}


def _softmax_kernel(device: str, lineage: Lineage, x: Tensor):
    """The kernels rangeify makes for softmax(x) on `device`, compiling from `lineage`."""
    out = _softmax(x)[1]
    with lineage:
        return rangeify([(out.uop, UOp.new_buffer(device, 64000, dtypes.float32))],
                        lambda v: UOp.new_buffer(device, 1, v.dtype), local_arrays=True)


def test_softmax_is_one_kernel_with_a_local_exp_row(device, kernels) -> None:
    """Softmax over (64,1000): one kernel; the exp row is a 1000-float Local array (4000 bytes, under the default
    threshold) in the rendered source: a C stack array on CPU, a `__local` array on OpenCL that one work group
    per row fills cooperatively before a barrier (row max and sum as group reductions). Values equal numpy."""
    a = _rand(64, 1000)
    x = Tensor(a, device=device)
    ctx = Lineage()
    lineage = ctx.fork()
    e = (x - x.max(axis=-1, keepdim=True)).exp()
    ks = _softmax_kernel(device, lineage, x)
    assert len(ks) == 1
    ksrc = generate(ks[0].ast, Device[device].renderer)
    decl, barrier = _LOCAL_ROW[device]
    assert re.search(decl, ksrc.source, re.M), ksrc.source
    if barrier is not None:  # one group per row: the fill, and two per row reduction (partials, then the total)
        assert ksrc.source.count(barrier) == 5 and ksrc.global_size == (64, 1, 1), ksrc.source
    assert lineage.placements.get(e.uop) == (L, Provenance.refined(ROW_SCRATCH, KERNEL_SCRATCH))
    with ctx.fork(), kernels() as k:  # a sibling: its own decisions for this device
        got = _softmax(x)[1].numpy()
    assert k.count == 1
    close(got, _np_softmax(a))


def test_softmax_row_renders_and_compiles_for_cuda() -> None:
    """CUDA without a GPU: the same kernel declares the row `__shared__`, synchronizes with `__syncthreads()`,
    and compiles to an sm_90 cubin where NVRTC or nvcc is installed."""
    ks = _softmax_kernel("CPU", Lineage(), Tensor(_rand(64, 1000), device="CPU"))  # kernel ASTs are device-free
    assert len(ks) == 1
    ksrc = generate(ks[0].ast, Device.renderer_for("CUDA"))
    decl, barrier = _LOCAL_ROW["CUDA"]
    assert re.search(decl, ksrc.source, re.M) and ksrc.source.count(barrier) == 5, ksrc.source
    assert ksrc.local_size == (256, 1, 1) and ksrc.global_size == (64, 1, 1)
    compiler = Device.compiler_for("CUDA")
    if compiler.tool == "none":
        pytest.skip("neither NVRTC nor nvcc is installed: CUDA C cannot be compiled here")
    cubin = compiler.compile_cached(Device.renderer_for("CUDA").render_module([ksrc.source]))
    assert cubin[:4] == b"\x7fELF" and ksrc.name.encode() in cubin


def test_row_reduction_consumed_across_rows_is_stored(device, kernels) -> None:
    """Row fusion only where the consumer goes row by row: a row max whose broadcast is then reduced over the
    rows (each row would be recomputed once per column) stays On_device."""
    a = _rand(48, 40)
    x = Tensor(a, device=device)
    m = x.max(axis=1, keepdim=True)
    lineage = Lineage()
    with lineage, kernels() as k:
        got = (x - m).sum(axis=0).numpy()
    assert k.count == 2
    close(got, (a - a.max(1, keepdims=True)).sum(0))
    assert lineage.placements.get(m.uop)[0] is OD


def test_softmax_below_the_threshold_keeps_rows_on_device(device, kernels) -> None:
    """With the threshold under the row's 4000 bytes the same program stores its row reductions: more kernels,
    equal values, and the exp row is inlined rather than Local."""
    a = _rand(64, 1000)
    x = Tensor(a, device=device)
    lineage = Lineage()
    m = x.max(axis=-1, keepdim=True)
    with config.override(PLACEMENT_STACK_THRESHOLD=3999), lineage, kernels() as k:
        got = _softmax(x)[1].numpy()
    assert k.count == 3
    close(got, _np_softmax(a))
    assert lineage.placements.get(m.uop) == (OD, Provenance.refined(Provenance.INLINE_REDUCTION_CAP, CROSSES_KERNEL))


def test_decide_inline_of_softmax_row_max_changes_the_kernel_count(device, kernels) -> None:
    """The row max preferred inline is recomputed where read: it then cannot be fused as a row, so the row sum
    that reads it is stored again (1 -> 2 kernels). Equal values."""
    a = _rand(64, 1000)
    x = Tensor(a, device=device)
    m = _softmax(x)[0]
    ctx = Lineage()
    plain, inlined = ctx.fork(), ctx.decide_inline([m])
    results, counts = [], []
    for lineage in (plain, inlined):
        with lineage, kernels() as k:
            results.append(_softmax(x)[1].numpy())
        counts.append(k.count)
    assert counts == [1, 2]
    for r in results:
        close(r, _np_softmax(a))
    assert inlined.placements.raw_entry(m.uop) == (V, INLINED)
    assert plain.placements.raw_entry(m.uop) == (V, INLINED)
    assert len(ctx.placements) == 0


def test_decide_inline_of_a_contiguous_is_a_legality_error(device) -> None:
    x = Tensor(_rand(8, 8), device=device)
    c = (x * 2).contiguous()
    with Lineage().decide_inline([c]), pytest.raises(PlacementUserError, match=r"CONTIGUOUS\(8x8, float32\).*"
                                                                                r"On-dev/28:contiguous"):
        (c + 1).numpy()


def test_contiguous_in_a_fusable_chain_is_exactly_one_more_kernel(device, kernels) -> None:
    a = _rand(100, 100)
    x = Tensor(a, device=device)
    lineage = Lineage()
    with lineage, kernels() as fused:
        plain = ((x * 2 + 1).exp() * 3).numpy()
    cut_t = (x * 2 + 1).contiguous()
    with lineage, kernels() as split:
        cut = (cut_t.exp() * 3).numpy()
    assert (fused.count, split.count) == (1, 2)
    close(plain, cut)
    close(plain, np.exp(a * 2 + 1) * 3)
    p = lineage.placements
    assert p.get(cut_t.uop) == (OD, pm.CONTIGUOUS) and p.raw_entry(cut_t.uop) is None  # settled by intent
    assert p.raw_entry(cut_t.uop.src[0]) == (V, INLINED)  # x*2+1 is inlined into the contiguous kernel


def _fission_program(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """a -> b -> (y1, y2): a and b must not be recomputed (Never_virtual)."""
    a = (x * 2).exp()
    b = a * 3 + 1
    for t in (a, b):
        pm.seed_never_virtual(t.uop)
    return a, b, b + 1, b * b


def test_fission_promotes_a_crossing_local_and_undoes_a_coalesced_one(device, kernels) -> None:
    """b (Local by size) is read by the kernels of y1 and y2: promoted On_device (177). a was promoted first
    (both kernels computed it through b), and once b is stored only b's kernel reads a: undone, back to Local."""
    arr = _rand(4, 25)  # 100 float32: 400 bytes, under the default threshold
    x = Tensor(arr, device=device)
    a, b, y1, y2 = _fission_program(x)
    lineage = Lineage()
    with lineage, kernels() as k:
        Tensor.realize(y1, y2)
    p = lineage.placements
    scratch = Provenance.refined(pm.NEVER_RECOMPUTE, KERNEL_SCRATCH)
    assert p.get(b.uop) == (OD, pm.FISSION)
    assert p.get(a.uop) == (L, scratch)
    assert k.count == 3
    want_b = np.exp(arr * 2) * 3 + 1
    close(y1.numpy(), want_b + 1)
    close(y2.numpy(), want_b * want_b, rtol=1e-4)


def test_fission_promotion_is_seen_then_undone_when_its_kernels_coalesce(device, kernels, monkeypatch) -> None:
    """The promotion itself, observed: a (Local) is first read by the kernels of y1 and y2 (both compute b from
    it) and is promoted On_device with the fission provenance; promoting b moves the crossing, a's readers
    coalesce into b's kernel, and the promotion is undone. In a sibling where b is decided On_device up front
    the split never reaches a: no promotion at all. Equal kernels and values in both."""
    promoted: list[tuple[UOp, pm.Placement]] = []
    real = pm.promote_crossing

    def spy(p: pm.Placements, touched):
        undo = real(p, touched)
        promoted.extend((u, p.get(u)) for u in undo)
        return undo

    monkeypatch.setattr(pm, "promote_crossing", spy)
    arr = _rand(5, 20)  # a shape no other test schedules: a schedule-cache hit would replay, not promote
    want_b = np.exp(arr * 2) * 3 + 1
    x = Tensor(arr, device=device)
    ctx = Lineage()
    scratch = Provenance.refined(pm.NEVER_RECOMPUTE, KERNEL_SCRATCH)
    for lineage, b_first in ((ctx.fork(), False), (None, True)):
        a, b, y1, y2 = _fission_program(x)
        lineage = ctx.decide_materialized([b]) if b_first else lineage
        promoted.clear()
        with lineage, kernels() as k:
            Tensor.realize(y1, y2)
        assert k.count == 3
        assert lineage.placements.get(a.uop) == (L, scratch)  # undone / never promoted
        assert [(u is a.uop, pl) for u, pl in promoted] == ([] if b_first else [(True, (OD, pm.FISSION)),
                                                                                 (False, (OD, pm.FISSION))])
        close(y1.numpy(), want_b + 1)
        close(y2.numpy(), want_b * want_b, rtol=1e-4)


def test_threshold_below_the_scratch_size_keeps_values_on_device(device, kernels) -> None:
    arr = _rand(4, 25)
    x = Tensor(arr, device=device)
    a, b, y1, y2 = _fission_program(x)
    lineage = Lineage()
    with config.override(PLACEMENT_STACK_THRESHOLD=256), lineage, kernels() as k:
        Tensor.realize(y1, y2)
    scratch = Provenance.refined(pm.NEVER_RECOMPUTE, KERNEL_SCRATCH)
    assert lineage.placements.get(a.uop) == (OD, scratch) and lineage.placements.get(b.uop) == (OD, scratch)
    assert k.count == 4
    want_b = np.exp(arr * 2) * 3 + 1
    close(y1.numpy(), want_b + 1)


def test_output_provenance_and_parent_lineage_commit() -> None:
    """A compile from a lineage commits its decisions there; a settled Virtual output is recomputed, not changed."""
    x = Tensor(_rand(4, 4), device="CPU")
    y = (x * 2).sum(axis=0)
    lineage = Lineage()
    with lineage:
        realize_points([y.uop], lineage.begin())  # a throwaway fork: nothing committed
    assert len(lineage.placements) == 0
    work = lineage.begin()
    realize_points([y.uop], work)
    lineage.commit(work)
    assert lineage.placements.raw_entry(y.uop) == (OD, OUTPUT)
    inner = (x * 2).uop
    assert lineage.placements.raw_entry(inner) == (V, INLINED)
    work = lineage.begin()
    realize_points([inner], work)  # observing a Virtual node: served by recomputation, stays Virtual
    assert work.placements.raw_entry(inner) == (V, INLINED)


def test_schedule_cache_keys_on_placements(device, kernels) -> None:
    """Equal graphs share a schedule-cache entry only under equal placements: a decide_materialized sibling
    misses the plain compile's entry (and stores two kernels); an equal graph under equal placements hits,
    and the decisions the cached compile made are replayed into its lineage."""
    ctx = Lineage()
    xs = [Tensor(_rand(29, 43, seed=s), device=device) for s in range(4)]  # a shape no other test schedules
    progs = [_chain(x) for x in xs]  # (mid, out) per input: equal structure, distinct nodes

    def run(lineage: Lineage, i: int) -> tuple[int, int]:
        hits = GlobalCounters.schedule_cache_hits
        with lineage, kernels() as k:
            close(progs[i][1].numpy(), (np.exp(xs[i].numpy() * 2 + 1) * 3).sum(1), rtol=1e-4)
        return k.count, GlobalCounters.schedule_cache_hits - hits

    plain = ctx.fork()
    assert run(plain, 0) == (1, 0)
    stored = ctx.decide_materialized([progs[1][0]])
    assert run(stored, 1) == (2, 0)   # not the plain compile's entry
    stored2 = ctx.decide_materialized([progs[2][0]])
    out2 = progs[2][1].uop
    assert run(stored2, 2) == (2, 1)  # the first sibling's entry
    assert stored2.placements.raw_entry(out2) == (OD, OUTPUT)  # replayed
    assert run(plain, 3) == (1, 1)
    assert plain.placements.raw_entry(progs[3][0].uop) == (V, INLINED)  # replayed
    assert len(ctx.placements) == 0


_DIGEST_SCRIPT = """
import numpy as np
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule import placements as pm
x = Tensor(np.arange(64 * 100, dtype=np.float32).reshape(64, 100), device="CPU")
m = x.max(axis=-1, keepdim=True)
e = (x - m).exp()
out = (e / e.sum(axis=-1, keepdim=True)).contiguous() * 2
sink = UOp(Op.SINK, dtypes.void, (out.uop,))
ctx = pm.Lineage()
for lineage in (ctx.fork(), ctx.decide_materialized([e]), ctx.decide_inline([m])):
    print(pm.digest(sink, lineage.placements, lineage.inline_preferences))
"""


def test_schedule_cache_digest_is_equal_across_processes() -> None:
    """The digest the schedule cache keys on (the placements a compile starts from, by graph position) is equal
    in two processes, and tells a plain lineage from a decide_materialized and a decide_inline sibling."""
    namespace: dict = {}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(_DIGEST_SCRIPT, "digest", "exec"), namespace)
    here = buf.getvalue().splitlines()
    there = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], capture_output=True, text=True, check=True)
    assert there.stdout.splitlines() == here and len(set(here)) == 3


def test_a_realized_constant_does_not_change_later_graphs_that_hold_it(device, kernels) -> None:
    """Constants are interned: the 0-d `Tensor(1.0)` and the 1 that `x * 2 + 1` broadcasts are one node.
    Realizing the first must not make the second read its storage: the chain stays one fused kernel whose
    intermediate is inlined."""
    assert Tensor(1.0, device=device).numpy() == 1.0
    a = _rand(100, 100)
    x = Tensor(a, device=device)
    lineage = Lineage()
    cut_t = (x * 2 + 1).contiguous()
    with lineage, kernels() as k:
        got = (cut_t.exp() * 3).numpy()
    assert k.count == 2
    close(got, np.exp(a * 2 + 1) * 3)
    assert lineage.placements.raw_entry(cut_t.uop.src[0]) == (V, INLINED)


def _walked_digest(sink: UOp, p, inline) -> tuple:
    """The digest by its definition, node by node over the whole graph (the reference for `pm.digest`)."""
    prefer, parts = set(inline), []
    for i, u in enumerate(sink.toposort()):
        pl, it = p._table.get(u), pm._intents.get(u)
        if pl is None and it is None and u not in prefer:
            continue
        pl = it.placement if pl is None and it is not None else pl
        parts.append((i, (V if pl[0] is pm.EC else pl[0]).name if pl is not None else None,
                      it is not None and it.observable, u in prefer))
    return tuple(parts)


def test_the_digest_equals_a_walk_of_the_whole_graph() -> None:
    """`pm.digest` looks nodes up from its (small) tables when they are smaller than the graph: the same
    positions and entries as walking every node, for a plain lineage, a decided one, an inline preference, a
    graph smaller than the tables, and after a compile filled the table."""
    x = Tensor(np.arange(64 * 100, dtype=np.float32).reshape(64, 100), device="CPU")
    m = x.max(axis=-1, keepdim=True)
    e = (x - m).exp()
    out = (e / e.sum(axis=-1, keepdim=True)).contiguous() * 2
    sink = UOp(Op.SINK, dtypes.void, (out.uop,))
    small = UOp(Op.SINK, dtypes.void, ((x * 3).uop,))
    ctx = pm.Lineage()
    lineages = [ctx.fork(), ctx.decide_materialized([e]), ctx.decide_inline([m]), ctx.decide_inline([m, e, out])]
    with lineages[1]:
        out.numpy()  # a compile: the table gets the graph's decisions
    seen = set()
    for lineage in lineages:
        for g in (sink, small):
            got = pm.digest(g, lineage.placements, lineage.inline_preferences)
            assert got == _walked_digest(g, lineage.placements, lineage.inline_preferences)
            seen.add(got)
    assert len(seen) >= 4  # the lineages tell apart
