"""Convolutions of small images with deep reductions go through their stored windows (frontend/nn_ops.py
`_column_conv`, im2col: each output position's C_in/groups x kernel values contiguous, then a matmul with the
weight's rows). Values, input and weight gradients against torch 2.13 at shapes that take that path (at most 64
output positions, at least 2048 values per sum), with groups, dilation, padding, odd sizes and 1-d/3-d; the path
is checked to be taken (a spy on `_column_conv`) and not taken past its bounds, and an inf or NaN reaches exactly
torch's outputs."""
from __future__ import annotations

import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core import Tensor
from tolk_core.frontend import nn_ops
from tolk_core.nn import F

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")
tf = torch.nn.functional


def _rand(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


CASES = [  # (x shape, weight shape, kwargs): every one at most 64 output positions, 2048+ values per sum
    ((1, 256, 7, 7), (24, 256, 3, 3), {"padding": 1}),                 # resnet50's last stage, fewer outputs
    ((2, 230, 5, 6), (19, 230, 3, 3), {"padding": 1}),                 # odd sizes: no whole vectors or tiles
    ((2, 480, 8, 8), (10, 240, 3, 3), {"padding": 1, "groups": 2}),    # groups: 240 x 9 = 2160 per sum
    ((1, 300, 8, 8), (7, 300, 3, 3), {"padding": 2, "dilation": 2}),   # dilation
    ((1, 260, 6, 7), (5, 260, 3, 3), {"padding": (1, 0)}),             # padding on one axis only
    ((2, 2048, 4, 4), (9, 2048, 1, 1), {}),                            # 1x1: a plain product of the columns
]


def test_the_cases_take_the_windows_path_and_larger_images_do_not(monkeypatch) -> None:
    taken: list[tuple[int, ...]] = []
    original = nn_ops._column_conv

    def spy(win, weight, groups):
        taken.append(tuple(weight.shape))
        return original(win, weight, groups)
    monkeypatch.setattr(nn_ops, "_column_conv", spy)
    for xs, ws, kw in CASES:
        Tensor(_rand(*xs)).conv2d(Tensor(_rand(*ws, seed=1)), **kw)
    assert taken == [ws for _, ws, _ in CASES]
    Tensor(_rand(1, 256, 14, 14)).conv2d(Tensor(_rand(8, 256, 3, 3)), padding=1)  # 196 positions
    Tensor(_rand(1, 128, 7, 7)).conv2d(Tensor(_rand(8, 128, 3, 3)), padding=1)  # 1152 values per sum
    Tensor(_rand(1, 256, 14, 14)).conv2d(Tensor(_rand(8, 256, 3, 3)), padding=1, stride=2)  # strided: phases
    assert len(taken) == len(CASES)


@pytest.mark.parametrize("xs,ws,kw", CASES, ids=[f"{x}-{w}-{k}" for x, w, k in CASES])
def test_conv2d_by_columns_matches_torch_with_both_gradients(xs, ws, kw) -> None:
    # float32 sums of 2048-2700 terms of products of normal values scaled by 1/sqrt(depth)
    depth = ws[1] * ws[2] * ws[3]
    check("CPU", lambda x, w: x.conv2d(w, **kw), lambda x, w: tf.conv2d(x, w, **kw),
          [_rand(*xs), _rand(*ws, seed=1, scale=depth ** -0.5)], rtol=1e-3, atol=1e-3, what=f"conv2d {xs} {ws} {kw}")


def test_conv1d_and_conv3d_by_columns_match_torch() -> None:
    check("CPU", lambda x, w: F.conv1d(x, w, padding=1), lambda x, w: tf.conv1d(x, w, padding=1),
          [_rand(2, 700, 30), _rand(6, 700, 3, seed=1, scale=0.02)], rtol=1e-3, atol=1e-3, what="conv1d")
    check("CPU", lambda x, w: F.conv3d(x, w, padding=1), lambda x, w: tf.conv3d(x, w, padding=1),
          [_rand(1, 80, 4, 4, 4), _rand(3, 80, 3, 3, 3, seed=1, scale=0.02)], rtol=1e-3, atol=1e-3, what="conv3d")


def test_inf_and_nan_reach_torch_s_outputs() -> None:
    x, w = _rand(1, 256, 7, 7), _rand(4, 256, 3, 3, seed=1, scale=0.05)
    x[0, 3, 0, 0], x[0, 100, 4, 5], x[0, 200, 6, 2] = np.inf, -np.inf, np.nan
    got = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
    ref = tf.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    assert np.isfinite(ref).any() and not np.isfinite(ref).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-3, atol=1e-3)
