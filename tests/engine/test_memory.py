"""The memory planner: sound plans (checked by plan_check on every capture), compact arenas, what is never
planned, OpenCL alignment, NO_MEMORY_PLANNER."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tests.engine.plan_check import check_plan, flat_calls
from tolk_core import config
from tolk_core.engine import buffers
from tolk_core.engine.jit import view_alignment
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule.linear import create_linear
from tolk_core.schedule.memory import BestFit, plan_memory
from tolk_core.schedule.prepare import prepare_rangeify


def test_best_fit_reuses_and_coalesces() -> None:
    fit = BestFit()
    a, b, c = fit.alloc(256), fit.alloc(512), fit.alloc(256)
    assert (a, b, c) == (0, 256, 768) and fit.peak == 1024
    fit.release(a, 256)
    fit.release(b, 512)  # coalesces with a: one free block of 768 at 0
    assert fit.alloc(768) == 0 and fit.peak == 1024
    fit.release(0, 768)
    fit.release(c, 256)  # everything free: the arena in use shrinks to nothing
    assert fit.top == 0 and fit.alloc(1024) == 0 and fit.peak == 1024


def _mlp(device: str, layers: int = 10, width: int = 64, batch: int = 16):
    rng = np.random.default_rng(0)
    ws = [Tensor(rng.standard_normal((width, width), dtype=np.float32) / 8, device=device) for _ in range(layers)]
    bs = [Tensor(rng.standard_normal(width, dtype=np.float32), device=device) for _ in range(layers)]

    def forward(x: Tensor) -> Tensor:
        for w, b in zip(ws, bs, strict=True):
            x = (x @ w + b).relu()
        return x

    def reference(x: np.ndarray) -> np.ndarray:
        for w, b in zip(ws, bs, strict=True):
            x = np.maximum(x @ w.numpy() + b.numpy(), 0)
        return x
    forward.params = [*ws, *bs]  # type: ignore[attr-defined]
    return forward, reference, (batch, width)


def test_ten_layer_mlp_arena_peak_within_1_5x_of_live_peak(device, planned_captures) -> None:
    forward, reference, shape = _mlp(device)
    jitted = tolk_core.jit(forward)
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = rng.standard_normal(shape, dtype=np.float32)
        out = jitted(Tensor(x, device=device))
        np.testing.assert_allclose(out.numpy(), reference(x), rtol=1e-4, atol=1e-5)
    (cap, (arena, live)), = planned_captures
    assert live > 0 and arena <= 1.5 * live, f"arena {arena} B for a live peak of {live} B"
    # held buffers (the output) and data from outside (weights) keep their own storage
    out_buf = buffers.base_buffer(out.uop)
    args = {a for c in flat_calls(cap.linear) for a in c.src[1:]}
    assert out_buf in args
    assert {buffers.base_buffer(t.uop) for t in forward.params} <= args
    assert sum(a.op is Op.SLICE for a in args) >= 9, "the layers' outputs are planned"


def _linear_of(device: str, *values: Tensor):
    outs = [(t.uop, buffers.new_buffer(device, t.numel(), t.dtype)) for t in values]
    sink = UOp(Op.SINK, dtypes.void, tuple(UOp(Op.STORE, dtypes.void, (b, v)) for v, b in outs))
    new_buffer = lambda v: buffers.new_buffer(device, int(np.prod(v.shape)), v.dtype)  # noqa: E731
    return create_linear(prepare_rangeify(sink), new_buffer), outs


def test_held_and_outside_data_are_never_planned() -> None:
    x = Tensor(np.ones((8, 8), np.float32), device="CPU")
    y = ((x @ x).relu() @ x).softmax(axis=1)
    linear, outs = _linear_of("CPU", y)
    out = outs[0][1]
    x_buf = buffers.base_buffer(x.uop)
    planned = plan_memory(linear, [out], lambda d: 256)
    args = {a for c in planned.src for a in c.src[1:]}
    assert out in args and x_buf in args, "the held output and the input read from outside keep their storage"
    slices = [a for a in args if a.op is Op.SLICE]
    assert slices, "the intermediates are planned"
    check_plan(planned)
    unplanned = plan_memory(linear, [out], lambda d: None)
    assert unplanned is linear, "a device without sub-buffer views is not planned"
    with config.override(NO_MEMORY_PLANNER=1):
        assert plan_memory(linear, [out], lambda d: 256) is linear


def test_offsets_follow_the_device_alignment() -> None:
    x = Tensor(np.ones((3, 5), np.float32), device="CPU")
    y = (x.sum(axis=1, keepdim=True).expand(3, 5) + x).max(axis=0, keepdim=True).expand(3, 5) * x
    linear, outs = _linear_of("CPU", y.softmax(axis=0))
    planned = plan_memory(linear, [outs[0][1]], lambda d: 4096)
    slices = {a for c in planned.src for a in c.src[1:] if a.op is Op.SLICE}
    assert len(slices) >= 2 and all(s.arg[0] % 4096 == 0 for s in slices)
    check_plan(planned)


def test_opencl_offsets_meet_mem_base_addr_align(planned_captures) -> None:
    from tests.conftest import _available as available
    if not (ok := available("OPENCL"))[0]:
        pytest.skip(ok[1])
    from tolk_core.plugins import Device
    align = Device["OPENCL"].cl_device.mem_base_addr_align // 8
    assert view_alignment("OPENCL:0") == align
    forward, reference, shape = _mlp("OPENCL", layers=3, width=5, batch=3)  # 60-byte buffers
    jitted = tolk_core.jit(forward)
    for _ in range(3):
        x = np.random.default_rng(2).standard_normal(shape, dtype=np.float32)
        np.testing.assert_allclose(jitted(Tensor(x, device="OPENCL")).numpy(), reference(x), rtol=1e-4, atol=1e-5)
    (cap, _), = planned_captures
    slices = {a for c in flat_calls(cap.linear) for a in c.src[1:] if a.op is Op.SLICE}
    assert slices and all(s.arg[0] % align == 0 for s in slices)


def test_no_memory_planner_gives_every_buffer_its_storage(device) -> None:
    forward, reference, shape = _mlp(device, layers=3)
    jitted = tolk_core.jit(forward)
    with config.override(NO_MEMORY_PLANNER=1):
        for _ in range(3):
            x = np.random.default_rng(3).standard_normal(shape, dtype=np.float32)
            np.testing.assert_allclose(jitted(Tensor(x, device=device)).numpy(), reference(x), rtol=1e-4, atol=1e-5)
    assert not any(a.op is Op.SLICE for c in flat_calls(jitted.captured.linear) for a in c.src[1:])


def test_free_intermediates_releases_arenas_and_rebinds(device) -> None:
    forward, reference, shape = _mlp(device, layers=3)
    jitted = tolk_core.jit(forward)
    x = np.random.default_rng(4).standard_normal(shape, dtype=np.float32)
    jitted(Tensor(x, device=device)), jitted(Tensor(x, device=device))
    assert jitted.captured.arenas
    jitted.free_intermediates()
    assert jitted.captured._owned == []
    np.testing.assert_allclose(jitted(Tensor(x, device=device)).numpy(), reference(x), rtol=1e-4, atol=1e-5)
