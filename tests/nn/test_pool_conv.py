"""Pooling and N-d convolution against torch 2.13's: max/avg pooling in 1-d and 2-d with strides, padding
(-inf for max), dilation, ceil_mode, count_include_pad and unbatched input; conv1d, conv3d and conv2d of an
unbatched input, groups and padding="same". Values and gradients (tests/nn/torch_check.py)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.nn.torch_check import check, copy_params
from tolk_core import nn
from tolk_core.nn import F

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")
tf = torch.nn.functional


def _x(*shape: int) -> np.ndarray:
    # distinct values, so a max has one winner and its gradient one destination
    return np.random.default_rng(len(shape)).permutation(np.prod(shape)).reshape(shape).astype(np.float32) / 7


MAX_CASES = [  # (input shape, kwargs)
    ((2, 3, 8, 7), {"kernel_size": 2}),
    ((2, 2, 9, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((1, 2, 7, 9), {"kernel_size": (2, 3), "stride": (2, 1), "ceil_mode": True}),
    ((1, 2, 9, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True}),
    ((3, 7, 8), {"kernel_size": 3, "stride": 2}),  # unbatched 2-d
]


@pytest.mark.parametrize(("shape", "kw"), MAX_CASES)
def test_max_pool2d(device, shape, kw) -> None:
    check(device, lambda x: F.max_pool2d(x, **kw), lambda x: tf.max_pool2d(x, **kw), [_x(*shape)])
    check(device, nn.MaxPool2d(**kw), torch.nn.MaxPool2d(**kw), [_x(*shape)], what="layer")


AVG_CASES = [
    ((2, 3, 8, 6), {"kernel_size": 2}),
    ((2, 2, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 2, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ((1, 2, 8, 7), {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True}),
    ((1, 2, 8, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    ((1, 2, 6, 6), {"kernel_size": 3, "divisor_override": 4}),
]


@pytest.mark.parametrize(("shape", "kw"), AVG_CASES)
def test_avg_pool2d(device, shape, kw) -> None:
    check(device, lambda x: F.avg_pool2d(x, **kw), lambda x: tf.avg_pool2d(x, **kw), [_x(*shape)])
    check(device, nn.AvgPool2d(**kw), torch.nn.AvgPool2d(**kw), [_x(*shape)], what="layer")


@pytest.mark.parametrize(("shape", "kw"), [
    ((2, 3, 11), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((3, 10), {"kernel_size": 4, "ceil_mode": True}),
    ((2, 2, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
])
def test_pool1d(device, shape, kw) -> None:
    check(device, nn.MaxPool1d(**kw), torch.nn.MaxPool1d(**kw), [_x(*shape)], what="max")
    avg = dict(kw, count_include_pad=False)
    check(device, nn.AvgPool1d(**avg), torch.nn.AvgPool1d(**avg), [_x(*shape)], what="avg")


@pytest.mark.parametrize(("shape", "kw"), [
    ((2, 3, 6, 7), {"kernel_size": 2}),
    ((1, 2, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 1, 9, 8), {"kernel_size": (3, 2), "stride": (2, 3), "dilation": (2, 1), "ceil_mode": True}),
    ((3, 5, 5), {"kernel_size": 2, "stride": 1}),
])
def test_max_pool2d_return_indices(device, shape, kw) -> None:
    """The indices equal torch's (flattened h * W + w of the input), and the values still carry the gradient.
    Integer-valued input with ties, so the first-maximum rule is tested too (torch's CPU kernel keeps the
    first strict maximum)."""
    x = np.random.default_rng(5).integers(-3, 4, shape).astype(np.float32)
    ours, idx = F.max_pool2d(nn.Tensor(x, device=device), return_indices=True, **kw)
    theirs, tidx = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    assert idx.dtype.name == "int64"
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    mod, tmod = nn.MaxPool2d(return_indices=True, **kw), torch.nn.MaxPool2d(return_indices=True, **kw)
    np.testing.assert_array_equal(mod(nn.Tensor(x, device=device))[1].numpy(), tmod(torch.tensor(x))[1].numpy())


def test_max_pool1d_return_indices() -> None:
    x = np.random.default_rng(6).standard_normal((2, 3, 10)).astype(np.float32)
    _, idx = F.max_pool1d(nn.Tensor(x), 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(idx.numpy(), torch.nn.functional.max_pool1d(torch.tensor(x), 3, 2, 1,
                                                                              return_indices=True)[1].numpy())


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize(("cls", "tcls", "shape", "kw"), [
    (nn.Conv1d, torch.nn.Conv1d, (2, 3, 9), {"kernel_size": 3, "padding": 2}),
    (nn.Conv2d, torch.nn.Conv2d, (2, 3, 6, 7), {"kernel_size": 3, "padding": (1, 2), "stride": 2}),
    (nn.Conv2d, torch.nn.Conv2d, (3, 5, 6), {"kernel_size": (3, 4), "padding": "same"}),  # unbatched
])
def test_conv_padding_modes(device, mode, cls, tcls, shape, kw) -> None:
    """torch's padding modes: the input padded by the mode, then convolved without padding."""
    torch.manual_seed(7)
    cin = shape[-cls.nd - 1]
    theirs = tcls(cin, 4, padding_mode=mode, **kw)
    ours = cls(cin, 4, padding_mode=mode, device=device, **kw)
    params = copy_params(ours, theirs)
    check(device, ours, theirs, [_x(*shape)], params, what=mode)


def test_conv_padding_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="padding_mode must be"):
        nn.Conv2d(3, 8, 3, padding=1, padding_mode="mirror")


@pytest.mark.parametrize(("cls", "tcls", "shape", "kw"), [
    (nn.Conv1d, torch.nn.Conv1d, (2, 4, 11), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}),
    (nn.Conv1d, torch.nn.Conv1d, (4, 9), {"kernel_size": 4, "padding": "same", "groups": 2}),
    (nn.Conv2d, torch.nn.Conv2d, (4, 6, 5), {"kernel_size": (3, 2), "padding": (1, 0)}),
    (nn.Conv3d, torch.nn.Conv3d, (2, 4, 5, 4, 6), {"kernel_size": (2, 3, 3), "stride": (1, 2, 1), "padding": 1}),
])
def test_conv_layers(device, cls, tcls, shape, kw) -> None:
    cin = shape[0] if len(shape) == {nn.Conv1d: 2, nn.Conv2d: 3, nn.Conv3d: 4}[cls] else shape[1]
    ours, theirs = cls(cin, 6, device=device, **kw), tcls(cin, 6, **kw)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    check(device, ours, theirs, [x], copy_params(ours, theirs))


def test_conv_of_a_padded_constant_counts_the_padding(device) -> None:
    w = nn.Tensor(np.ones((1, 1, 3, 3), np.float32), device=device)
    out = nn.Tensor.ones(1, 1, 4, 4, device=device).conv2d(w, padding=1).numpy()[0, 0]
    np.testing.assert_array_equal(out, [[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]])
