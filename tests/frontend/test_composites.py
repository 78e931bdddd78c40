"""Activations kept as one composite node until prepare_rangeify (ir/calls.py `Composite`): the tensor graph holds
one CALL per use, prepare expands it into the formula, and values and gradients are the formula's and torch's —
inside traced function bodies, in second-order gradients and under the JIT too."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core.frontend.autograd import gradient
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.calls import is_composite
from tolk_core.ir.ops import Op

torch = pytest.importorskip("torch", reason="torch is not installed: the references need it (pip install "
                                            "torch==2.13.0, CPU)")

X = np.array([-np.inf, -30.0, -2.5, -0.3, -0.2, -1e-4, -0.0, 0.0, 1e-4, 0.2, 0.3, 2.5, 30.0, np.inf, np.nan],
             np.float32)
TORCH = {"sigmoid": torch.sigmoid, "tanh": torch.tanh}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_one_node_per_use(name: str) -> None:
    """The value is one CALL on the input: its graph is the input's plus that node."""
    t = Tensor(X) * 2
    y = getattr(t, name)()
    assert is_composite(y.uop) and y.uop.src == (t.uop,) and y.uop.arg.name == name
    assert len(y.uop.toposort()) == len(t.uop.toposort()) + 1
    np.testing.assert_allclose(y.numpy(), TORCH[name](torch.tensor(X * 2)).numpy(), rtol=2e-6, atol=1e-7)


def test_inside_a_traced_function_body() -> None:
    """A composite in a body traced for inline calls: expanded after the call is inlined, differentiated through
    the inlined body by its own slope."""
    f = tolk_core.function(lambda a, b: (a * b).tanh() + a.sigmoid())
    a, b = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4), np.full((3, 4), 0.7, np.float32)
    ta, tb = Tensor(a).requires_grad_(), Tensor(b)
    out = f(ta, tb)
    assert out.uop.op is Op.CALL and not is_composite(out.uop)  # the function's own call
    out.sum().backward()
    xa = torch.tensor(a, requires_grad=True)
    want = (xa * torch.tensor(b)).tanh() + xa.sigmoid()
    want.sum().backward()
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(ta.grad.numpy(), xa.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_second_order_gradient(name: str) -> None:
    """The slope is itself a graph over the composite's value, so it differentiates again: d2/dx2 against torch's
    double backward."""
    x = np.linspace(-3, 3, 13, dtype=np.float32)
    t = Tensor(x)
    y = getattr(t, name)()
    dy = gradient(y.sum().uop, Tensor.ones(()).uop, {t.uop})[t.uop]
    d2 = gradient(Tensor(dy, "CPU").sum().uop, Tensor.ones(()).uop, {t.uop})[t.uop]
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(TORCH[name](xt).sum(), xt, create_graph=True)
    (g2,) = torch.autograd.grad(g.sum(), xt)
    np.testing.assert_allclose(Tensor(dy, "CPU").numpy(), g.detach().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(Tensor(d2, "CPU").numpy(), g2.numpy(), rtol=1e-4, atol=1e-6)


def test_jitted_step_matches_eager() -> None:
    """A jitted function over composites gives the eager values, bit for bit (the same kernels after expansion)."""
    w = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    step = tolk_core.jit(lambda x: ((x @ Tensor(w)).tanh() * x.sum(1, keepdim=True).sigmoid()).realize())
    for i in range(3):
        x = np.random.default_rng(i).normal(0, 2, (3, 4)).astype(np.float32)
        eager = ((Tensor(x) @ Tensor(w)).tanh() * Tensor(x).sum(1, keepdim=True).sigmoid()).numpy()
        np.testing.assert_array_equal(step(Tensor(x)).numpy(), eager)
