"""Optimizers against numpy implementations of torch's update formulas (torch.optim docs), five steps on a
least-squares loss whose gradient numpy computes in closed form. float32 in tolk, float64 in numpy: rtol 1e-5."""
from __future__ import annotations

import numpy as np
import pytest

from tests.training.optim_reference import adam_update
from tolk_core.errors import TolkError
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import optim

STEPS = 5
rng = np.random.default_rng(3)
A, Y, P0 = rng.standard_normal((6, 3)), rng.standard_normal((6, 2)), rng.standard_normal((3, 2))


def _np_grad(p: np.ndarray) -> np.ndarray:
    return A.T @ (A @ p - Y)


def _np_sgd(lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    p, b = P0.copy(), np.zeros_like(P0)
    for _ in range(STEPS):
        g = _np_grad(p) + weight_decay * p
        if momentum:
            b = momentum * b + g
            g = g + momentum * b if nesterov else b
        p = p - lr * g
    return p


def _np_adam(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    p, m, v = P0.copy(), np.zeros_like(P0), np.zeros_like(P0)
    for t in range(1, STEPS + 1):
        p, m, v = adam_update(p, m, v, _np_grad(p), t, lr, betas, eps, weight_decay, decoupled)
    return p


CASES = {
    "sgd": (lambda ps: optim.SGD(ps, lr=0.05), lambda: _np_sgd(0.05)),
    "sgd_momentum_wd": (lambda ps: optim.SGD(ps, lr=0.03, momentum=0.9, weight_decay=0.1),
                        lambda: _np_sgd(0.03, 0.9, 0.1)),
    "sgd_nesterov": (lambda ps: optim.SGD(ps, lr=0.03, momentum=0.8, nesterov=True),
                     lambda: _np_sgd(0.03, 0.8, nesterov=True)),
    "adam": (lambda ps: optim.Adam(ps, lr=0.1), lambda: _np_adam(0.1)),
    "adam_l2": (lambda ps: optim.Adam(ps, lr=0.1, betas=(0.8, 0.99), weight_decay=0.2),
                lambda: _np_adam(0.1, (0.8, 0.99), weight_decay=0.2)),
    "adamw": (lambda ps: optim.AdamW(ps, lr=0.1, weight_decay=0.3),
              lambda: _np_adam(0.1, weight_decay=0.3, decoupled=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_optimizer_matches_reference(name) -> None:
    make, ref = CASES[name]
    p = Tensor(P0.astype(np.float32)).requires_grad_()
    a, y = Tensor(A.astype(np.float32)), Tensor(Y.astype(np.float32))
    opt = make([p])
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ((a @ p - y) * (a @ p - y)).sum() * 0.5
        loss.backward()
        opt.step(loss)
    np.testing.assert_allclose(p.numpy(), ref(), rtol=1e-5, atol=1e-6)
    assert opt.t.item() == STEPS


def test_parameters_update_in_place_and_skip_missing_gradients() -> None:
    p, q = Tensor(np.ones(3, np.float32)).requires_grad_(), Tensor(np.ones(2, np.float32)).requires_grad_()
    view = p.reshape(3)  # shares p's storage
    opt = optim.SGD([p, q], lr=0.5)
    (p * p).sum().backward()
    opt.step()
    np.testing.assert_array_equal(view.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(q.numpy(), [1.0, 1.0])  # no gradient: unchanged


def test_optimizer_errors() -> None:
    with pytest.raises(TolkError, match="does not require grad"):
        optim.SGD([Tensor(np.ones(2, np.float32))])
    with pytest.raises(TolkError, match="no parameters"):
        optim.Adam([])
    with pytest.raises(TolkError, match="Nesterov"):
        optim.SGD([Tensor(np.ones(2, np.float32)).requires_grad_()], nesterov=True)


@pytest.mark.parametrize("name", ["sgd_momentum_wd", "adam_l2", "adamw"])
def test_several_parameters_match_the_reference_each(name) -> None:
    """Two parameters: a step stores every parameter in one schedule, then every state tensor in another
    (`assign_together`); each parameter still ends where the reference's one-by-one update puts it (adam_l2's
    moments read the parameters, which are stored first: they are computed before that store)."""
    make, ref = CASES[name]
    p, q = (Tensor(P0.astype(np.float32)).requires_grad_() for _ in range(2))
    a, y = Tensor(A.astype(np.float32)), Tensor(Y.astype(np.float32))
    opt = make([p, q])
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ((a @ p - y) * (a @ p - y)).sum() * 0.5 + ((a @ q - y) * (a @ q - y)).sum() * 0.5
        loss.backward()
        opt.step(loss)
    np.testing.assert_allclose(p.numpy(), ref(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(q.numpy(), ref(), rtol=1e-5, atol=1e-6)


def test_an_update_that_stores_by_itself_still_steps() -> None:
    class Halve(optim.Optimizer):
        def _update(self, i, p, g):  # stores itself and returns no stages
            p.assign(p * 0.5)

    p = Tensor(np.full(3, 4.0, np.float32)).requires_grad_()
    opt = Halve([p], lr=1.0)
    (p * p).sum().backward()
    opt.step()
    np.testing.assert_array_equal(p.numpy(), [2.0, 2.0, 2.0])
