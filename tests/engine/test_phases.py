"""tiny_jit phases (warmup, capture, replay: docs/jit.md) and each JitError / ValueError with its message."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers
from tolk_core.engine import jit as tj
from tolk_core.errors import JitError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.plugins import Device


def _engine_jit(device: str, shape=(4, 8)):
    """A tiny_jit over out = (x * 2 + 1).sum(axis=1), holding its output; returns (jit, run(xs) -> ndarray)."""
    outs: list[Tensor] = []

    def fxn(inputs, var_vals):
        x = Tensor(buffers.view_as(inputs[0], shape), device)
        out = (x * 2 + 1).sum(axis=1).realize()
        outs.append(out)
        return out

    j = tj.create(device, fxn=fxn)

    def run(xs: np.ndarray) -> np.ndarray:
        t = Tensor(xs, device=device)
        return j.call([buffers.base_buffer(t.uop)], {}, held_buffers=lambda: [buffers.base_buffer(outs[-1].uop)]
                      ).numpy()
    return j, run


def test_phases_eager_capture_replay(device) -> None:
    j, run = _engine_jit(device)
    rng = np.random.default_rng(0)
    for cnt in range(5):
        xs = rng.random((4, 8), dtype=np.float32)
        before = GlobalCounters.schedules
        got = run(xs)
        np.testing.assert_allclose(got, (xs * 2 + 1).sum(1), rtol=1e-5)
        # warmup and capture schedule (run the function); replays do not
        assert (GlobalCounters.schedules - before > 0) == (cnt < 2)
        assert (j.captured is None) == (cnt == 0)
        assert j.cnt == cnt + 1


def test_reset_returns_to_warmup_and_captured_starts_at_replay(device) -> None:
    j, run = _engine_jit(device)
    xs = np.ones((4, 8), np.float32)
    run(xs), run(xs)
    cap = j.captured
    assert cap is not None
    j.reset()
    assert j.captured is None and j.cnt == 0
    again = tj.create(device, captured=cap)
    assert again.cnt == 2 and tj.captured(again) is cap
    t = Tensor(xs * 3, device=device)
    before = GlobalCounters.schedules
    out = again.call([buffers.base_buffer(t.uop)], {})
    assert GlobalCounters.schedules == before
    np.testing.assert_allclose(out.numpy(), (xs * 3 * 2 + 1).sum(1))
    with pytest.raises(ValueError, match="created from a captured schedule, without a function"):
        again.reset()


def test_create_needs_fxn_or_captured() -> None:
    with pytest.raises(ValueError, match="needs fxn .* or captured"):
        tj.create("CPU")


def test_jit_0_runs_every_call_eagerly(device) -> None:
    j, run = _engine_jit(device)
    with config.override(JIT=0):
        for _ in range(3):
            before = GlobalCounters.schedules
            run(np.ones((4, 8), np.float32))
            assert GlobalCounters.schedules > before
    assert j.captured is None


def test_nested_capture_raises(device) -> None:
    inner, _ = _engine_jit(device)
    x = Tensor(np.ones((4, 8), np.float32), device=device)
    inner.cnt = 1  # the inner jit is due to capture

    def outer_fxn(inputs, var_vals):
        return inner.call(inputs, var_vals)
    outer = tj.create(device, fxn=outer_fxn)
    outer.cnt = 1
    with pytest.raises(JitError, match="nested JIT capture"):
        outer.call([buffers.base_buffer(x.uop)], {})


def test_empty_capture_raises(device) -> None:
    j = tj.create(device, fxn=lambda inputs, vv: None)
    j.call([], {})
    with pytest.raises(JitError, match="didn't JIT anything"):
        j.call([], {})


@pytest.mark.parametrize("bad, message", [
    ("count", "captured with 1 input\\(s\\), called with 2"),
    ("size", "JIT input 0 mismatch: element count 33 differs from the capture's 32"),
    ("dtype", "JIT input 0 mismatch: dtype int32 differs from the capture's float32"),
    ("device", "JIT input 0 mismatch: device .* differs from the capture's"),
])
def test_replay_input_mismatch(device, bad, message) -> None:
    j, run = _engine_jit(device)
    xs = np.ones((4, 8), np.float32)
    run(xs), run(xs)
    other = "OPENCL" if device == "CPU" else "CPU"
    if bad == "device":
        from tests.conftest import _available as available
        if not available(other)[0]:
            pytest.skip(f"needs a second device ({other})")
        other = Device.canonicalize(other)
    device = Device.canonicalize(device)
    good = buffers.new_buffer(device, 32, dtypes.float32)
    inputs = {"count": [good, good], "size": [buffers.new_buffer(device, 33, dtypes.float32)],
              "dtype": [buffers.new_buffer(device, 32, dtypes.int32)],
              "device": [buffers.new_buffer(other, 32, dtypes.float32)]}[bad]
    with pytest.raises(JitError, match=message):
        j.call(inputs, {})


def test_input_without_backing_buffer_raises(device) -> None:
    j, run = _engine_jit(device)
    xs = np.ones((4, 8), np.float32)
    run(xs), run(xs)
    with pytest.raises(JitError, match="JIT input 0 .* has no backing buffer"):
        j.call([buffers.new_buffer(Device.canonicalize(device), 32, dtypes.float32)], {}, buffers=lambda u: None)


def test_capture_compiles_in_a_lineage_of_its_own(monkeypatch) -> None:
    from tolk_core.schedule import placements
    forks: list = []
    original = placements.Lineage.fork

    def fork(self):
        forks.append(original(self))
        return forks[-1]

    monkeypatch.setattr(placements.Lineage, "fork", fork)
    x = Tensor(np.arange(32, dtype=np.float32).reshape(4, 8)).realize()

    @tolk_core.jit
    def f(t: Tensor) -> Tensor:
        return (t * 2 + 1).sum(axis=1)

    outs = [f(x).numpy() for _ in range(4)]
    assert len(forks) == 1  # the capture (call 2) forks; warmup and replays do not schedule in a new lineage
    for out in outs:
        np.testing.assert_array_equal(out, (np.arange(32, dtype=np.float32).reshape(4, 8) * 2 + 1).sum(1))
