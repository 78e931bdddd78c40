"""nn.functional.interpolate (tolk_core/nn/resample.py) against torch's F.interpolate: every mode, sizes and
scale factors, up and down, align_corners both ways; and the weight matrices' own invariants."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.errors import ArgumentError
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import functional as F
from tolk_core.nn.resample import axis_weights

torch = pytest.importorskip("torch", reason="the interpolate comparison needs torch (installed by make test)")

CASES = [  # (input shape, mode, size, scale_factor, align_corners)
    ((1, 2, 5), "nearest", 8, None, None), ((2, 1, 9), "nearest", 4, None, None),
    ((1, 2, 4, 6), "nearest", None, 2.0, None), ((1, 1, 7, 5), "nearest", (3, 11), None, None),
    ((1, 2, 5), "linear", 9, None, False), ((1, 2, 9), "linear", 4, None, True),
    ((1, 3, 4, 6), "bilinear", (7, 3), None, False), ((1, 3, 4, 6), "bilinear", (7, 3), None, True),
    ((2, 1, 5, 5), "bilinear", None, 1.5, False), ((1, 1, 6, 4), "bicubic", (9, 5), None, False),
    ((1, 2, 6, 4), "bicubic", (3, 7), None, True), ((1, 1, 3, 4, 5), "trilinear", (5, 2, 7), None, False),
    ((1, 1, 3, 4, 5), "trilinear", None, 2.0, True), ((1, 1, 3, 4, 5), "nearest", (6, 2, 5), None, None),
]


@pytest.mark.parametrize("shape,mode,size,scale,align", CASES)
def test_interpolate_matches_torch(shape, mode, size, scale, align):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, scale_factor=scale, mode=mode,
                                           align_corners=align).numpy()
    got = F.interpolate(Tensor(x), size=size, scale_factor=scale, mode=mode, align_corners=align).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_nearest_keeps_inf_and_nan_in_place():
    x = np.array([[[1.0, np.inf, np.nan, -np.inf]]], np.float32)
    got = F.interpolate(Tensor(x), size=8).numpy()
    np.testing.assert_array_equal(got, np.repeat(x, 2, axis=-1))  # assert_array_equal treats NaN as equal


def test_weight_rows_sum_to_one():
    for mode, coord in (("linear", "half_pixel"), ("cubic", "align_corners"), ("nearest", "asymmetric")):
        w, outside = axis_weights(7, 12, 12 / 7, mode, coord)
        np.testing.assert_allclose(w.sum(axis=1), np.ones(12), rtol=1e-12)
        assert not outside.any()


def test_bad_arguments_are_named():
    x = Tensor.zeros(1, 1, 4)
    with pytest.raises(ArgumentError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ArgumentError, match="'bilinear' needs a 4-d input"):
        F.interpolate(x, size=3, mode="bilinear")
    with pytest.raises(ArgumentError, match="align_corners only applies"):
        F.interpolate(x, size=3, align_corners=True)
