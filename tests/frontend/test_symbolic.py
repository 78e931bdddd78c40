"""Symbolic shapes: bound Variables in shapes; one compiled kernel serves every bound value."""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.helpers import close
from tolk_core.counters import GlobalCounters
from tolk_core.errors import ShapeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.uop import Variable

DATA = np.random.default_rng(7).uniform(-2, 2, size=(64, 48)).astype(np.float32)


def _program(x: Tensor, n) -> Tensor:
    """Rows [0, n) of x, scaled, padded by one row of zeros, and summed per column, plus a row-sum of the window."""
    window = x.shrink(((0, n), None))
    return (window * 3 + 1).pad(((0, 1), (0, 0))).sum(axis=0) + window.exp().sum(axis=0) * 0.5


def _reference(n: int) -> np.ndarray:
    w = DATA[:n]
    return np.pad(w * 3 + 1, ((0, 1), (0, 0))).sum(0) + np.exp(w).sum(0) * 0.5


def test_five_values_compile_once(device) -> None:
    x = Tensor(DATA, device=device)
    n = Variable("n", 1, 64)
    _program(x, n.bind(2)).numpy()  # warm: the kernels of this program for any n
    before = GlobalCounters.compiles + GlobalCounters.disk_cache_hits
    for value in (1, 5, 17, 33, 64):
        close(_program(x, n.bind(value)).numpy(), _reference(value), atol=1e-3)
    assert GlobalCounters.compiles + GlobalCounters.disk_cache_hits == before


def test_symbolic_slice_and_expand(device) -> None:
    x = Tensor(DATA, device=device)
    n = Variable("rows", 1, 64)
    for value in (3, 40):
        bound = n.bind(value)
        got = x[:bound, 5:9].sum(axis=1, keepdim=True).expand(bound, 4) * Tensor.ones(1, 4, device=device)
        close(got.numpy(), np.broadcast_to(DATA[:value, 5:9].sum(1, keepdims=True), (value, 4)))


def test_symbolic_shape_is_symbolic_until_realized() -> None:
    n = Variable("k", 1, 10).bind(4)
    t = Tensor(DATA).shrink(((0, n), (0, 2)))
    assert str(t.shape[0]) == "k" and t.shape[1] == 2
    assert t.numpy().shape == (4, 2)


def test_one_variable_bound_twice_is_refused() -> None:
    n = Variable("m", 1, 10)
    t = Tensor(DATA).shrink(((0, n.bind(2)), None)).sum() + Tensor(DATA).shrink(((0, n.bind(3)), None)).sum()
    with pytest.raises(ShapeError, match="'m' is bound to both 2 and 3"):
        t.numpy()
