"""repeat / tile / repeat_interleave / one_hot against torch: extra leading axes, zero repeats, empty tensors,
negative dims, int and float dtypes, gradients, and the named errors."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tolk_core.errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError  # noqa: E402
from tolk_core.frontend.tensor import Tensor  # noqa: E402

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("shape,sizes", [((2, 3), (2, 1)), ((2, 3), (3, 1, 2)), ((4,), (0,)), ((0, 2), (2, 3)),
                                         ((), (2, 3)), ((1, 2, 1), (1, 3, 1, 5))])
def test_repeat_matches_torch(device, dtype, shape, sizes) -> None:
    x = (RNG.standard_normal(shape) * 5).astype(dtype)
    want = torch.tensor(x).repeat(*sizes).numpy()
    np.testing.assert_array_equal(Tensor(x, device=device).repeat(*sizes).numpy(), want)
    np.testing.assert_array_equal(Tensor(x, device=device).repeat(sizes).numpy(), want)


@pytest.mark.parametrize("dims", [(2,), (2, 1), (1, 2, 2), (3, 1, 1, 1)])
def test_tile_matches_torch(dims) -> None:
    x = RNG.standard_normal((2, 1, 3)).astype(np.float32)
    np.testing.assert_array_equal(Tensor(x).tile(dims).numpy(), torch.tensor(x).tile(dims).numpy())


@pytest.mark.parametrize("repeats", [0, 1, 3, [2, 0, 1], [0, 0, 0]])
@pytest.mark.parametrize("dim", [0, 1, -1, None])
def test_repeat_interleave_matches_torch(device, repeats, dim) -> None:
    x = np.arange(9, dtype=np.int32).reshape(3, 3)
    if isinstance(repeats, list) and dim is None:
        repeats = repeats * 3
    r = torch.tensor(repeats) if isinstance(repeats, list) else repeats
    want = torch.tensor(x).repeat_interleave(r, dim).numpy()
    np.testing.assert_array_equal(Tensor(x, device=device).repeat_interleave(repeats, dim).numpy(), want)


def test_repeat_gradients_match_torch() -> None:
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    g1, g2 = RNG.standard_normal((2, 4, 3)).astype(np.float32), RNG.standard_normal((2, 6)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ((tx.repeat(1, 2, 1) * torch.tensor(g1)).sum() + (tx.repeat_interleave(2, 1) * torch.tensor(g2)).sum()).backward()
    ox = Tensor(x).requires_grad_()
    ((ox.repeat(1, 2, 1) * Tensor(g1)).sum() + (ox.repeat_interleave(2, 1) * Tensor(g2)).sum()).backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("num_classes", [-1, 5, 2])
def test_one_hot_matches_torch(device, num_classes) -> None:
    labels = np.array([[0, 3], [1, 1]], np.int64)
    if num_classes == 2:  # torch refuses labels past the classes; here they give zero rows
        got = Tensor(labels, device=device).one_hot(2).numpy()
        np.testing.assert_array_equal(got, [[[1, 0], [0, 0]], [[0, 1], [0, 1]]])
        return
    want = torch.nn.functional.one_hot(torch.tensor(labels), num_classes).numpy()
    got = Tensor(labels.astype(np.int32), device=device).one_hot(num_classes)
    assert got.dtype.name == "int64"
    np.testing.assert_array_equal(got.numpy(), want)


def test_named_errors() -> None:
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError, match=r"repeat sizes \(2,\) must be non-negative, at least one per axis"):
        x.repeat(2)
    with pytest.raises(ShapeError, match="2 repeats for axis 1 of size 3"):
        x.repeat_interleave([1, 1], 1)
    with pytest.raises(ArgumentTypeError, match="depends on them"):
        x.repeat_interleave(Tensor(np.array([1, 1, 1])), 1)
    with pytest.raises(DTypeError, match="must hold integers"):
        x.one_hot(3)
    with pytest.raises(IndexError, match="class values must be non-negative, got -1"):
        Tensor(np.array([-1, 2])).one_hot()
    with pytest.raises(ArgumentError, match="needs num_classes"):
        Tensor(np.zeros(0, np.int64)).one_hot()
