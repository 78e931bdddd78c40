"""Kernel counts of the wider op surface stay small (GlobalCounters): gathers, conv2d, cat, eye, argmax fuse."""
from __future__ import annotations

import numpy as np

from tests.frontend.helpers import close
from tolk_core.frontend.tensor import Tensor


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def test_gather_is_one_kernel(device, kernels) -> None:
    x, idx = _rand(50, 16), np.array([3, 49, 0, -1, 7])
    tx, ti = Tensor(x, device=device), Tensor(idx, device=device)
    with kernels() as k:
        got = tx[ti].numpy()
    assert k.count == 1
    close(got, x[idx])


def test_gather_fuses_with_producer_and_consumer(device, kernels) -> None:
    x, idx = _rand(40, 8), np.array([[1, 2], [39, 0]])
    tx, ti = Tensor(x, device=device), Tensor(idx, device=device)
    with kernels() as k:
        got = ((tx * 2 + 1)[ti + 0].relu() * 3).numpy()
    assert k.count == 1
    close(got, np.maximum((x * 2 + 1)[idx], 0) * 3)


def test_two_index_gather_is_one_kernel(device, kernels) -> None:
    x = _rand(6, 7, 8)
    i, j = np.array([0, 5, 2]), np.array([6, 6, 1])
    tx, ti, tj = (Tensor(a, device=device) for a in (x, i, j))
    with kernels() as k:
        got = tx[ti, :, tj].numpy()
    assert k.count == 1
    close(got, x[i, :, j])


def test_conv2d_forward_is_at_most_two_kernels(device, kernels) -> None:
    x, w, b = _rand(2, 3, 16, 16), _rand(8, 3, 3, 3, seed=1), _rand(8, seed=2)
    tx, tw, tb = (Tensor(a, device=device) for a in (x, w, b))
    with kernels() as k:
        got = tx.conv2d(tw, tb, stride=2, padding=1).relu().numpy()
    assert k.count <= 2
    assert got.shape == (2, 8, 8, 8)


def test_cat_eye_and_like_are_one_kernel(device, kernels) -> None:
    a, b = _rand(3, 4), _rand(2, 4, seed=1)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    with kernels() as k:
        got = (ta.cat(tb, tb.ones_like()) + Tensor.eye(7, 4, device=device)).numpy()
    assert k.count == 1
    close(got, np.concatenate([a, b, np.ones_like(b)]) + np.eye(7, 4))


def test_argmax_is_two_kernels(device, kernels) -> None:
    x = _rand(33, 65)
    tx = Tensor(x, device=device)
    with kernels() as k:
        got = tx.argmax(axis=1).numpy()
    # the row max is broadcast back and fused: computed once per row (a CPU loop, an OpenCL work group)
    assert k.count == 1
    np.testing.assert_array_equal(got, x.argmax(1))
