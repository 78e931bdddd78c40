"""Sliding windows (convolutions, pooling) are movement ops chosen by the input's shape alone, so the chain
built for one input is replayed for the next input of that shape (`MovementMixin._chained`). The replay must
build the very nodes the Tensor ops build, and the convolutions and pools over it must keep numpy's values."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.frontend import movement
from tolk_core.frontend.tensor import Tensor


def _conv_ref(x: np.ndarray, w: np.ndarray, pad: int, stride: int, dilation: int) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    co, _, kh, kw = w.shape
    oh, ow = (h - dilation * (kh - 1) - 1) // stride + 1, (wd - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i * dilation:i * dilation + stride * (oh - 1) + 1:stride,
                      j * dilation:j * dilation + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


@pytest.mark.parametrize("shape,kernel,stride,dilation", [
    ((2, 3, 7, 9), (3, 3), (1, 1), (1, 1)), ((1, 2, 8, 8), (2, 3), (2, 1), (1, 2)), ((2, 1, 5), (3,), (1,), (2,)),
    ((1, 1, 4, 5, 6), (2, 2, 3), (1, 2, 1), (1, 1, 1))])
def test_replayed_windows_are_the_nodes_the_tensor_ops_build(shape, kernel, stride, dilation) -> None:
    rng = np.random.default_rng(0)
    first, second = (Tensor(rng.standard_normal(shape).astype(np.float32)) for _ in range(2))
    movement._chains.clear()
    built = first._windows(kernel, stride, dilation)  # records the chain
    assert len(movement._chains) == 1
    replayed = second._windows(kernel, stride, dilation)
    assert replayed.uop is second._build_windows(kernel, stride, dilation).uop
    assert replayed.shape == built.shape


def test_convolutions_and_pools_over_replayed_windows_keep_their_values() -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    for _ in range(3):  # the first call records the chain, the others replay it
        x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
        for pad, stride, dilation in ((1, 1, 1), (0, 1, 2), (1, 2, 1)):
            got = Tensor(x).conv2d(Tensor(w), padding=pad, stride=stride, dilation=dilation).numpy()
            np.testing.assert_allclose(got, _conv_ref(x.astype(np.float64), w.astype(np.float64), pad, stride,
                                                      dilation), rtol=1e-4, atol=1e-4)
        pooled = Tensor(x).max_pool2d(2).numpy()
        np.testing.assert_array_equal(pooled, x[:, :, :8, :8].reshape(2, 3, 4, 2, 4, 2).max(axis=(3, 5)))


def test_a_chain_that_is_not_movements_only_is_not_remembered() -> None:
    x = Tensor(np.ones((2, 3), np.float32))
    movement._chains.clear()
    out = x._chained(("not movements",), lambda t: (t + 1).reshape(3, 2))
    assert not movement._chains
    np.testing.assert_array_equal(out.numpy(), np.full((3, 2), 2.0))
