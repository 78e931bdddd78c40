"""instance_norm and InstanceNorm1d/2d against torch: outputs, gradients (input, weight, bias), running
statistics updated in training and used in eval, unbatched inputs, and the named errors."""
from __future__ import annotations

import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core import Tensor, nn
from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.nn import functional as F


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 4)])
def test_functional_with_affine_matches_torch(device, shape):
    import torch
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    check(device, lambda a, ww, bb: F.instance_norm(a, weight=ww, bias=bb),
          lambda a, ww, bb: torch.nn.functional.instance_norm(a, weight=ww, bias=bb), [x, w, b])


def test_functional_running_statistics_and_use_input_stats(device):
    import torch
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 3, 6)) * 2 + 5).astype(np.float32)
    rm, rv = Tensor(np.zeros(3, np.float32), device=device), Tensor(np.ones(3, np.float32), device=device)
    trm, trv = torch.zeros(3), torch.ones(3)
    y = F.instance_norm(Tensor(x, device=device), rm, rv, momentum=0.3).numpy()
    ty = torch.nn.functional.instance_norm(torch.tensor(x), trm, trv, momentum=0.3)
    np.testing.assert_allclose(y, ty.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rm.numpy(), trm.numpy(), rtol=1e-5)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=1e-5)
    y2 = F.instance_norm(Tensor(x, device=device), rm, rv, use_input_stats=False).numpy()
    ty2 = torch.nn.functional.instance_norm(torch.tensor(x), trm, trv, use_input_stats=False)
    np.testing.assert_allclose(y2, ty2.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ArgumentError, match="running_mean and running_var"):
        F.instance_norm(Tensor(x, device=device), use_input_stats=False)
    with pytest.raises(ShapeError, match="spatial"):
        F.instance_norm(Tensor(x[:, :, 0], device=device))


@pytest.mark.parametrize("cls", ["InstanceNorm1d", "InstanceNorm2d"])
def test_modules_train_and_eval_as_torch(device, cls):
    import torch
    rng = np.random.default_rng(2)
    shape = (2, 3, 7) if cls == "InstanceNorm1d" else (2, 3, 4, 5)
    ours = getattr(nn, cls)(3, momentum=0.2, affine=True, track_running_stats=True, device=device)
    theirs = getattr(torch.nn, cls)(3, momentum=0.2, affine=True, track_running_stats=True)
    for _ in range(2):
        x = (rng.standard_normal(shape) * 2 - 1).astype(np.float32)
        np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5, atol=1e-6)
    ours.eval()
    theirs.eval()
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    # unbatched input: one sample
    np.testing.assert_allclose(ours(Tensor(x[0], device=device)).numpy(),
                               theirs(torch.tensor(x[0])).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_module_defaults_have_no_parameters_and_check_shapes(device):
    import torch
    m = nn.InstanceNorm2d(3, device=device)
    assert m.parameters() == [] and m.running_mean is None
    x = np.random.default_rng(3).standard_normal((1, 3, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(m(Tensor(x, device=device)).numpy(), torch.nn.InstanceNorm2d(3)(torch.tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match="3 channels"):
        m(Tensor(np.zeros((1, 4, 3, 3), np.float32), device=device))
