"""Normalisation layers against torch 2.13's: BatchNorm1d/2d in training (batch statistics, running-statistic
updates with unbiased variance, momentum and the cumulative average of momentum=None) and eval (running
statistics), without affine parameters or running statistics; GroupNorm, RMSNorm, LayerNorm without bias.
Values and gradients of the input and parameters; tolerances as tests/nn/torch_check.py."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tests.nn.torch_check import check, copy_params
from tolk_core import nn
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import optim

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")


def _bn_pair(dim: int, c: int, device: str, **kw):
    ours = (nn.BatchNorm1d if dim == 1 else nn.BatchNorm2d)(c, device=device, **kw)
    theirs = (torch.nn.BatchNorm1d if dim == 1 else torch.nn.BatchNorm2d)(c, **kw)
    if kw.get("affine", True):
        with torch.no_grad():  # non-trivial affine parameters
            theirs.weight.copy_(torch.linspace(0.5, 1.5, c))
            theirs.bias.copy_(torch.linspace(-0.2, 0.3, c))
    return ours, theirs, copy_params(ours, theirs)


@pytest.mark.parametrize(("shape", "kw"), [
    ((6, 4, 5, 3), {}),
    ((8, 3), {"momentum": None}),
    ((5, 3, 7), {"momentum": 0.3, "affine": False}),
    ((4, 2, 3, 3), {"track_running_stats": False}),
])
def test_batchnorm_train_then_eval(device, shape, kw) -> None:
    rng = np.random.default_rng(0)
    ours, theirs, params = _bn_pair(2 if len(shape) == 4 else 1, shape[1], device, **kw)
    for step in range(3):  # three training batches: outputs, gradients, then the running statistics
        x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
        for p in ours.parameters():
            p.grad = None
        theirs.zero_grad()
        check(device, ours, theirs, [x], params, what=f"train step {step}")
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            t = theirs.state_dict().get(name)
            if t is None:
                assert getattr(ours, name) is None
                continue
            np.testing.assert_allclose(getattr(ours, name).numpy(), t.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    ours.eval()
    theirs.eval()
    x = rng.standard_normal(shape).astype(np.float32)
    check(device, ours, theirs, [x], params, what="eval")


def test_batchnorm_state_dict_names_and_dtypes(device) -> None:
    sd = nn.BatchNorm2d(3, device=device).state_dict()
    tsd = torch.nn.BatchNorm2d(3).state_dict()
    assert list(sd) == list(tsd)
    assert sd["num_batches_tracked"].shape == () and sd["num_batches_tracked"].dtype.name == "int64"
    assert [p is sd[k] for k, p in zip(("weight", "bias"), nn.BatchNorm2d(3).parameters(), strict=False)]
    assert len(nn.BatchNorm2d(3, device=device).parameters()) == 2  # the running statistics are buffers


def test_batchnorm_train_step_under_jit(device) -> None:
    """A jitted train step (forward with running-statistic updates, backward, SGD) matches the eager one."""
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((8, 3, 4, 4)).astype(np.float32) for _ in range(4)]
    runs = []
    for use_jit in (False, True):
        nn.manual_seed(0)
        conv, bn = nn.Conv2d(3, 4, 3, padding=1, device=device), nn.BatchNorm2d(4, device=device)
        opt = optim.SGD(conv.parameters() + bn.parameters(), lr=0.1)

        def step(x: Tensor, conv=conv, bn=bn, opt=opt) -> Tensor:
            opt.zero_grad()
            loss = bn(conv(x)).relu().mean()
            loss.backward()
            opt.step(loss)
            return loss
        fn = tolk_core.jit(step) if use_jit else step
        losses = [fn(Tensor(x, device=device)).item() for x in xs]
        runs.append((losses, bn.running_mean.numpy(), bn.running_var.numpy(), bn.num_batches_tracked.item(),
                     conv.weight.numpy()))
    (l0, m0, v0, n0, w0), (l1, m1, v1, n1, w1) = runs
    assert n0 == n1 == len(xs)
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-6)
    for a, b in ((m0, m1), (v0, v1), (w0, w1)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert not np.allclose(m1, 0)  # the running mean moved on every replay


@pytest.mark.parametrize(("shape", "groups", "affine"), [((3, 6, 4, 5), 3, True), ((2, 4, 7), 1, False)])
def test_group_norm(device, shape, groups, affine) -> None:
    ours, theirs = nn.GroupNorm(groups, shape[1], affine=affine, device=device), torch.nn.GroupNorm(groups, shape[1],
                                                                                                    affine=affine)
    if affine:
        with torch.no_grad():
            theirs.weight.copy_(torch.linspace(0.5, 1.5, shape[1]))
            theirs.bias.copy_(torch.linspace(-1, 1, shape[1]))
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    check(device, ours, theirs, [x], copy_params(ours, theirs))


@pytest.mark.parametrize(("shape", "norm", "eps"), [((3, 5, 8), 8, None), ((4, 3, 6), (3, 6), 1e-3)])
def test_rms_norm(device, shape, norm, eps) -> None:
    ours, theirs = nn.RMSNorm(norm, eps=eps, device=device), torch.nn.RMSNorm(norm, eps=eps)
    with torch.no_grad():
        theirs.weight.copy_(torch.linspace(0.5, 1.5, theirs.weight.numel()).reshape(theirs.weight.shape))
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    check(device, ours, theirs, [x], copy_params(ours, theirs))


def test_layer_norm_without_bias(device) -> None:
    ours, theirs = nn.LayerNorm(6, bias=False, device=device), torch.nn.LayerNorm(6, bias=False)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    x = np.random.default_rng(4).standard_normal((2, 3, 6)).astype(np.float32)
    check(device, ours, theirs, [x], copy_params(ours, theirs))
