"""sin and cos are their own ops (docs/dtypes.md): cos of a large argument is reduced by the device's math
library, not rewritten as sin(pi/2 - x), whose rounding of pi/2 - x loses the argument's low bits."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.frontend.tensor import Tensor

_X = np.array([0.0, -0.0, 0.5, -3.0, 1.5707964, 100.25, 12345.678, -98765.43, 1e10, 3e38], np.float32)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.float64) - b.astype(np.float64)) / np.spacing(np.abs(b).astype(np.float32))


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_trig_of_large_arguments_stays_within_a_few_ulps(device, fn) -> None:
    got = getattr(Tensor(_X, device=device), fn)().numpy()
    want = getattr(np, fn)(_X.astype(np.float64)).astype(np.float32)
    assert _ulps(got, want).max() <= 4, (got, want)


def test_trig_of_non_finite_is_nan(device) -> None:
    x = np.array([np.inf, -np.inf, np.nan], np.float32)
    assert np.isnan(Tensor(x, device=device).cos().numpy()).all()
    assert np.isnan(Tensor(x, device=device).sin().numpy()).all()


def test_trig_gradients_are_the_other_function() -> None:
    x = _X[:8]
    t = Tensor(x).requires_grad_()
    (t.sin() + t.cos()).sum().backward()
    assert t.grad is not None
    want = (np.cos(x.astype(np.float64)) - np.sin(x.astype(np.float64))).astype(np.float32)
    assert _ulps(t.grad.numpy(), want).max() <= 8
