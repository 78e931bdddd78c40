"""sort / argsort / topk against torch's stable sort: every axis, both directions, ties (lower index first,
ONNX's TopK rule), NaN (the largest), -0.0, int / bool dtypes, empty and size-1 axes, gradients, errors."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tolk_core.errors import ArgumentError  # noqa: E402
from tolk_core.frontend.tensor import Tensor  # noqa: E402

RNG = np.random.default_rng(0)


def _data(dtype, shape):
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(bool)
    x = RNG.integers(-4, 5, size=shape).astype(dtype)  # few distinct values: many ties
    if np.issubdtype(dtype, np.floating):
        x.flat[::7] = np.nan
        x.flat[3::11] = -0.0
        x.flat[5::13] = -np.inf
    return x


def _torch_sort(x, dim, descending):
    t = torch.tensor(x.astype(np.uint8) if x.dtype == np.bool_ else x)
    v, i = torch.sort(t, dim=dim, descending=descending, stable=True)
    return v.numpy().astype(x.dtype), i.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_torch_stable(device, dtype, dim, descending) -> None:
    x = _data(dtype, (5, 9, 3))
    values, indices = Tensor(x, device=device).sort(dim, descending)
    want_v, want_i = _torch_sort(x, dim, descending)
    assert indices.dtype.name == "int64"
    np.testing.assert_array_equal(values.numpy(), want_v)
    np.testing.assert_array_equal(indices.numpy(), want_i)
    if dtype == np.float32:
        np.testing.assert_array_equal(np.signbit(values.numpy()), np.signbit(want_v))


@pytest.mark.parametrize("k", [0, 1, 4, 9])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_topk_is_the_first_k_of_the_stable_sort(device, k, largest, dtype) -> None:
    x = _data(dtype, (4, 9))
    values, indices = Tensor(x, device=device).topk(k, dim=1, largest=largest)
    want_v, want_i = _torch_sort(x, 1, largest)
    np.testing.assert_array_equal(values.numpy(), want_v[:, :k])
    np.testing.assert_array_equal(indices.numpy(), want_i[:, :k])


def test_topk_ties_take_the_lower_index_first() -> None:
    values, indices = Tensor(np.array([1, 3, 2, 3, 3], np.int32)).topk(2)
    np.testing.assert_array_equal(values.numpy(), [3, 3])
    np.testing.assert_array_equal(indices.numpy(), [1, 3])
    np.testing.assert_array_equal(Tensor(np.array([2.0, 1.0, 2.0], np.float32)).argsort(descending=True).numpy(),
                                  [0, 2, 1])


def test_sort_of_empty_size_one_and_scalar_tensors() -> None:
    v, i = Tensor(np.zeros((3, 0), np.float32)).sort()
    assert v.shape == i.shape == (3, 0)
    v, i = Tensor(np.array([[5.0], [-1.0]], np.float32)).sort(dim=1)
    np.testing.assert_array_equal(v.numpy(), [[5.0], [-1.0]])
    np.testing.assert_array_equal(i.numpy(), [[0], [0]])
    v, i = Tensor(np.float32(2.5)).sort()
    assert v.shape == () and v.item() == 2.5 and i.item() == 0


def test_sort_and_topk_gradients_match_torch() -> None:
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    g1, g2 = RNG.standard_normal((3, 7)).astype(np.float32), RNG.standard_normal((3, 3)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ((tx.sort(dim=1)[0] * torch.tensor(g1)).sum() + (tx.topk(3, dim=1)[0] * torch.tensor(g2)).sum()).backward()
    ox = Tensor(x).requires_grad_()
    ((ox.sort(dim=1)[0] * Tensor(g1)).sum() + (ox.topk(3, dim=1)[0] * Tensor(g2)).sum()).backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_a_longer_axis_sorts_correctly() -> None:
    x = RNG.standard_normal(1000).astype(np.float32)
    values, indices = Tensor(x).sort()
    np.testing.assert_array_equal(indices.numpy(), np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(values.numpy(), np.sort(x))


def test_topk_with_an_impossible_k_is_a_named_error() -> None:
    x = Tensor(np.zeros((2, 4), np.float32))
    with pytest.raises(ArgumentError, match=r"topk's k must be an int in \[0, 4\]"):
        x.topk(5)
    with pytest.raises(ArgumentError, match="got -1"):
        x.topk(-1)
