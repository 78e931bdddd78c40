"""Tensor functions added for the layers, against independent references: erf against math.erf over a dense
grid (the error bounds its docstring states), exact and tanh GELU against torch (values and gradients),
tril/triu/masked_fill/split/chunk against torch, multinomial by its properties (seeded repeatability,
frequencies, no repeats without replacement, zero weights never drawn)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core import nn
from tolk_core.errors import ArgumentError
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import F

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")


def test_erf_error_bounds(device) -> None:
    x = (np.arange(-60000, 60001) / 1e4).astype(np.float32)
    ours = Tensor(x, device=device).erf().numpy().astype(np.float64)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    err = np.abs(ours - ref)
    assert err.max() <= 1.5e-7
    assert (err / np.maximum(np.abs(ref), 1e-30)).max() <= 2e-7
    ends = Tensor(np.array([1e-30, -1e-6, 30.0, -1e30, np.inf, -np.inf], np.float32), device=device).erf().numpy()
    np.testing.assert_allclose(ends, [2 / math.sqrt(math.pi) * 1e-30, math.erf(-1e-6), 1, -1, 1, -1], rtol=1e-6)


def test_erf_gradient(device) -> None:
    x = np.array([-40.0, -3.0, -1.0, -0.999, -0.3, 0.0, 0.2, 0.99, 1.0, 2.5, 40.0], np.float32)
    check(device, lambda t: t.erf(), lambda t: torch.erf(t), [x])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(device, approximate) -> None:
    x = np.linspace(-6, 6, 97).astype(np.float32)
    check(device, lambda t: F.gelu(t, approximate=approximate), lambda t: torch.nn.functional.gelu(
        t, approximate=approximate), [x])
    check(device, nn.GELU(approximate), torch.nn.GELU(approximate), [x], what="layer")


def test_gelu_defaults() -> None:
    x = np.linspace(-3, 3, 13).astype(np.float32)
    exact = torch.nn.functional.gelu(torch.tensor(x)).numpy()
    tanh = torch.nn.functional.gelu(torch.tensor(x), approximate="tanh").numpy()
    assert np.abs(exact - tanh).max() > 1e-4  # the two forms differ enough for the checks below to tell
    np.testing.assert_allclose(nn.GELU()(Tensor(x)).numpy(), exact, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.gelu(Tensor(x)).numpy(), exact, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(Tensor(x).gelu().numpy(), tanh, rtol=1e-5, atol=1e-6)  # tinygrad's method form


@pytest.mark.parametrize("diagonal", [-2, 0, 1, 4])
def test_tril_triu(device, diagonal) -> None:
    x = np.random.default_rng(0).standard_normal((2, 4, 5)).astype(np.float32)
    check(device, lambda t: (t.tril(diagonal), t.triu(diagonal)),
          lambda t: (torch.tril(t, diagonal), torch.triu(t, diagonal)), [x])


def test_masked_fill(device) -> None:
    rng = np.random.default_rng(1)
    x, m = rng.standard_normal((3, 4)).astype(np.float32), rng.random((1, 4)) > 0.5
    check(device, lambda t: t.masked_fill(Tensor(m, device=device), -2.5),
          lambda t: t.masked_fill(torch.tensor(m), -2.5), [x])
    ints = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3), device=device)
    out = ints.masked_fill(ints > 2, 0)
    assert out.dtype == ints.dtype and out.numpy().tolist() == [[0, 1, 2], [0, 0, 0]]


@pytest.mark.parametrize(("how", "arg", "dim"), [("split", 2, 1), ("split", 4, 0), ("split", [1, 3, 1], 1),
                                                 ("chunk", 3, 1), ("chunk", 2, 0), ("chunk", 6, 1)])
def test_split_chunk(device, how, arg, dim) -> None:
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    check(device, lambda t: getattr(t, how)(arg, dim), lambda t: getattr(t, how)(arg, dim), [x])


def test_multinomial_properties(device) -> None:
    probs = np.array([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]], np.float32)
    Tensor.manual_seed(5)
    a = Tensor(probs, device=device).multinomial(4000, replacement=True).numpy()
    Tensor.manual_seed(5)
    b = Tensor(probs, device=device).multinomial(4000, replacement=True).numpy()
    assert a.dtype == np.int64 and a.shape == (2, 4000)
    np.testing.assert_array_equal(a, b)  # seeded: the same draws
    for row, p in zip(a, probs, strict=True):
        freq = np.bincount(row, minlength=4) / row.size
        np.testing.assert_allclose(freq, p / p.sum(), atol=0.03)  # 4000 draws: std < 0.008
        assert freq[p == 0].sum() == 0
    c = Tensor(probs[0], device=device).multinomial(3).numpy()  # without replacement: distinct, non-zero weights
    assert c.shape == (3,) and sorted(c.tolist()) == [0, 2, 3]
    with pytest.raises(ArgumentError, match="without replacement"):
        Tensor(probs[0], device=device).multinomial(4)
    with pytest.raises(ArgumentError, match="non-negative"):
        Tensor(np.array([0.5, -0.1], np.float32), device=device).multinomial(1)
