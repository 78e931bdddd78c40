"""The convolution plans of docs/training.md ("Convolution gradients") against torch 2.13's F.conv1d/2d/3d:
a padded input read through the PAD on CPU (codegen/borders.py; stored first on GPU-style
devices), the input gradient as a convolution of the output gradient with
the flipped, transposed weight, the weight gradient as a channels-innermost matmul. Values, input gradients and
weight gradients (tests/nn/torch_check.py), at sizes that fill no vector block (odd spatial sizes, channel
counts that are not multiples of the 16-float lanes) and with stride, groups, dilation and asymmetric padding
(a strided convolution is a sum of stride-1 convolutions of its input's phases: frontend/strided_conv.py)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core import Tensor
from tolk_core.frontend import autograd
from tolk_core.nn import F

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")
tf = torch.nn.functional


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CASES2D = [  # (x shape, weight shape, kwargs)
    ((2, 16, 32, 32), (16, 16, 3, 3), {"padding": 1}),                      # the ResNet block's layer, whole blocks
    ((2, 3, 9, 7), (5, 3, 3, 3), {"padding": 1}),                           # odd sizes and channel counts
    ((3, 1, 8, 8), (16, 1, 3, 3), {"padding": 1}),                          # the CNN's first layer
    ((2, 4, 11, 13), (6, 4, 3, 3), {"padding": 1, "stride": 2}),            # stride 2: by phases, 4 of them
    ((1, 3, 23, 21), (8, 3, 7, 7), {"padding": 3, "stride": 2}),            # the stem: 7x7 stride 2
    ((2, 5, 14, 11), (4, 5, 3, 3), {"padding": 1, "stride": 3}),            # stride 3: a phase per tap row
    ((2, 3, 12, 10), (4, 3, 3, 5), {"padding": (2, 1), "stride": (2, 1)}),  # one axis strided
    ((2, 3, 13, 13), (4, 3, 2, 2), {"stride": 3}),                          # kernel < stride: phase 2 empty
    ((2, 6, 9, 10), (4, 3, 3, 3), {"padding": 1, "stride": 2, "groups": 2}),
    ((2, 4, 9, 9), (6, 4, 1, 1), {"stride": 2}),                            # 1x1 stride 2: one phase
    ((2, 6, 10, 9), (4, 3, 3, 3), {"padding": 1, "groups": 2}),
    ((1, 4, 12, 17), (8, 1, 3, 3), {"padding": 1, "groups": 4}),            # depthwise x2
    ((2, 3, 13, 12), (4, 3, 3, 3), {"padding": 2, "dilation": 2}),
    ((2, 3, 9, 10), (4, 3, 5, 3), {"padding": (2, 1)}),                      # a non-square kernel
    ((2, 3, 8, 9), (5, 3, 3, 3), {"padding": 0}),                           # no padding: no stored pad
    ((1, 2, 7, 7), (3, 2, 2, 2), {"padding": 3}),                           # padding beyond the kernel's reach
    ((2, 16, 4, 4), (32, 16, 3, 3), {"padding": 1}),                        # the CNN's 4x4 layer: 4-float rows
    ((2, 3, 6, 12), (5, 3, 3, 3), {"padding": 1}),                          # 12-wide rows: 4-float vectors
    ((1, 5, 10, 24), (3, 5, 3, 3), {"padding": 1}),                         # 24-wide rows: 8-float vectors
]


@pytest.mark.parametrize("xs,ws,kw", CASES2D, ids=[f"{x}-{w}-{k}" for x, w, k in CASES2D])
def test_conv2d_values_and_both_gradients_match_torch(xs, ws, kw) -> None:
    # float32 sums of up to 16*9 (forward), 16*9 (input gradient) or 2*32*32 (weight gradient) terms
    check("CPU", lambda x, w: x.conv2d(w, **kw), lambda x, w: tf.conv2d(x, w, **kw),
          [_rand(*xs), _rand(*ws, seed=1)], rtol=2e-4, atol=2e-4, what=f"conv2d {xs} {ws} {kw}")


def test_conv2d_with_bias_and_asymmetric_padding_matches_torch() -> None:
    # (left, right, top, bottom) flat pairs, torch's F.pad order; torch pads its input explicitly for the same
    check("CPU", lambda x, w, b: x.conv2d(w, b, padding=(1, 2, 0, 1)),
          lambda x, w, b: tf.conv2d(tf.pad(x, (1, 2, 0, 1)), w, b),
          [_rand(2, 3, 7, 9), _rand(4, 3, 3, 3, seed=1), _rand(4, seed=2)], rtol=2e-4, atol=2e-4)


def test_a_strided_conv2d_reads_inf_and_nan_only_through_its_own_taps() -> None:
    # the phase split multiplies the original taps only: an inf read by no tap of an output leaves it a number
    # (a kernel padded with zero taps would make 0 x inf = NaN there); one read by a tap gives torch's inf/NaN
    x, w = _rand(1, 2, 9, 9), _rand(3, 2, 3, 3, seed=1)
    x[0, 0, 1, 1], x[0, 1, 4, 6], x[0, 1, 7, 2] = np.inf, -np.inf, np.nan
    got = Tensor(x).conv2d(Tensor(w), stride=2, padding=1).numpy()
    ref = tf.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1).numpy()
    assert np.isfinite(ref).any() and not np.isfinite(ref).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)


def test_strided_conv1d_and_conv3d_match_torch() -> None:
    check("CPU", lambda x, w: F.conv1d(x, w, stride=2, padding=2), lambda x, w: tf.conv1d(x, w, stride=2, padding=2),
          [_rand(2, 3, 19), _rand(5, 3, 5, seed=1)], rtol=2e-4, atol=2e-4, what="conv1d stride 2")
    check("CPU", lambda x, w: F.conv3d(x, w, stride=(1, 2, 2), padding=1),
          lambda x, w: tf.conv3d(x, w, stride=(1, 2, 2), padding=1),
          [_rand(1, 2, 5, 7, 6), _rand(3, 2, 3, 3, 3, seed=1)], rtol=2e-4, atol=2e-4, what="conv3d stride (1,2,2)")


def test_conv1d_and_conv3d_match_torch() -> None:
    check("CPU", lambda x, w: F.conv1d(x, w, padding=1), lambda x, w: tf.conv1d(x, w, padding=1),
          [_rand(2, 3, 19), _rand(5, 3, 3, seed=1)], rtol=2e-4, atol=2e-4, what="conv1d")
    check("CPU", lambda x, w: F.conv3d(x, w, padding=1, dilation=(1, 2, 1)),
          lambda x, w: tf.conv3d(x, w, padding=1, dilation=(1, 2, 1)),
          [_rand(1, 2, 5, 7, 6), _rand(3, 2, 3, 3, 3, seed=1)], rtol=2e-4, atol=2e-4, what="conv3d")


def test_conv2d_gradients_through_a_fused_producer_match_torch() -> None:
    # the ResNet block's shape of graph: the conv's input is relu(x * s + t), which the stored pad computes, and
    # its output gradient comes through a second conv (the gradient convolution of a gradient convolution)
    def ours(x, w1, w2):
        return (x * 0.5 + 0.1).relu().conv2d(w1, padding=1).relu().conv2d(w2, padding=1)

    def theirs(x, w1, w2):
        return tf.conv2d(tf.relu(tf.conv2d(tf.relu(x * 0.5 + 0.1), w1, padding=1)), w2, padding=1)
    check("CPU", ours, theirs, [_rand(2, 4, 9, 16), _rand(4, 4, 3, 3, seed=1), _rand(5, 4, 3, 3, seed=2)],
          rtol=3e-4, atol=3e-4)


def test_second_order_gradient_of_conv2d_matches_torch() -> None:
    # d/dx of sum((d/dw sum(conv(x, w) * g))^2): the weight gradient's own graph is differentiated
    x, w, g = _rand(1, 2, 6, 5), _rand(3, 2, 3, 3, seed=1), _rand(1, 3, 6, 5, seed=2)
    tx, tw = Tensor(x).requires_grad_(), Tensor(w).requires_grad_()
    gw = autograd.gradient((tx.conv2d(tw, padding=1) * Tensor(g)).sum().uop, Tensor(1.0).uop, {tw.uop})[tw.uop]
    (Tensor(gw, tx.device) ** 2).sum().backward()
    px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (pgw,) = torch.autograd.grad((tf.conv2d(px, pw, padding=1) * torch.tensor(g)).sum(), pw, create_graph=True)
    (pgw ** 2).sum().backward()
    assert tx.grad is not None
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_define_gradient_replaces_the_rules_for_that_node_only() -> None:
    # a node given its own gradient gets it; the same value built as another node keeps the rules' gradient
    x = Tensor(np.array([1.0, 2.0, 3.0], np.float32)).requires_grad_()
    doubled = x * 2.0
    autograd.define_gradient(doubled.uop, lambda g: [(x.uop, (Tensor(g, x.device) * 10.0).uop)])
    doubled.sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0, 10.0])
    x.grad = None
    (x * 3.0).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0, 3.0])
