"""The composite activations (sigmoid, tanh, and silu / tanh-GELU built on them) differentiated by the derivative
read off their output (docs/training.md, "Activation gradients"): gradients against torch on edge values, the
backward graph free of the forward formula's branches, and a value built before its input required grad."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import Op

torch = pytest.importorskip("torch", reason="torch is not installed: the gradient references need it (pip install "
                                            "torch==2.13.0, CPU)")

# both sides of every branch point of the formulas (tanh's |x| < 1/4 Taylor branch, sign, saturation), signed
# zeros, infinities and NaN
EDGES = np.array([-np.inf, -100.0, -20.0, -3.0, -0.25, -0.2499, -1e-3, -0.0, 0.0, 1e-30, 1e-3, 0.2499, 0.25, 0.7,
                  3.0, 20.0, 100.0, np.inf, np.nan], np.float32)

CASES = {
    "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid),
    "tanh": (lambda t: t.tanh(), torch.tanh),
    "silu": (lambda t: t.silu(), torch.nn.functional.silu),
    "gelu": (lambda t: t.gelu(), lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
}


def _torch_grads(fn, x: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.tensor(x, requires_grad=True)
    y = fn(xt)
    y.backward(torch.tensor(seed))
    return y.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_torch(name: str) -> None:
    ours, theirs = CASES[name]
    rng = np.random.default_rng(3)
    x = np.concatenate([EDGES, rng.normal(0, 3, 45).astype(np.float32)]).reshape(8, 8)
    seed = rng.normal(0, 1, x.shape).astype(np.float32)
    want_y, want_g = _torch_grads(theirs, x, seed)
    t = Tensor(x).requires_grad_()
    y = ours(t)
    y.backward(Tensor(seed))
    np.testing.assert_allclose(y.numpy(), want_y, rtol=2e-6, atol=1e-7)
    # atol: GELU's derivative is a sum of O(1) terms that cancel in the far-left tail (about -0.003 near x = -3),
    # so a rounding of one term shows there as 1.5e-7 absolute, whichever way the sum is ordered
    np.testing.assert_allclose(t.grad.numpy(), want_g, rtol=1e-5, atol=1e-6)


def _branch_nodes(u) -> int:
    return sum(n.op in (Op.WHERE, Op.CMPLT) for n in u.toposort())


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_backward_reads_only_the_output(name: str) -> None:
    """The gradient graph adds no comparison or select to the forward's: it does not walk the formula's branches
    (the rules would differentiate each WHERE and the comparisons' inputs)."""
    ours, _ = CASES[name]
    t = Tensor(np.linspace(-3, 3, 12, dtype=np.float32)).requires_grad_()
    y = ours(t)
    y.sum().backward()
    assert _branch_nodes(t.grad.uop) == _branch_nodes(y.uop)
    assert y.uop in set(t.grad.uop.toposort())


def test_value_built_before_marking_differentiates() -> None:
    """A value built before its input was marked requires_grad has its whole gradient all the same: finite at
    +-inf, where the formula's own rules give NaN."""
    x = np.array([-np.inf, -4.0, -0.1, 0.0, 0.1, 4.0, np.inf], np.float32)
    t = Tensor(x)
    y = t.tanh()
    t.requires_grad_()
    y.sum().backward()
    _, want = _torch_grads(torch.tanh, x, np.ones_like(x))
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-7)
