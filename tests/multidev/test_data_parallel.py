"""Data-parallel training with no wrapper: the weights and optimizer state replicated, the batch sharded; the
weight gradients are sums over the sharded batch axis, so the allreduce the rewrite inserts reduces them. The
loss curve of the digits MLP on 2 and 4 virtual CPU devices equals one device's within float32 tolerance,
eager and under tolk_core.jit (one capture, then replays that schedule and compile nothing)."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core import Tensor
from tolk_core.counters import GlobalCounters
from tolk_core.demo import load_digits, mlp_sgd

STEPS, BATCH = 50, 50  # 4 devices: shards of 13, 13, 13 and 11 rows


def _curve(devices: tuple[str, ...] | None, jit: bool = False) -> tuple[np.ndarray, list[int]]:
    """The loss of each of STEPS SGD steps of a 64-32-10 MLP on the digits (the same batches and initial
    weights every call), on one device (None) or data-parallel over `devices`, the step jitted or not; and the
    schedules each step made."""
    images, labels = load_digits()
    rng = np.random.default_rng(0)
    _, step = mlp_sgd(rng, devices=devices)

    run = tolk_core.jit(step) if jit else step
    losses, schedules = [], []
    for _ in range(STEPS):
        idx = rng.integers(0, len(images), BATCH)
        x, y = Tensor(images[idx]), Tensor(labels[idx])
        if devices:
            x, y = x.shard(devices, axis=0).realize(), y.shard(devices, axis=0).realize()
        before = GlobalCounters.schedules
        loss = run(x, y)
        schedules.append(GlobalCounters.schedules - before)
        losses.append(loss.item())
    return np.array(losses), schedules


@pytest.fixture(scope="module")
def one_device() -> np.ndarray:
    return _curve(None)[0]


@pytest.mark.parametrize("ndev", [2, 4])
def test_loss_curve_matches_one_device(cpus4, one_device, ndev):
    many, _ = _curve(cpus4[:ndev])
    assert one_device[-1] < one_device[0] * 0.8  # it trains
    np.testing.assert_allclose(many, one_device, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("ndev", [2, 4])
def test_jitted_loss_curve_matches_one_device(cpus4, one_device, ndev):
    many, schedules = _curve(cpus4[:ndev], jit=True)
    np.testing.assert_allclose(many, one_device, rtol=2e-5, atol=2e-5)
    assert schedules[0] > 0 and schedules[1] > 0  # warmup, capture
    assert schedules[2:] == [0] * (STEPS - 2)  # replays: no schedule, no compile
