"""The fusion bound and the kernel budget (docs/placements.md, "The fusion bound"): values are inlined unless
inlining would multiply a kernel's work past FUSION_WORK_BOUND, and no fused kernel grows past KERNEL_MAX_OPS
operations or KERNEL_MAX_BUFFERS inputs. Kernel counts come from the schedule, values from numpy."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.frontend.helpers import close
from tolk_core import config
from tolk_core.engine import compile as engine_compile
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.schedule.placements import Lineage


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _chain(y, steps: int = 6):
    for _ in range(steps):
        y = (y * 1.01 + 0.1).tanh()
    return y


def _np_chain(y: np.ndarray, steps: int = 6) -> np.ndarray:
    for _ in range(steps):
        y = np.tanh(y * np.float32(1.01) + np.float32(0.1))
    return y


def _kernels(out: Tensor, device: str = "CPU") -> tuple:
    with Lineage():
        return schedule(target_for(device), [out.uop]).linear.src


def test_a_chain_broadcast_into_a_matmul_is_stored_once(device) -> None:
    # each element of y is read once per column of B (512): inlined, the six steps run 512 times per element
    x, b = _rand(1024, 128), _rand(1024, 512, seed=1)
    tx, tb = Tensor(x, device=device), Tensor(b, device=device)
    with config.override(FUSION_WORK_BOUND=0.0):
        assert len(_kernels(_chain(tx).T @ tb, device)) == 1  # the old policy: everything in the matmul
    calls = _kernels(_chain(tx).T @ tb, device)
    assert len(calls) == 2
    close((_chain(tx).T @ tb).numpy(), _np_chain(x).T @ b, rtol=1e-4, atol=1e-3)


def test_a_chain_under_a_cat_is_computed_once_per_element(device) -> None:
    # cat pads each part to the whole width and the kernel loops over the padded shape: inlined, each part's
    # six steps run on all 3 x 128 columns and 2 of 3 results are thrown away (a GRU's stacked-gate gradient)
    xs = [_rand(256, 128, seed=i) for i in range(3)]
    ts = [Tensor(x, device=device) for x in xs]
    out = lambda: _chain(ts[0]).cat(_chain(ts[1]), _chain(ts[2]), dim=1)
    with config.override(FUSION_WORK_BOUND=0.0):
        assert len(_kernels(out(), device)) == 1
    assert len(_kernels(out(), device)) == 4  # each chain stored once, then the cat copies them
    close(out().numpy(), np.concatenate([_np_chain(x) for x in xs], axis=1), rtol=1e-5, atol=1e-5)


def test_a_chain_three_kernels_read_is_computed_once(device) -> None:
    # three reductions of one chain, each its own kernel: inlined, every kernel computes the six steps
    x = _rand(256, 128)
    tx = Tensor(x, device=device)
    outs = lambda: (lambda y: [y.sum(axis=0), y.max(axis=0), y.sum(axis=1)])(_chain(tx))
    def n_kernels() -> int:
        with Lineage():  # a lineage of its own: the first schedule's decisions would settle the second's
            return len(schedule(target_for(device), [o.uop for o in outs()]).linear.src)
    with config.override(FUSION_WORK_BOUND=0.0):
        assert n_kernels() == 3
    assert n_kernels() == 4
    got, want = outs(), _np_chain(x)
    got[0].realize(*got[1:])
    for g, w in zip(got, [want.sum(axis=0), want.max(axis=0), want.sum(axis=1)], strict=True):
        close(g.numpy(), w, rtol=1e-4, atol=1e-4)


def _window_sum(y, size: int = 5):
    # a sum over `size` neighbouring channels, as ONNX's LRN builds it: slices of one padded value, added up
    c, sq = y.shape[1], (y * y).pad(((0, 0), ((size - 1) // 2, size // 2), (0, 0)))
    total = sq[:, 0:c]
    for i in range(1, size):
        total = total + sq[:, i:i + c]
    return y / (total * 0.01 + 1.0)


def _np_window_sum(y: np.ndarray, size: int = 5) -> np.ndarray:
    c, sq = y.shape[1], np.pad(y * y, ((0, 0), ((size - 1) // 2, size // 2), (0, 0)))
    return y / (sum(sq[:, i:i + c] for i in range(size)) * np.float32(0.01) + np.float32(1.0))


def test_a_chain_under_slices_of_one_pad_is_computed_once(device) -> None:
    # each slice reads the padded chain at its own offset, so the kernel inlining it evaluates it once per slice
    # (five here): the slices' counts add up, past the bound, and the chain is stored (counted as the most any
    # one slice asks for, it was inlined and computed five times over: ONNX's LRN after a convolution)
    x = _rand(16, 64, 96)
    tx = Tensor(x, device=device)
    with config.override(FUSION_WORK_BOUND=0.0):
        assert len(_kernels(_window_sum(_chain(tx)), device)) == 1
    assert len(_kernels(_window_sum(_chain(tx)), device)) == 2
    close(_window_sum(_chain(tx)).numpy(), _np_window_sum(_np_chain(x)), rtol=1e-5, atol=1e-5)


def test_a_chain_two_kernels_read_stays_inlined() -> None:
    # k = 2 never passes a bound of 2: (c + 1)·2 / (c + 2) < 2 for every c
    tx = Tensor(_rand(256, 128))
    y = _chain(tx)
    with Lineage():
        assert len(schedule(target_for("CPU"), [y.sum(axis=0).uop, y.sum(axis=1).uop]).linear.src) == 2


def test_a_single_scale_broadcast_into_a_matmul_stays_inlined() -> None:
    # one operation per element recomputed per column: (1 + 1)F / (1 + F) < 2, cheaper than a round trip
    tx, tb = Tensor(_rand(256, 64)), Tensor(_rand(256, 128, seed=1))
    assert len(_kernels((tx * 2).T @ tb)) == 1


def test_recomputing_a_few_operations_in_all_stays_inlined() -> None:
    # a gather's index arithmetic broadcast over the table: a high ratio, but a handful of operations in all
    table, idx = Tensor(_rand(50, 16)), Tensor(np.array([3, 49, 0, -1, 7]))
    assert len(_kernels(table[idx])) == 1
    with config.override(FUSION_MIN_EXCESS=0):
        assert len(_kernels(table[idx])) == 2


def test_the_bound_is_part_of_the_schedule_cache_key() -> None:
    tx, tb = Tensor(_rand(512, 64)), Tensor(_rand(512, 256, seed=1))
    out = _chain(tx).T @ tb
    assert len(_kernels(out)) == 2
    with config.override(FUSION_WORK_BOUND=0.0):
        assert len(_kernels(out)) == 1  # not the cached two-kernel schedule


def _ops_in(call) -> int:
    return sum(1 for u in call.src[0].toposort() if u.op in GroupOp.ALU and u.dtype.name != "index")


@pytest.mark.parametrize("limit", [64, 256])
def test_a_long_chain_is_split_within_the_operation_budget(limit: int) -> None:
    x = _rand(4096)
    with config.override(KERNEL_MAX_OPS=limit):
        out = _chain(Tensor(x), steps=40)
        calls = _kernels(out)
        assert len(calls) > 1
        assert max(_ops_in(c) for c in calls) <= limit
        close(out.numpy(), _np_chain(x, steps=40), rtol=1e-4, atol=1e-5)
    assert len(_kernels(_chain(Tensor(x), steps=40))) < len(calls)  # the default budget is larger


def test_a_wide_sum_is_split_within_the_buffer_budget() -> None:
    xs = [_rand(64, seed=i) for i in range(40)]
    with config.override(KERNEL_MAX_BUFFERS=8):
        total = Tensor(xs[0])
        for a in xs[1:]:
            total = total + Tensor(a)
        calls = _kernels(total)
        assert len(calls) > 1 and max(len(c.src) - 1 for c in calls) <= 8 + 1  # inputs plus the output
        close(total.numpy(), np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)
    assert all(c.src[0].op is Op.SINK for c in calls)


def test_a_slow_compile_warns_naming_its_kernel() -> None:
    a = Tensor(_rand(33, 7))
    with config.override(COMPILE_WARN_SECONDS=-1.0), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine_compile._programs.clear()  # compile anew
        (a * 3 + 1).sum(axis=1).numpy()
    slow = [w for w in caught if issubclass(w.category, engine_compile.CompileTimeWarning)]
    assert slow and "r_" in str(slow[0].message) and "KERNEL_MAX_OPS" in str(slow[0].message)
