"""Optimizer updates in few kernels (schedule/merge.py): a step stores every parameter and its state in one
schedule whose kernels each update all the parameters of one shape. Checked against numpy float64 versions of
torch's update formulas (torch.optim docs) over several steps, parameters of odd sizes and mixed shapes (one
element, odd lengths, a 4-D convolution weight, two parameters of one shape), eager and jitted, on every
compiled device; and the kernels a step launches: one per shape of parameter plus the step count's.
float32 in tolk, float64 in numpy: rtol 1e-5 (the same tolerance as tests/training/test_optim.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tests.training.optim_reference import adam_update
from tolk_core.frontend.tensor import Tensor, assign_stages
from tolk_core.nn import optim

STEPS = 4
SHAPES = [(3, 5), (7,), (3, 5), (1,), (5, 1, 3, 3), (13, 9)]
rng = np.random.default_rng(7)
P0 = [rng.standard_normal(s) for s in SHAPES]
C = [rng.standard_normal(s) for s in SHAPES]  # loss = sum(c * p * p): gradient 2 c p, in closed form


def _np_sgd(lr, momentum=0.0, weight_decay=0.0, nesterov=False) -> list[np.ndarray]:
    out = []
    for p, c in zip(P0, C, strict=True):
        p, b = p.copy(), np.zeros_like(p)
        for _ in range(STEPS):
            g = 2 * c * p + weight_decay * p
            if momentum:
                b = momentum * b + g
                g = g + momentum * b if nesterov else b
            p = p - lr * g
        out.append(p)
    return out


def _np_adam(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False) -> list[np.ndarray]:
    out = []
    for p, c in zip(P0, C, strict=True):
        p, m, v = p.copy(), np.zeros_like(p), np.zeros_like(p)
        for t in range(1, STEPS + 1):
            p, m, v = adam_update(p, m, v, 2 * c * p, t, lr, betas, eps, weight_decay, decoupled)
        out.append(p)
    return out


CASES = {
    "sgd_momentum_wd": (lambda ps: optim.SGD(ps, lr=0.03, momentum=0.9, weight_decay=0.1),
                        lambda: _np_sgd(0.03, 0.9, 0.1)),
    "sgd_nesterov": (lambda ps: optim.SGD(ps, lr=0.03, momentum=0.8, nesterov=True),
                     lambda: _np_sgd(0.03, 0.8, nesterov=True)),
    "adam_l2": (lambda ps: optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), weight_decay=0.2),
                lambda: _np_adam(0.05, (0.8, 0.99), weight_decay=0.2)),
    "adamw": (lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.3),
              lambda: _np_adam(0.05, weight_decay=0.3, decoupled=True)),
}


def _params(device: str) -> tuple[list[Tensor], list[Tensor]]:
    ps = [Tensor(p.astype(np.float32), device=device).requires_grad_() for p in P0]
    return ps, [Tensor(c.astype(np.float32), device=device) for c in C]


def _train(name: str, device: str, jitted: bool, kernels=None) -> tuple[list[Tensor], list[int]]:
    ps, cs = _params(device)
    opt = CASES[name][0](ps)

    def step() -> Tensor:
        opt.zero_grad()
        loss = sum(((c * p * p).sum() for p, c in zip(ps, cs, strict=True)), Tensor.zeros((), device=device))
        loss.backward()
        opt.step(loss)
        return loss

    fn = tolk_core.jit(step) if jitted else step
    counts = []
    for _ in range(STEPS):
        if kernels is None:
            fn()
            continue
        with kernels() as k:
            opt.zero_grad()
            loss = sum(((c * p * p).sum() for p, c in zip(ps, cs, strict=True)), Tensor.zeros((), device=device))
            loss.backward()
            loss.realize(*(p.grad for p in ps))
        with kernels() as k:
            opt.step()
        counts.append(k.count)
    return ps, counts


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_merged_update_matches_numpy(name: str, jitted: bool, device: str) -> None:
    ps, _ = _train(name, device, jitted)
    for p, ref, shape in zip(ps, CASES[name][1](), SHAPES, strict=True):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-5, atol=1e-6, err_msg=f"parameter of shape {shape}")


@pytest.mark.parametrize("name", ["adam_l2", "sgd_momentum_wd"])
def test_a_step_launches_one_kernel_per_shape(name: str, kernels) -> None:
    """Five shapes among six parameters: five update kernels (Adam's: three kernels per parameter before, 18;
    SGD with momentum: two, 12). The step count is stored with the updates, in the kernel of the parameters of
    its shape, (1,): Adam's bias corrections read the count before the step plus one, in every kernel, before
    that kernel stores it."""
    _, counts = _train(name, "CPU", False, kernels)
    assert counts == [len(set(SHAPES))] * STEPS


def test_stages_read_each_other_at_one_index(device: str) -> None:
    """A value reading another pair's target at the index that pair stores (a new parameter reading its
    moment): stored together, every value reads the storage as it was before the stores."""
    a0, b0 = np.arange(12, dtype=np.float32).reshape(3, 4), np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    a, b = Tensor(a0, device=device), Tensor(b0, device=device)
    assign_stages([[(a, a + 3 * b)], [(b, b * 2 + a)]])
    np.testing.assert_array_equal(a.numpy(), a0 + 3 * b0)
    np.testing.assert_array_equal(b.numpy(), b0 * 2 + a0)


def test_stages_that_cannot_merge_are_stored_in_order(device: str) -> None:
    """A value reading another target at other indices (transposed), computed from a value the scheduler
    stores first: no schedule keeps that read before the store, so the stages are stored one after the other
    (a schedule each), which the caller's stage order makes right."""
    a0, b0 = np.arange(9, dtype=np.float32).reshape(3, 3), np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3)
    a, b = Tensor(a0, device=device), Tensor(b0, device=device)
    assign_stages([[(a, a + (b * 2).T)], [(b, b * 2)]])
    np.testing.assert_array_equal(a.numpy(), a0 + 2 * b0.T)  # (a read of b after its store: a0 + 4 b0.T)
    np.testing.assert_array_equal(b.numpy(), b0 * 2)
