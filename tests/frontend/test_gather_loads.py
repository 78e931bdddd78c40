"""Gathers read the selected rows instead of comparing against every row (schedule/gather.py): `weight[ids]`,
`nn.Embedding` (one_hot(ids) @ weight), `Tensor.gather` and advanced indexing by several tensors give numpy's
values on every compiled device, with Tolk's out-of-range rules (a negative index counts from the end, one
outside [-n, n) gathers 0; a one_hot label outside [0, n) is a row of zeros), int32 and int64 ids and odd sizes;
and the kernel's executed work (the profiler's count) does not grow with the table's row count."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core import nn
from tolk_core.frontend.tensor import Tensor

RNG = np.random.default_rng(7)


def _take(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """numpy's table[ids] with Tolk's rule for Tensor indices: negatives wrap once, anything else outside gives
    a zero row."""
    n = table.shape[0]
    i = np.where(ids < 0, ids + n, ids)
    inside = (i >= 0) & (i < n)
    return np.where(inside.reshape(inside.shape + (1,) * (table.ndim - 1)), table[np.clip(i, 0, n - 1)], 0)


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_getitem_by_tensor_matches_numpy(device, id_dtype) -> None:
    table = RNG.standard_normal((37, 5)).astype(np.float32)
    ids = np.array([[0, 36, -1, 40], [-37, -38, 5, 5], [7, 2**20, -(2**20), 36]], dtype=id_dtype)
    out = Tensor(table, device=device)[Tensor(ids, device=device)].numpy()
    np.testing.assert_array_equal(out, _take(table, ids))


def test_getitem_keeps_bits(device) -> None:
    table = np.array([[-0.0, np.nan, 1.5], [np.inf, -np.inf, 0.0]], dtype=np.float32)
    ids = np.array([1, 0, 0, 1], dtype=np.int32)
    out = Tensor(table, device=device)[Tensor(ids, device=device)].numpy()
    assert out.view(np.uint32).tolist() == table[ids].view(np.uint32).tolist()


def test_embedding_matches_numpy(device) -> None:
    emb = nn.Embedding(23, 6, device=device)
    ids = np.array([[0, 22, 3], [4, -1, 23]], dtype=np.int32)  # one_hot: labels outside [0, 23) give zero rows
    out = emb(Tensor(ids, device=device)).numpy()
    w = emb.weight.numpy()
    want = np.where(((ids >= 0) & (ids < 23))[..., None], w[np.clip(ids, 0, 22)], 0)
    np.testing.assert_array_equal(out, want)


def test_embedding_gradient_is_the_scatter_add(device) -> None:
    emb = nn.Embedding(11, 3, device=device)
    ids = np.array([1, 4, 1, 10, 4, 1], dtype=np.int32)
    up = RNG.standard_normal((6, 3)).astype(np.float32)
    (emb(Tensor(ids, device=device)) * Tensor(up, device=device)).sum().backward()
    want = np.zeros((11, 3), np.float32)
    np.add.at(want, ids, up)
    np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-6, atol=1e-6)


def test_gather_along_axis_matches_numpy(device) -> None:
    x = RNG.standard_normal((4, 7)).astype(np.float32)
    idx = RNG.integers(-7, 7, (4, 3))
    out = Tensor(x, device=device).gather(1, Tensor(idx, device=device)).numpy()
    np.testing.assert_array_equal(out, np.take_along_axis(x, idx % 7, 1))


def test_several_index_tensors_match_numpy(device) -> None:
    y = RNG.standard_normal((7, 8, 3)).astype(np.float32)
    a, b = np.array([0, 6, -1]), np.array([2, 0, -3])
    out = Tensor(y, device=device)[Tensor(a, device=device), :, Tensor(b, device=device)].numpy()
    np.testing.assert_array_equal(out, y[a, :, b])


def _work(rows: int, vocab: int, width: int) -> tuple[int, int]:
    """(executed, nominal) operations of the kernels of `table[ids]` for `rows` ids into a (vocab, width)
    table, on CPU."""
    table = Tensor(RNG.standard_normal((vocab, width)).astype(np.float32))
    ids = Tensor(RNG.integers(0, vocab, rows).astype(np.int32))
    with tolk_core.profile() as prof:
        table[ids].realize()
    return sum(r.executed for r in prof.rows), sum(r.nominal for r in prof.rows)


def test_lookup_work_is_rows_times_width() -> None:
    small, big = _work(5, 64, 12), _work(5, 4096, 12)
    assert big[0] == small[0] <= 8 * 5 * 12  # the same executed work for a table 64 times longer
    assert big[1] >= 5 * 4096 * 12  # what the one-hot form stands for: every row compared


def test_a_count_of_hits_matches_numpy(device) -> None:
    ids = np.array([0, 5, -1, 7, 3, 5], dtype=np.int32)
    hits = Tensor(ids, device=device).unsqueeze(-1) == Tensor.arange(6, device=device)
    out = hits.where(1, 0).sum(-1).numpy()
    np.testing.assert_array_equal(out, ((ids >= 0) & (ids < 6)).astype(out.dtype))
