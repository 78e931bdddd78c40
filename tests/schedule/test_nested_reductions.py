"""A reduction of a reduction by the same operation merges into one (tolk_core/schedule/nested_reductions.py):
counted on the graph the pass returns, values against numpy through the whole pipeline."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import Tensor
from tolk_core.ir.ops import Op
from tolk_core.schedule.nested_reductions import merge_nested_reductions


def _reductions(t: Tensor) -> int:
    return sum(u.op is Op.REDUCE_AXIS for u in merge_nested_reductions(t.uop).toposort())


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_linear_weight_gradient_is_one_sum():
    """x @ W.T over (batch, tokens): W's gradient is the matmul's sum over tokens, then a sum over the batch
    through a reshape and a permute; merged, one sum over both, equal to numpy's."""
    xn, gn = _data(2, 3, 4), _data(2, 3, 5, seed=1)
    w = Tensor(np.zeros((5, 4), np.float32)).requires_grad_()
    ((Tensor(xn) @ w.T) * Tensor(gn)).sum().backward()
    assert sum(u.op is Op.REDUCE_AXIS for u in w.grad.uop.toposort()) == 2
    assert _reductions(w.grad) == 1
    np.testing.assert_allclose(w.grad.numpy(), np.einsum("bti,bto->oi", xn, gn), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make, ref, merged", [
    (lambda t: t.sum(1).sum(0), lambda a: a.sum(1).sum(0), 1),
    (lambda t: t.max(2).max(0), lambda a: a.max(2).max(0), 1),
    (lambda t: t.max(axis=1, keepdim=True).permute(2, 0, 1).max(1), lambda a: a.max(1, keepdims=True)
     .transpose(2, 0, 1).max(1), 1),
    (lambda t: t.sum(2).sum(1).sum(0), lambda a: a.sum(2).sum(1).sum(0), 1),
    (lambda t: t.max(1).sum(0), lambda a: a.max(1).sum(0), 2),               # different operations
    (lambda t: t.sum(2).reshape(6).sum(0), lambda a: a.sum(2).reshape(6).sum(0), 2),  # axes merged by a reshape
])
def test_pairs_merge_only_where_they_may(make, ref, merged):
    a = _data(2, 3, 4)
    t = make(Tensor(a))
    assert _reductions(t) == merged
    np.testing.assert_allclose(t.numpy(), ref(a), rtol=1e-5, atol=1e-5)


def test_an_inner_sum_read_elsewhere_is_not_merged():
    """Merging would compute the inner sums twice: once in the merged sum and once for the other reader."""
    a = _data(3, 4, 5)
    s = Tensor(a).sum(2)
    t = s.sum(0) + s[0]
    assert _reductions(t) == 2
    np.testing.assert_allclose(t.numpy(), a.sum(2).sum(0) + a.sum(2)[0], rtol=1e-5, atol=1e-5)


def test_counts_of_booleans_merge():
    """A sum of booleans counts in int64 (the cast comes before the inner sum): the two sums are sums of int64."""
    a = _data(3, 4, 5) > 0
    t = Tensor(a).sum(2).sum(0)
    assert _reductions(t) == 1
    np.testing.assert_array_equal(t.numpy(), a.sum(2).sum(0))
