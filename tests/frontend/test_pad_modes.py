"""Tensor.pad's modes and nn.functional.pad against torch's F.pad: values and gradients, negative (cropping)
pads mixed with each mode, int and float dtypes, and the named errors for impossible pads."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as tF  # noqa: E402

from tolk_core.errors import ArgumentError, ShapeError  # noqa: E402
from tolk_core.frontend.tensor import Tensor  # noqa: E402
from tolk_core.nn import functional as F  # noqa: E402

CASES = [  # (input shape, torch flat pad)
    ((1, 1, 5), (2, 3)),
    ((1, 1, 5), (-1, 2)),
    ((1, 1, 5), (2, -1)),
    ((1, 1, 5), (-2, -2)),
    ((2, 3, 4, 5), (1, 2, 2, 0)),
    ((2, 3, 4, 5), (3, -1, -1, 3)),
    ((1, 2, 3, 3, 4), (1, 1, 2, 0, 0, 2)),
    ((2, 7), (0, 6)),
]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", CASES)
def test_pad_mode_matches_torch(device, mode, shape, pad) -> None:
    if mode == "reflect" and max(pad) >= min(shape[-len(pad) // 2:]) - max(0, -min(pad)):
        pad = tuple(min(p, 1) for p in pad)  # torch's reflect needs pads smaller than the (cropped) axis
    if mode == "circular" and len(shape) == 2:
        pad = (0, 5)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = tF.pad(torch.tensor(x), pad, mode=mode).numpy()
    np.testing.assert_array_equal(F.pad(Tensor(x, device=device), pad, mode=mode).numpy(), want)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_mode_gradient_matches_torch(device, mode) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    g = np.random.default_rng(2).standard_normal((2, 3, 4 + 2 - 1, 5 + 3 + 1)).astype(np.float32)
    pad = (3, 1, 2, -1)
    tx = torch.tensor(x, requires_grad=True)
    (tF.pad(tx, pad, mode=mode) * torch.tensor(g)).sum().backward()
    ox = Tensor(x, device=device).requires_grad_()
    (ox.pad(pad, mode=mode) * Tensor(g, device=device)).sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_])
def test_pad_modes_keep_integer_and_bool_dtypes(device, dtype) -> None:
    x = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        got = Tensor(x, device=device).pad(((1, 2), (3, 0)), mode=mode)
        assert got.dtype.name == Tensor(x).dtype.name
        np.testing.assert_array_equal(got.numpy(), np.pad(x, ((1, 2), (3, 0)), mode=np_mode))


def test_pad_constant_value_and_pair_form() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(Tensor(x).pad(((1, 0), (-1, 2)), value=7.5).numpy(),
                                  np.pad(x[:, 1:], ((1, 0), (0, 2)), constant_values=7.5))
    np.testing.assert_array_equal(F.pad(Tensor(x), (1, 1), value=-1).numpy(),
                                  tF.pad(torch.tensor(x), (1, 1), value=-1).numpy())


def test_pad_of_an_empty_axis() -> None:
    x = np.zeros((0, 3), np.float32)
    assert Tensor(x).pad(((0, 0), (1, 1)), mode="reflect").shape == (0, 5)
    assert Tensor(x).pad(((2, 1), (0, 0))).shape == (3, 3)
    with pytest.raises(ShapeError, match="axis is empty, there is no edge element"):
        Tensor(x).pad(((1, 0), (0, 0)), mode="replicate")


def test_impossible_pads_are_named_errors() -> None:
    x = Tensor(np.zeros((2, 4), np.float32))
    with pytest.raises(ShapeError, match=r"reflect padding \(4, 0\) of axis 1 of size 4 .* smaller than the axis"):
        x.pad((4, 0), mode="reflect")
    with pytest.raises(ShapeError, match=r"reflect padding \(0, 3\) of axis 1 of size 3"):
        x.pad((-1, 3), mode="reflect")  # the limit is on the cropped axis
    with pytest.raises(ShapeError, match="wrap around more than once"):
        x.pad((0, 0, 3, 0), mode="circular")
    with pytest.raises(ArgumentError, match="pad mode must be one of"):
        x.pad((1, 1), mode="symmetric")
    with pytest.raises(ArgumentError, match="takes no value"):
        x.pad((1, 1), value=2.0, mode="reflect")
