"""gather / scatter / scatter_reduce against torch: every axis (negative too), int and float dtypes, repeated
indices, scalar sources, empty indices, gradients, and the named errors."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tolk_core.errors import ArgumentError, DTypeError, ShapeError  # noqa: E402
from tolk_core.frontend.tensor import Tensor  # noqa: E402

RNG = np.random.default_rng(0)


def _index(shape, n, rng=RNG):
    return rng.integers(0, n, size=shape).astype(np.int64)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_gather_matches_torch(device, dtype, dim) -> None:
    x = (RNG.standard_normal((3, 4, 5)) * 10).astype(dtype)
    ishape = [2, 3, 4]
    ishape[dim] = 6  # longer than the axis: indices repeat
    idx = _index(ishape, x.shape[dim])
    want = torch.tensor(x).gather(dim, torch.tensor(idx)).numpy()
    np.testing.assert_array_equal(Tensor(x, device=device).gather(dim, Tensor(idx, device=device)).numpy(), want)


def test_gather_negative_indices_count_from_the_end_and_keep_negative_zero() -> None:
    x = np.array([[1.0, -0.0, np.nan], [np.inf, 5.0, -2.0]], np.float32)
    got = Tensor(x).gather(1, [[-2, -1], [0, -3]]).numpy()
    np.testing.assert_array_equal(got, np.take_along_axis(x, np.array([[1, 2], [0, 0]]), 1))
    assert np.signbit(got[0, 0])


def test_gather_of_a_tensor_index_out_of_range_gives_zero_and_host_data_is_checked() -> None:
    x = Tensor(np.arange(1, 5, dtype=np.float32))
    np.testing.assert_array_equal(x.gather(0, Tensor(np.array([9, 1]))).numpy(), [0.0, 2.0])
    with pytest.raises(IndexError, match="gather: index 4 is out of bounds for axis 0 with size 4"):
        x.gather(0, [4])


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_matches_torch_with_distinct_indices(device, dim, dtype) -> None:
    x = (RNG.standard_normal((4, 5)) * 10).astype(dtype)
    src = (RNG.standard_normal((4, 5)) * 10).astype(dtype)
    n = x.shape[dim]
    ishape = (3, 4) if dim == 0 else (4, 3)  # smaller than src: scatter reads src's leading block
    # distinct along dim: torch defines the result only then
    perm = np.argsort(RNG.random((n, 4) if dim == 0 else (4, n)), axis=dim).astype(np.int64)
    idx = perm[:3] if dim == 0 else perm[:, :3]
    assert idx.shape == ishape
    want = torch.tensor(x).scatter(dim, torch.tensor(idx), torch.tensor(src)).numpy()
    got = Tensor(x, device=device).scatter(dim, Tensor(idx, device=device), Tensor(src, device=device))
    np.testing.assert_array_equal(got.numpy(), want)


def test_scatter_repeated_index_last_write_wins_and_scalar_source() -> None:
    x = Tensor(np.zeros((2, 4), np.float32))
    got = x.scatter(1, [[1, 1, 3], [0, 0, 0]], Tensor(np.array([[1, 2, 3], [4, 5, 6]], np.float32)))
    np.testing.assert_array_equal(got.numpy(), [[0, 2, 0, 3], [6, 0, 0, 0]])
    np.testing.assert_array_equal(x.scatter(0, [[1, 0]], 7.5).numpy(), [[0, 7.5, 0, 0], [7.5, 0, 0, 0]])
    np.testing.assert_array_equal(x.scatter(1, np.zeros((2, 0), np.int64), 1.0).numpy(), np.zeros((2, 4)))


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_scatter_reduce_matches_torch(device, reduce, include_self, dtype) -> None:
    x = RNG.integers(-5, 6, size=(3, 6)).astype(dtype)
    src = RNG.integers(-5, 6, size=(3, 7)).astype(dtype)
    idx = _index((3, 7), 4)  # repeated indices, and columns 4, 5 never hit
    want = torch.tensor(x).scatter_reduce(1, torch.tensor(idx), torch.tensor(src), reduce,
                                          include_self=include_self).numpy()
    got = Tensor(x, device=device).scatter_reduce(1, Tensor(idx, device=device), Tensor(src, device=device),
                                                  reduce, include_self)
    np.testing.assert_array_equal(got.numpy(), want)


def test_scatter_add_is_a_sum_of_every_repeat() -> None:
    x = np.ones((2, 3), np.float32)
    src = np.arange(8, dtype=np.float32).reshape(2, 4)
    idx = np.array([[0, 0, 2, 0], [1, 1, 1, 1]])
    want = torch.tensor(x).scatter_add(1, torch.tensor(idx), torch.tensor(src)).numpy()
    np.testing.assert_array_equal(Tensor(x).scatter_add(1, Tensor(idx), Tensor(src)).numpy(), want)


def test_scatter_reduce_amax_propagates_nan() -> None:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    got = Tensor(x).scatter_reduce(0, [0, 0, 1], Tensor(np.array([np.nan, 5.0, -1.0], np.float32)), "amax")
    want = torch.tensor(x).scatter_reduce(0, torch.tensor([0, 0, 1]), torch.tensor([np.nan, 5.0, -1.0]), "amax")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_gradients_match_torch() -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    src = RNG.standard_normal((3, 4)).astype(np.float32)
    g = RNG.standard_normal((3, 4)).astype(np.float32)
    gx = RNG.standard_normal((3, 5)).astype(np.float32)
    idx = np.array([[0, 4, 4, 1], [2, 2, 2, 2], [3, 0, 1, 2]])
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    loss = (tx.gather(1, torch.tensor(idx)) * torch.tensor(g)).sum()
    loss = loss + (tx.scatter_reduce(1, torch.tensor(idx), ts, "sum") * torch.tensor(gx)).sum()
    loss = loss + (tx.scatter_reduce(1, torch.tensor(idx), ts, "mean", include_self=False) * torch.tensor(gx)).sum()
    loss.backward()
    ox, os_ = Tensor(x).requires_grad_(), Tensor(src).requires_grad_()
    out = (ox.gather(1, idx) * Tensor(g)).sum()
    out = out + (ox.scatter_reduce(1, idx, os_, "sum") * Tensor(gx)).sum()
    out = out + (ox.scatter_reduce(1, idx, os_, "mean", include_self=False) * Tensor(gx)).sum()
    out.backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(os_.grad.numpy(), ts.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_extreme_gradients_match_torch(reduce, include_self) -> None:
    x, src = RNG.standard_normal((3, 5)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[0, 4, 4, 1], [2, 2, 2, 2], [3, 0, 1, 2]])
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    tx.scatter_reduce(1, torch.tensor(idx), ts, reduce, include_self=include_self).sum().backward()
    ox, os_ = Tensor(x).requires_grad_(), Tensor(src).requires_grad_()
    ox.scatter_reduce(1, idx, os_, reduce, include_self).sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(os_.grad.numpy(), ts.grad.numpy())


def test_scatter_gradient_matches_torch_with_distinct_indices() -> None:
    x, src = RNG.standard_normal((2, 4)).astype(np.float32), RNG.standard_normal((2, 2)).astype(np.float32)
    g = RNG.standard_normal((2, 4)).astype(np.float32)
    idx = np.array([[3, 0], [1, 2]])
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    (tx.scatter(1, torch.tensor(idx), ts) * torch.tensor(g)).sum().backward()
    ox, os_ = Tensor(x).requires_grad_(), Tensor(src).requires_grad_()
    (ox.scatter(1, idx, os_) * Tensor(g)).sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(os_.grad.numpy(), ts.grad.numpy())


def test_named_errors() -> None:
    x = Tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(ShapeError, match=r"index of shape \(4, 4\) must have the rank of the tensor \(3, 4\)"):
        x.gather(1, np.zeros((4, 4), np.int64))
    with pytest.raises(ShapeError, match="must have the rank"):
        x.gather(0, np.zeros(3, np.int64))
    with pytest.raises(DTypeError, match="must hold integers"):
        x.gather(0, Tensor(np.zeros((1, 1), np.float32)))
    with pytest.raises(ShapeError, match=r"src of shape \(1, 1\) must have the index's rank and at least"):
        x.scatter(0, np.zeros((2, 2), np.int64), Tensor(np.zeros((1, 1), np.float32)))
    with pytest.raises(ArgumentError, match="reduce must be one of"):
        x.scatter_reduce(0, np.zeros((1, 1), np.int64), x, "max")
    with pytest.raises(ShapeError, match="out of range"):
        x.gather(2, np.zeros((1, 1), np.int64))
