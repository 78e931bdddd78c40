"""batch_graphs (docs/jit.md, graph batching): which calls batch, batch sizes (JIT_BATCH_SIZE doubling), and
where the Graph capability comes from (the device's plugin, another distribution, or nobody)."""
from __future__ import annotations

import numpy as np

import tolk_core
from tolk_core import config
from tolk_core.engine import buffers
from tolk_core.engine.jit import batch_graphs
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


def _calls(device: str, n: int, program_arg=None) -> list[UOp]:
    buf = buffers.new_buffer(device, 4, dtypes.float32)
    prg = UOp(Op.PROGRAM, dtypes.void, (), program_arg or "kernel")
    return [UOp(Op.CALL, dtypes.void, (prg, buf, buffers.new_buffer(device, 4, dtypes.float32))) for _ in range(n)]


def _linear(calls: list[UOp]) -> UOp:
    return UOp(Op.LINEAR, dtypes.void, tuple(calls))


def _batch_sizes(linear: UOp) -> list[int]:
    return [len(c.src[0].src[0].src) if c.src[0].op is Op.CUSTOM_FUNCTION else 1 for c in linear.src]


def test_batches_double_from_jit_batch_size() -> None:
    with config.override(JIT_BATCH_SIZE=4, JIT=1):
        assert _batch_sizes(batch_graphs("CPU", _linear(_calls("CPU", 30)))) == [4, 8, 16, 2]
        assert _batch_sizes(batch_graphs("CPU", _linear(_calls("CPU", 3)))) == [3]
    with config.override(JIT_BATCH_SIZE=0, JIT=1):
        assert _batch_sizes(batch_graphs("CPU", _linear(_calls("CPU", 30)))) == [30]


def test_incompatible_calls_break_batches_and_single_calls_stay_plain() -> None:
    other = UOp(Op.CALL, dtypes.void, (UOp(Op.COPY, dtypes.void), buffers.new_buffer("CPU", 4, dtypes.float32)))
    linear = _linear([*_calls("CPU", 3), other, *_calls("CPU", 1), other, *_calls("CPU", 2)])
    with config.override(JIT=1, JIT_BATCH_SIZE=32):
        out = batch_graphs("CPU", linear)
    assert _batch_sizes(out) == [3, 1, 1, 1, 2]
    assert out.src[1] is other and out.src[2].src[0].op is Op.PROGRAM
    # the graph call takes the distinct input PARAMs of its batch
    p = UOp(Op.PARAM, dtypes.float32, (), (0, (4,), "CPU"))
    prg = UOp(Op.PROGRAM, dtypes.void, (), "k")
    with config.override(JIT=1):
        g = batch_graphs("CPU", _linear([UOp(Op.CALL, dtypes.void, (prg, p, p)), UOp(Op.CALL, dtypes.void, (prg, p))]))
    assert g.src[0].src[1:] == (p,)


def test_jit_2_is_the_identity() -> None:
    linear = _linear(_calls("CPU", 5))
    with config.override(JIT=2):
        assert batch_graphs("CPU", linear) is linear


def test_a_device_without_graph_hook_gets_no_batching(fixture_plugins) -> None:
    from tolk_core.plugins import Device
    assert Device["FIXTURE"].graph is None
    linear = _linear(_calls("FIXTURE:0", 5))
    with config.override(JIT=1):
        assert batch_graphs("FIXTURE:0", linear) is linear


def test_graph_from_another_distribution_turns_batching_on(fixture_plugins) -> None:
    from tolk_fixture_graph.plugin import ReplayGraph

    from tolk_core.plugins import Device
    assert Device["CPU"].graph is ReplayGraph  # priority 5 beats tolk-cpu's own CPUGraph
    jitted = tolk_core.jit(lambda x: ((x + 1).contiguous() * 2).contiguous() - 3)
    before = ReplayGraph.replays
    for i in range(4):
        out = jitted(Tensor(np.full(8, i, np.float32), device="CPU"))
        np.testing.assert_array_equal(out.numpy(), np.full(8, (i + 1) * 2 - 3, np.float32))
    assert ReplayGraph.replays - before == 3  # the capture call and two replays


def test_thirty_kernels_replay_in_batches_of_4_8_16_2(device) -> None:
    def chain(x: Tensor) -> Tensor:
        for i in range(30):
            x = (x * 1.5 + i).contiguous() if i % 2 else (x - 0.25 * i).contiguous()
        return x

    jitted = tolk_core.jit(chain)
    with config.override(JIT_BATCH_SIZE=4, JIT=1):
        for i in range(3):
            x = np.random.default_rng(i).random(16, dtype=np.float32)
            np.testing.assert_allclose(jitted(Tensor(x, device=device)).numpy(),
                                       chain(Tensor(x, device=device)).numpy(), rtol=1e-6)
    assert _batch_sizes(jitted.captured.linear) == [4, 8, 16, 2]
