"""Transposed convolution against torch 2.13: F.conv_transpose1d/2d/3d and nn.ConvTranspose1d/2d/3d, with
strides, padding, output_padding, groups, dilation, unbatched input; values and gradients of input, weight and
bias; torch's initialisation bounds; and the named errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.nn.torch_check import check, copy_params  # noqa: E402
from tolk_core import nn  # noqa: E402
from tolk_core.errors import ArgumentError, ShapeError  # noqa: E402
from tolk_core.nn import functional as F  # noqa: E402

RNG = np.random.default_rng(7)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(("nd", "x_shape", "w_shape", "kw"), [
    (1, (2, 4, 7), (4, 3, 3), {}),
    (1, (2, 4, 7), (4, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    (1, (4, 6), (4, 2, 4), {"stride": 3, "groups": 2, "dilation": 2, "output_padding": 2}),
    (2, (2, 4, 5, 6), (4, 3, 3, 2), {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2)}),
    (2, (1, 4, 5, 5), (4, 2, 3, 3), {"groups": 2, "dilation": 2, "padding": 2}),
    (2, (1, 2, 5, 6), (2, 3, 2, 2), {"padding": 2}),  # padding above dilation*(k-1) crops the input
    (3, (1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"stride": (1, 2, 2), "padding": (0, 1, 1), "output_padding": (0, 1, 0)}),
])
def test_conv_transpose_matches_torch(device, nd, x_shape, w_shape, kw) -> None:
    ours = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
    theirs = (torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
              torch.nn.functional.conv_transpose3d)[nd - 1]
    cout = w_shape[1] * kw.get("groups", 1)
    check(device, lambda x, w, b: ours(x, w, b, **kw), lambda x, w, b: theirs(x, w, b, **kw),
          [_x(*x_shape), _x(*w_shape), _x(cout)])


@pytest.mark.parametrize(("cls", "tcls", "shape", "kw"), [
    (nn.ConvTranspose1d, torch.nn.ConvTranspose1d, (2, 4, 9), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (nn.ConvTranspose1d, torch.nn.ConvTranspose1d, (4, 9), {"kernel_size": 2, "groups": 2, "bias": False}),
    (nn.ConvTranspose2d, torch.nn.ConvTranspose2d, (2, 4, 5, 4),
     {"kernel_size": (3, 2), "stride": 2, "output_padding": 1, "dilation": (1, 2)}),
    (nn.ConvTranspose3d, torch.nn.ConvTranspose3d, (1, 2, 3, 2, 3), {"kernel_size": 2, "stride": (2, 1, 1)}),
])
def test_conv_transpose_layers(device, cls, tcls, shape, kw) -> None:
    cin = shape[-cls.nd - 1]
    ours, theirs = cls(cin, 6, device=device, **kw), tcls(cin, 6, **kw)
    assert ours.weight.shape == tuple(theirs.weight.shape)
    check(device, ours, theirs, [_x(*shape)], copy_params(ours, theirs))


def test_conv_transpose_initialisation_bound_is_torchs() -> None:
    layer = nn.ConvTranspose2d(8, 6, 3, groups=2)
    bound = 1 / math.sqrt(6 // 2 * 9)  # torch's fan_in: the weight's second axis times the kernel
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (8, 3, 3, 3) and b.shape == (6,)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound


def test_conv_transpose_errors_are_named() -> None:
    x, w = nn.Tensor.zeros(1, 4, 5, 5), nn.Tensor.zeros(4, 2, 3, 3)
    with pytest.raises(ArgumentError, match="output_padding .* must be smaller than the stride"):
        F.conv_transpose2d(x, w, stride=2, output_padding=2)
    with pytest.raises(ShapeError, match="the input has 3 channels, the weight expects 4"):
        F.conv_transpose2d(nn.Tensor.zeros(1, 3, 5, 5), w)
    with pytest.raises(ShapeError, match="needs a 4-d weight"):
        F.conv_transpose2d(x, nn.Tensor.zeros(4, 2, 3))
    with pytest.raises(ArgumentError, match="must both divide by groups=3"):
        nn.ConvTranspose1d(4, 6, 3, groups=3)
