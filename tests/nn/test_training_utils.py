"""Gradient clipping and learning-rate schedules against torch 2.13's: clip_grad_norm_ (2-norm, 1-norm, inf;
the returned total and the clipped gradients), clip_grad_value_; StepLR, LinearLR, CosineAnnealingLR and
linear warm-up then cosine (SequentialLR) giving torch's rate at every epoch; and a schedule changing the rate
of a jitted SGD step between replays (the parameters follow the hand-computed updates)."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import optim, schedule, utils

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")


@pytest.mark.parametrize(("max_norm", "norm_type"), [(1.0, 2.0), (0.5, 1.0), (0.3, float("inf")), (100.0, 2.0)])
def test_clip_grad_norm(device, max_norm, norm_type) -> None:
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5,))]
    ours = [Tensor(np.zeros(g.shape, np.float32), device=device).requires_grad_() for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, tp, g in zip(ours, theirs, grads, strict=True):
        p.grad, tp.grad = Tensor(g, device=device), torch.tensor(g)
    total = utils.clip_grad_norm_(ours, max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    np.testing.assert_allclose(total.numpy(), ttotal.numpy(), rtol=1e-5)
    for p, tp in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_clip_grad_value(device) -> None:
    g = np.linspace(-2, 2, 9).astype(np.float32)
    p = Tensor(np.zeros(9, np.float32), device=device).requires_grad_()
    p.grad = Tensor(g, device=device)
    utils.clip_grad_value_(p, 0.75)
    np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -0.75, 0.75))


def _pair(make, tmake, epochs: int = 14) -> None:
    p = Tensor(np.zeros(1, np.float32)).requires_grad_()
    opt = optim.SGD([p], lr=0.2)
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.2)
    sched, tsched = make(opt), tmake(topt)
    ours, theirs = [opt.lr], [topt.param_groups[0]["lr"]]
    for _ in range(epochs):
        topt.step()  # torch warns when the schedule steps before the optimizer
        sched.step()
        tsched.step()
        ours.append(opt.lr)
        theirs.append(topt.param_groups[0]["lr"])
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    assert sched.get_last_lr() == [opt.lr]
    np.testing.assert_allclose(opt.lr_tensor.numpy(), [np.float32(opt.lr)])


def test_step_lr() -> None:
    _pair(lambda o: schedule.StepLR(o, 3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5))


def test_linear_lr() -> None:
    _pair(lambda o: schedule.LinearLR(o, 0.1, 1.0, 5), lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.1, 1.0, 5))


def test_cosine_lr() -> None:
    _pair(lambda o: schedule.CosineAnnealingLR(o, 10, eta_min=0.01),
          lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, eta_min=0.01), epochs=10)


def test_warmup_then_cosine() -> None:
    def ours(o):
        return schedule.SequentialLR(o, [schedule.LinearLR(o, 0.25, 1.0, 4), schedule.CosineAnnealingLR(o, 8)], [4])

    def theirs(o):
        tl = torch.optim.lr_scheduler
        return tl.SequentialLR(o, [tl.LinearLR(o, 0.25, 1.0, 4), tl.CosineAnnealingLR(o, 8)], [4])
    _pair(ours, theirs, epochs=12)


def test_schedule_changes_a_jitted_step(device) -> None:
    """SGD on loss = sum(p * g) with a fixed g: each step subtracts lr * g, with the lr the schedule set."""
    g = np.array([1.0, -2.0, 0.5], np.float32)
    p = Tensor(np.zeros(3, np.float32), device=device).requires_grad_()
    opt = optim.SGD([p], lr=1.0)
    sched = schedule.StepLR(opt, 1, gamma=0.5)
    gt = Tensor(g, device=device)

    @tolk_core.jit
    def step(w: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (p * w).sum()
        loss.backward()
        opt.step(loss)
        return loss
    lrs = []
    for _ in range(5):
        lrs.append(opt.lr)
        step(gt)
        sched.step()
    assert lrs == [1.0, 0.5, 0.25, 0.125, 0.0625]
    np.testing.assert_allclose(p.numpy(), -sum(lrs) * g, rtol=1e-6)
