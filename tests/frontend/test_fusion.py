"""Fusion: kernel counts (counted with GlobalCounters) no worse than tinygrad 0.14's on the same programs, and
small for the whole op surface: gathers, conv2d, cat, eye and argmax fuse. By subject as the front end is
organised."""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.helpers import close, np_attention, np_mlp
from tolk_core.frontend.tensor import Tensor


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


# ---------------------------------------------------------------- construction and movement
def test_cat_eye_and_like_are_one_kernel(device, kernels) -> None:
    a, b = _rand(3, 4), _rand(2, 4, seed=1)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    with kernels() as k:
        got = (ta.cat(tb, tb.ones_like()) + Tensor.eye(7, 4, device=device)).numpy()
    assert k.count == 1
    close(got, np.concatenate([a, b, np.ones_like(b)]) + np.eye(7, 4))


# ---------------------------------------------------------------- elementwise and reductions
def test_fused_elementwise_reduce_is_one_kernel(device, kernels) -> None:
    a, b, c = (_rand(4096, seed=i) for i in range(3))
    ta, tb, tc = (Tensor(x, device=device) for x in (a, b, c))
    with kernels() as k:
        out = ((ta * tb + tc).relu()).sum().numpy()
    assert k.count == 1
    close(out, np.maximum(a * b + c, 0).sum(dtype=np.float64).astype(np.float32))


def test_reduce_then_elementwise_is_one_kernel(device, kernels) -> None:
    a, b = _rand(64, 33), _rand(64, seed=1)
    with kernels() as k:
        out = (Tensor(a, device=device).sum(axis=1) + Tensor(b, device=device)).numpy()
    assert k.count == 1
    close(out, a.sum(1) + b)


def test_argmax_is_one_kernel(device, kernels) -> None:
    x = _rand(33, 65)
    tx = Tensor(x, device=device)
    with kernels() as k:
        got = tx.argmax(axis=1).numpy()
    # the row max is broadcast back and fused: computed once per row (a CPU loop, an OpenCL work group)
    assert k.count == 1
    np.testing.assert_array_equal(got, x.argmax(1))


def test_contiguous_adds_exactly_one_kernel(device, kernels) -> None:
    a = _rand(100, 100)
    ta = Tensor(a, device=device)
    with kernels() as fused:
        plain = ((ta * 2 + 1).exp() * 3).numpy()
    with kernels() as split:
        cut = ((ta * 2 + 1).contiguous().exp() * 3).numpy()
    assert (fused.count, split.count) == (1, 2)
    close(plain, cut)


# ---------------------------------------------------------------- indexing
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


# ---------------------------------------------------------------- nn ops
def test_matmul_is_one_kernel(device, kernels) -> None:
    a, b = _rand(33, 65), _rand(65, 17, seed=1)
    with kernels() as k:
        got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
    assert k.count == 1
    close(got, a @ b)


def test_softmax_kernels(device, kernels) -> None:
    """One kernel: row max and sum fused, the exp row a kernel-local array (docs/placements.md): a stack array
    per row on CPU, work-group shared memory on OpenCL (one group per row)."""
    x = _rand(64, 1000)
    with kernels() as k:
        out = Tensor(x, device=device).softmax().numpy()
    assert k.count == 1
    e = np.exp(x - x.max(-1, keepdims=True))
    close(out, e / e.sum(-1, keepdims=True))


def test_attention_head_stores_the_softmax_once(device, kernels) -> None:
    # the matmul with v reads each softmax weight once per column of v (64): inlined, the softmax would be
    # recomputed 64 times (the fusion bound, docs/placements.md), so it is stored, by one row kernel that fuses
    # its max and exp sum (row fusion; the scores it reads twice are stored first): the scores, the softmax and
    # P @ V, three kernels
    q, kk, v = _rand(1, 128, 64), _rand(1, 128, 64, seed=1), _rand(1, 128, 64, seed=2)
    tq, tk, tv = (Tensor(x, device=device) for x in (q, kk, v))
    with kernels() as k:
        out = ((tq @ tk.transpose(-1, -2)) * (1 / 8)).softmax() @ tv
        got = out.numpy()
    assert k.count == 3
    close(got, np_attention(q, kk, v))


def test_mlp_forward_is_two_kernels(device, kernels) -> None:
    x, w1, b1, w2, b2 = _rand(64, 784), _rand(784, 256, seed=1), _rand(256, seed=2), _rand(256, 10, seed=3), \
        _rand(10, seed=4)
    t = [Tensor(a, device=device) for a in (x, w1, b1, w2, b2)]
    with kernels() as k:
        got = ((t[0] @ t[1] + t[2]).relu() @ t[3] + t[4]).numpy()
    assert k.count == 2
    close(got, np_mlp(x, w1, b1, w2, b2))


def test_conv2d_forward_is_at_most_two_kernels(device, kernels) -> None:
    x, w, b = _rand(2, 3, 16, 16), _rand(8, 3, 3, 3, seed=1), _rand(8, seed=2)
    tx, tw, tb = (Tensor(a, device=device) for a in (x, w, b))
    with kernels() as k:
        got = tx.conv2d(tw, tb, padding=1).relu().numpy()
    assert k.count <= 2
    torch = pytest.importorskip("torch", reason="torch is not installed: the reference convolution")
    ref = torch.relu(torch.nn.functional.conv2d(*(torch.from_numpy(a) for a in (x, w, b)), padding=1))
    close(got, ref.numpy())


def test_a_strided_conv2d_is_a_phase_copy_and_one_kernel_per_phase(device, kernels) -> None:
    # stride 2, 3x3: four phases hold taps (2x2, 2x1, 1x2 and 1x1 of them); relu and bias join the last one
    x, w, b = _rand(2, 3, 16, 16), _rand(8, 3, 3, 3, seed=1), _rand(8, seed=2)
    tx, tw, tb = (Tensor(a, device=device) for a in (x, w, b))
    with kernels() as k:
        got = tx.conv2d(tw, tb, stride=2, padding=1).relu().numpy()
    assert k.count == 1 + 4
    torch = pytest.importorskip("torch", reason="torch is not installed: the reference convolution")
    ref = torch.relu(torch.nn.functional.conv2d(*(torch.from_numpy(a) for a in (x, w, b)), stride=2, padding=1))
    close(got, ref.numpy())


def test_a_padded_broadcast_is_not_one_value_along_the_padded_axis(device) -> None:
    # a constant broadcast along an axis and then padded there holds the pad's zeros too: reducing "one copy"
    # of it (prepare's reduce_of_broadcast) read a zero of the padding for every element
    t = Tensor.ones(4, device=device).pad(((1, 1),)).reshape(1, 6).expand(3, 6).sum(axis=0)
    np.testing.assert_array_equal(t.numpy(), [0, 3, 3, 3, 3, 0])
