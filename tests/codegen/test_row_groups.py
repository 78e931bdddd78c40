"""Row fusion on GPU-style devices (codegen.optimize `_row_group_plan`): one work group per row computes the
row's reductions and Local arrays once, in shared memory, and every device schedules the same kernels.

Cases are built first and realized together (one compile per device); the shapes pick each path: rows that
are a whole number of group strides and rows that are not (clamped reads, gated stores), two row arrays in one
kernel (layernorm), a row reduction without an array (x - max), a Local with no row axes (one group), and rows
too big for shared memory (computed in place instead, the reductions still shared by the group).
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.helpers import close, layernorm, np_layernorm
from tolk_core.codegen import generate
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device
from tolk_core.schedule import placements as pm
from tolk_core.schedule.placements import Lineage


def _cases(rng: np.random.Generator):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    a, b, c, d = f(24, 512), f(13, 300), f(1, 77), f(6, 10)

    def whole_local(T):  # v (Never_virtual, no row axes) is Local inside the kernel of w, which two outputs read
        v = (T(d) * 2).exp()
        w = v * 3 + 1
        for t in (v, w):
            pm.seed_never_virtual(t.uop)
        return w + 1, w * w

    w = np.exp(d * 2) * 3 + 1
    sm = np.exp(a - a.max(-1, keepdims=True))
    return [
        ("softmax_whole_strides", lambda T: (T(a).softmax(),), (sm / sm.sum(-1, keepdims=True),)),
        ("layernorm_clamped", lambda T: (layernorm(T(b)),), (np_layernorm(b),)),
        ("minus_row_max", lambda T: (T(b) - T(b).max(axis=1, keepdim=True),), (b - b.max(1, keepdims=True),)),
        ("one_row", lambda T: (layernorm(T(c)),), (np_layernorm(c),)),
        ("whole_local", whole_local, (w + 1, w * w)),
    ]


def test_rows_match_numpy_with_the_kernels_cpu_schedules(device, kernels) -> None:
    cases = _cases(np.random.default_rng(0))
    counts = {}
    for dev in dict.fromkeys(("CPU", device)):
        with Lineage(), kernels() as k:
            outs = [fn(lambda x, dv=dev: Tensor(x, device=dv)) for _, fn, _ in cases]
            Tensor.realize(*(t for ts in outs for t in ts))
            got = [[t.numpy() for t in ts] for ts in outs]
        counts[dev] = k.count
        for (_, _, want), g in zip(cases, got, strict=True):
            for gi, wi in zip(g, want, strict=True):
                close(gi, wi, rtol=1e-4, atol=1e-5)
    assert counts[device] == counts["CPU"]  # row fusion is no longer a CPU-only schedule


def _softmax_kernel_source(renderer, rows: int, cols: int) -> str:
    from tolk_core.engine.schedule import schedule
    from tolk_core.engine.target import target_for
    x = Tensor(np.ones((rows, cols), np.float32), device="CPU")
    with Lineage():
        linear, _, _ = schedule(target_for("CPU"), [x.softmax().uop])
    assert len(linear.src) == 1
    return generate(linear.src[0].src[0], renderer).source


def test_rows_too_big_for_shared_memory_are_computed_in_place(device, monkeypatch) -> None:
    renderer = Device[device].renderer
    if not renderer.has_local:
        pytest.skip(f"{device} kernels loop over their outputs: no work groups, no shared memory")
    assert "__local float loc0[300];" in _softmax_kernel_source(renderer, 8, 300) or \
        "__shared__ float loc0[300];" in _softmax_kernel_source(renderer, 8, 300)
    # the 1200-byte row no longer fits beside the two reductions' 256-float partial results (2048 bytes)
    monkeypatch.setattr(type(renderer), "shared_bytes", 3000)
    source = _softmax_kernel_source(renderer, 8, 300)
    # the exp row is recomputed where read; the row max and sum are still group reductions (two barriers each)
    assert "loc0" not in source and source.count(renderer.barrier) == 4, source
    a = np.random.default_rng(1).standard_normal((8, 301)).astype(np.float32)  # a shape not compiled before
    with Lineage():
        got = Tensor(a, device=device).softmax().numpy()
    e = np.exp(a - a.max(-1, keepdims=True))
    close(got, e / e.sum(-1, keepdims=True))
