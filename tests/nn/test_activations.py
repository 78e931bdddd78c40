"""Activations (Tensor methods, nn.functional forms, nn modules) against torch: values and gradients in float32
on CPU and OPENCL, float64 values, NaN and infinities, the numerically delicate ranges (softplus of large and
very negative x, elu near 0), and PReLU's learnable weight."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core import Tensor, nn
from tolk_core.nn import functional as F

# (our function, torch's) with non-default arguments where the function takes them
_CASES = {
    "elu": (lambda t: F.elu(t, 0.7), lambda t, tF: tF.elu(t, 0.7)),
    "selu": (F.selu, lambda t, tF: tF.selu(t)),
    "celu": (lambda t: F.celu(t, 1.3), lambda t, tF: tF.celu(t, 1.3)),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), lambda t, tF: tF.leaky_relu(t, 0.2)),
    "hardsigmoid": (F.hardsigmoid, lambda t, tF: tF.hardsigmoid(t)),
    "hardswish": (F.hardswish, lambda t, tF: tF.hardswish(t)),
    "hardtanh": (lambda t: F.hardtanh(t, -0.5, 2.0), lambda t, tF: tF.hardtanh(t, -0.5, 2.0)),
    "relu": (F.relu, lambda t, tF: tF.relu(t)),
    "relu6": (F.relu6, lambda t, tF: tF.relu6(t)),
    "softplus": (lambda t: F.softplus(t, 2.0, 10.0), lambda t, tF: tF.softplus(t, 2.0, 10.0)),
    "softsign": (F.softsign, lambda t, tF: tF.softsign(t)),
    "mish": (F.mish, lambda t, tF: tF.mish(t)),
}
# ordinary values, the kinks (+-3, 0, 6, the hardtanh ends), large magnitudes
_X = np.float32([-200.0, -30.0, -4.0, -3.0, -2.9, -1.0, -0.5, -1e-4, 0.0, 1e-6, 0.3, 1.0, 2.0, 2.9, 3.0, 5.0,
                 6.0, 7.0, 25.0, 100.0])


@pytest.mark.parametrize("name", sorted(_CASES))
def test_activation_and_gradient_match_torch(device, name):
    import torch.nn.functional as tF
    ours, theirs = _CASES[name]
    check(device, ours, lambda t: theirs(t, tF), [_X], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(_CASES))
def test_activation_in_float64_and_non_finite(device, name):
    """float64 values within 1e-14 relative; NaN stays NaN; +-inf give torch's value."""
    import torch
    import torch.nn.functional as tF
    ours, theirs = _CASES[name]
    x = np.concatenate([_X.astype(np.float64), [math.nan, math.inf, -math.inf, -1e-300, 1e300]])
    got = ours(Tensor(x, device=device)).numpy()
    want = theirs(torch.tensor(x), tF).numpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)


def test_relu_gradient_at_zero_and_nan_is_torchs(device):
    """relu's gradient is 0 at +-0 (max's tie rule would give 1/2) and passes at NaN, as torch's does; the values
    keep -0.0 and NaN."""
    import torch
    x = np.float32([-np.inf, -1.0, -0.0, 0.0, 1e-30, np.inf, np.nan])
    scale = np.arange(1, len(x) + 1, dtype=np.float32)
    t = Tensor(x, device=device).requires_grad_()
    y = t.relu()
    (y * Tensor(scale, device=device)).sum().backward()
    tt = torch.tensor(x, requires_grad=True)
    ty = tt.relu()
    (ty * torch.tensor(scale)).sum().backward()
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(np.signbit(y.numpy()), np.signbit(ty.detach().numpy()))
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())  # [0, 0, 0, 0, 5, 6, 7]


def test_tensor_methods_are_the_functional_forms(device):
    t = Tensor(_X, device=device)
    for name in _CASES:
        np.testing.assert_array_equal(getattr(t, name)().numpy(), getattr(F, name)(t).numpy(), err_msg=name)


def test_softplus_and_elu_keep_their_tails(device):
    """softplus of very negative x is e^x (not 0, not log(1 + 0)); of large x, x; elu(x) near 0 is x, not a
    difference of two numbers near 1."""
    x = np.float32([-80.0, -20.0, 1e-7, 1e-30, 1000.0, 3e38])
    sp = Tensor(x, device=device).softplus().numpy()
    np.testing.assert_allclose(sp[:2], np.exp(x[:2].astype(np.float64)), rtol=3e-7)
    np.testing.assert_allclose(sp[2:4], np.log1p(np.exp(x[2:4].astype(np.float64))), rtol=3e-7)
    np.testing.assert_array_equal(sp[4:], x[4:])
    neg = np.float32([-1e-7, -1e-30, -3e-4])
    np.testing.assert_allclose(Tensor(neg, device=device).elu().numpy(), np.expm1(neg.astype(np.float64)), rtol=3e-7)


def test_integer_inputs(device):
    """Integer tensors compute in the default float, except hardtanh/relu6 with integer bounds, which clip in
    the integer dtype as torch does."""
    import torch
    import torch.nn.functional as tF
    x = np.array([-5, -1, 0, 2, 9], np.int32)
    assert Tensor(x, device=device).elu().numpy().dtype == np.float32
    np.testing.assert_allclose(Tensor(x, device=device).softplus().numpy(), tF.softplus(torch.tensor(x).float()))
    r6 = Tensor(x, device=device).relu6().numpy()
    assert r6.dtype == np.int32
    np.testing.assert_array_equal(r6, tF.relu6(torch.tensor(x)).numpy())


@pytest.mark.parametrize("channels", [1, 3])
def test_prelu_gradients_of_input_and_weight(device, channels):
    import torch
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = np.float32([0.25, -0.1, 0.5][:channels])
    check(device, lambda a, b: a.prelu(b), lambda a, b: torch.nn.functional.prelu(a, b), [x, w])


def test_prelu_weight_shape_is_checked(device):
    from tolk_core.errors import ShapeError
    with pytest.raises(ShapeError, match="one per channel"):
        Tensor(np.zeros((2, 3), np.float32), device=device).prelu(Tensor(np.zeros(4, np.float32), device=device))


def test_modules_match_torch(device):
    import torch
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32) * 4
    pairs = [(nn.ELU(0.5), torch.nn.ELU(0.5)), (nn.SELU(), torch.nn.SELU()), (nn.CELU(2.0), torch.nn.CELU(2.0)),
             (nn.LeakyReLU(0.3), torch.nn.LeakyReLU(0.3)), (nn.Hardsigmoid(), torch.nn.Hardsigmoid()),
             (nn.Hardswish(), torch.nn.Hardswish()), (nn.Hardtanh(-2.0, 1.5), torch.nn.Hardtanh(-2.0, 1.5)),
             (nn.ReLU6(), torch.nn.ReLU6()), (nn.Softplus(0.5, 5.0), torch.nn.Softplus(0.5, 5.0)),
             (nn.Softsign(), torch.nn.Softsign()), (nn.Mish(), torch.nn.Mish())]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                                   rtol=2e-6, atol=1e-7, err_msg=type(ours).__name__)
    p, tp = nn.PReLU(3, init=0.1, device=device), torch.nn.PReLU(3, init=0.1)
    assert [t.shape for t in p.parameters()] == [(3,)]
    check(device, lambda a: p(a), lambda a: tp(a), [x], params=[(p.weight, tp.weight)])
