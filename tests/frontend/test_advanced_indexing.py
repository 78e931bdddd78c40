"""numpy advanced indexing, table-driven against numpy itself: integer lists, tuples, arrays and int Tensors in
any position, broadcast together, with slices, None and Ellipsis; numpy's placement of the indexed axes
(adjacent: in place; separated: first); negative indices; host boolean masks; writes through the same
indices; and the named errors (out of range, boolean Tensor masks)."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.errors import UnsupportedError
from tolk_core.frontend.tensor import Tensor

X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) - 50


def _i(*v):
    return np.array(v, dtype=np.int64)


INDEX = [  # index forms, each applied to X with numpy and with Tolk
    ([1, 0],),
    (slice(None), [2, 0, 2]),
    (..., [4, -1]),
    ([[0, 1], [1, 0]],),
    (_i(0, 1), _i(2, 0)),  # adjacent, first axes
    (slice(None), _i(0, 2), _i(1, 3)),  # adjacent, in the middle: stay in place
    (_i(0, 1), slice(None), _i(1, 3)),  # separated by a slice: broadcast axes first
    (0, slice(None), [1, 2]),  # an int counts as advanced: separated, so first
    (slice(None), 1, [1, 2]),  # int and list adjacent: in place
    (_i([0], [1]), slice(1, 3), _i(0, 3, 1)),  # broadcast (2, 1) with (3,), separated
    (None, _i(1, 0), None, slice(None, None, -1), [2, -3]),
    (..., _i(1, 2), None),
    (_i(-1, -2), ...),
    ((1, 0),),  # an inner tuple is a sequence of indices, as numpy
    (slice(None), slice(None), [[[0]], [[3]]]),
    ([0, 0, 1], [2, 2, 2], [3, 3, 3], [4, 0, 4]),  # every axis: a gather of elements
    (_i(1), _i(2), slice(None), _i(0)),
    ([],),  # an empty list selects nothing
    (slice(None), _i(), slice(None)),
    (np.array([True, False]),),  # host boolean masks: their nonzero positions
    (slice(None), [True, False, True]),
    (np.array([[True, False, True], [False, False, True]]),),
    (..., np.array([False, True, True, False, True])),
    (np.arange(24).reshape(2, 3, 4) % 3 == 0, slice(None)),
    (1, np.array([True, True, False]), 2),
    (np.zeros((2, 3), bool),),
]


@pytest.mark.parametrize("index", INDEX, ids=[str(i) for i in range(len(INDEX))])
def test_getitem_matches_numpy(device, index) -> None:
    want = X[index]
    got = Tensor(X, device=device)[index]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("index", INDEX[:17], ids=[str(i) for i in range(17)])
def test_getitem_with_int_tensors_matches_numpy(device, index) -> None:
    as_tensors = tuple(Tensor(np.asarray(i, np.int64), device=device) if isinstance(i, (list, np.ndarray)) else i
                       for i in index)
    np.testing.assert_array_equal(Tensor(X, device=device)[as_tensors].numpy(), X[index])


@pytest.mark.parametrize("index", [INDEX[i] for i in (0, 1, 5, 6, 8, 15, 19, 21, 24)])
def test_setitem_matches_numpy(device, index) -> None:
    want = X.copy()
    want[index] = -7.0
    t = Tensor(X.copy(), device=device)
    t[index] = -7.0
    np.testing.assert_array_equal(t.numpy(), want)
    want2 = X.copy()
    want2[index] = np.arange(X[index].size, dtype=np.float32).reshape(X[index].shape)
    t2 = Tensor(X.copy(), device=device)
    t2[index] = np.arange(X[index].size, dtype=np.float32).reshape(X[index].shape)
    np.testing.assert_array_equal(t2.numpy(), want2)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.float16])
def test_advanced_indexing_keeps_the_dtype(dtype) -> None:
    x = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    got = Tensor(x)[[2, 0], 1:]
    assert got.dtype == Tensor(x).dtype
    np.testing.assert_array_equal(got.numpy(), x[[2, 0], 1:])


def test_out_of_range_host_indices_are_index_errors() -> None:
    t = Tensor(X)
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        t[[0, 2]]
    with pytest.raises(IndexError, match="index -6 is out of bounds for axis 3 with size 5"):
        t[..., [-6]]
    with pytest.raises(IndexError, match="boolean index of shape \\(3,\\) does not match axis 0 of size 2"):
        t[np.array([True, False, True])]


def test_out_of_range_tensor_indices_select_zero() -> None:
    # a Tensor index is not known on the host: a value out of range selects nothing (module docstring)
    got = Tensor(np.arange(1, 4, dtype=np.float32))[Tensor(np.array([0, 7, -1]))]
    np.testing.assert_array_equal(got.numpy(), [1.0, 0.0, 3.0])


def test_a_boolean_tensor_mask_is_refused_with_what_to_use_instead() -> None:
    t = Tensor(X)
    mask = t > 0
    with pytest.raises(UnsupportedError, match="depends on the mask's values.*where.*masked_fill"):
        t[mask]
    with pytest.raises(UnsupportedError, match="masked_fill"):
        t[mask] = 0.0


@pytest.mark.parametrize("shape", [(5,), (4, 3), (3, 2, 4), (1, 6), (2, 0)])
def test_a_plain_int_index_is_numpys_row(device, shape) -> None:
    """`t[i]` (the row a recurrent model reads every step) on a stored and on a lazy tensor: numpy's row for
    every i in range, negative ones included, built as the same node as the general path's `t[(i,)]`; past
    either end an IndexError naming the index."""
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 3
    for t, want in ((Tensor(a, device=device), a), (Tensor(a, device=device) * 2, a * 2)):
        for i in range(-shape[0], shape[0]):
            row = t[i]
            assert row.uop is t[(i,)].uop
            np.testing.assert_array_equal(row.numpy(), want[i])
        for bad in (shape[0], -shape[0] - 1):
            with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 0"):
                t[bad]
