"""A kernel computes at most one contraction, and none inside a plain reduction's operand
(tolk_core/schedule/parallel_reductions.py): kernels counted through the whole pipeline, values against numpy."""
from __future__ import annotations

import numpy as np

from tolk_core import Tensor


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run(device: str, kernels, fn, *arrays: np.ndarray) -> tuple[np.ndarray, int]:
    ts = [Tensor(a, device=device).realize() for a in arrays]
    with kernels() as k:
        out = fn(*ts).numpy()
    return out, k.count


def test_two_matmuls_side_by_side_are_two_kernels(device, kernels) -> None:
    # a GRU's x @ W + h @ U, with different inner sizes: the smaller one is stored, the larger adds it
    a, b, c, d = _data(6, 40), _data(40, 24, seed=1), _data(6, 20, seed=2), _data(20, 24, seed=3)
    got, n = _run(device, kernels, lambda a, b, c, d: (a @ b + c @ d).relu(), a, b, c, d)
    assert n == 2
    np.testing.assert_allclose(got, np.maximum(a @ b + c @ d, 0), rtol=1e-5, atol=1e-5)


def test_a_matmul_inside_a_plain_sum_is_stored_first(device, kernels) -> None:
    # resnet50's global average pool over its last convolution: the pool reads the stored product
    x, w = _data(3, 32, 7), _data(32, 5, seed=1)
    got, n = _run(device, kernels, lambda x, w: (x.transpose(1, 2) @ w).relu().mean(axis=1), x, w)
    assert n == 2
    np.testing.assert_allclose(got, np.maximum(x.transpose(0, 2, 1) @ w, 0).mean(axis=1), rtol=1e-5, atol=1e-5)


def test_plain_sums_of_the_same_data_stay_in_one_kernel(device, kernels) -> None:
    # a sum and a sum of squares: one pass over x serves both
    x = _data(8, 300)
    got, n = _run(device, kernels, lambda x: x.sum(axis=1) + (x * x).sum(axis=1), x)
    assert n == 1
    np.testing.assert_allclose(got, x.sum(axis=1) + (x * x).sum(axis=1), rtol=1e-5, atol=1e-4)


def test_short_contractions_stay_in_one_kernel(device, kernels) -> None:
    # four products per output cost less than the store and load that splitting would add
    a, b, c, d = _data(6, 4), _data(4, 24, seed=1), _data(6, 4, seed=2), _data(4, 24, seed=3)
    got, n = _run(device, kernels, lambda a, b, c, d: a @ b + c @ d, a, b, c, d)
    assert n == 1
    np.testing.assert_allclose(got, a @ b + c @ d, rtol=1e-5, atol=1e-5)


def test_attention_values_are_numpys_with_the_rule_in_place(device) -> None:
    # the scores sit inside the weighted sum's operand, itself a contraction, which the rule leaves to the row
    # fusion: only the values are checked here (the kernel counts of attention: tests/frontend/test_fusion.py)
    q, k, v = _data(2, 16, 8), _data(2, 16, 8, seed=1), _data(2, 16, 8, seed=2)
    out = Tensor(q, device=device).scaled_dot_product_attention(Tensor(k, device=device), Tensor(v, device=device))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-5)


def test_slices_of_one_matmul_read_by_one_kernel_store_it(device, kernels) -> None:
    # a GRU cell's gates: one h @ U^T + b cut in three slices that one elementwise kernel reads. Inlined, each
    # slice was its own sum beside the others (three dot products per output); stored, the product is one
    # matmul kernel and the gates one elementwise kernel
    h, u, b = _data(5, 24), _data(3 * 20, 24, seed=1), _data(3 * 20, seed=2)

    def cell(h, u, b):
        r, z, n = (h @ u.T + b).chunk(3, 1)
        return r.sigmoid() * z + n.tanh()
    got, n = _run(device, kernels, cell, h, u, b)
    assert n == 2
    g = h @ u.T + b
    r, z, nn_ = g[:, :20], g[:, 20:40], g[:, 40:]
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-r)) * z + np.tanh(nn_), rtol=1e-5, atol=1e-5)


def test_one_slice_of_a_matmul_stays_in_its_reader(device, kernels) -> None:
    # a single slice is one sum over its part of the output: the epilogue stays fused
    h, u = _data(5, 24), _data(60, 24, seed=1)
    got, n = _run(device, kernels, lambda h, u: (h @ u.T)[:, 10:30].relu(), h, u)
    assert n == 1
    np.testing.assert_allclose(got, np.maximum((h @ u.T)[:, 10:30], 0), rtol=1e-5, atol=1e-5)
