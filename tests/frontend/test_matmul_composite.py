"""A matrix product kept as one composite node until prepare_rangeify (frontend/products.py) where no gradient
is expected (under `no_grad`, or while no tensor requires grad): the tensor graph holds one CALL per product,
prepare expands it into the formula Tensor ops would build (the same kernels), and values and gradients (asked
of such a node after all, through `autograd.gradient`) are numpy's and torch's, first and second order, with
broadcast batch axes, vectors and a product of a tensor with itself. A training graph keeps the formula."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core.frontend.autograd import gradient, no_grad
from tolk_core.frontend.products import MATMUL, matmul_formula
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.calls import is_composite
from tolk_core.schedule import prepare

torch = pytest.importorskip("torch", reason="torch is not installed: the references need it (pip install "
                                            "torch==2.13.0, CPU)")

SHAPES = [((3, 4), (4, 5)), ((1, 7), (7, 1)), ((2, 3, 4, 5), (3, 5, 6)), ((5, 2), (4, 2, 3)), ((6, 9), (9, 33))]


def _data(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_one_node_per_product() -> None:
    a, b = Tensor(_data((3, 4), 0)) * 1, Tensor(_data((4, 5), 1)) * 1
    with no_grad():
        y = a @ b
    assert is_composite(y.uop) and y.uop.arg is MATMUL and y.uop.src == (a.uop, b.uop)
    assert y.shape == (3, 5) and y.dtype == a.dtype
    inputs = {*a.uop.toposort(), *b.uop.toposort()}
    assert len(y.uop.toposort()) == len(inputs) + 1


def test_expansion_is_the_tensor_formula() -> None:
    """prepare's expansion is the graph the Tensor ops of the formula build: the same interned nodes."""
    a, b = Tensor(_data((2, 3, 4), 0)) * 1, Tensor(_data((4, 5), 1)) * 1
    bt = b.reshape(1, 4, 5).expand(2, 4, 5).permute(0, 2, 1)  # b broadcast to the batch, then transposed
    by_ops = (a.reshape(2, 3, 1, 4).expand(2, 3, 5, 4) * bt.reshape(2, 1, 5, 4).expand(2, 3, 5, 4)).sum(axis=-1)
    with no_grad():
        y = a @ b
    assert is_composite(y.uop)
    assert prepare.expand_composite(y.uop) is matmul_formula(a.uop, b.uop) is by_ops.uop


def test_same_kernels_as_the_formula() -> None:
    a, b = Tensor(_data((8, 16), 0)), Tensor(_data((16, 12), 1))
    with no_grad():
        y = a @ b
    assert is_composite(y.uop)
    with tolk_core.profile() as whole:
        got = y.realize()
    with tolk_core.profile() as formula:
        want = Tensor(matmul_formula(a.uop, b.uop), "CPU").realize()
    assert [r.name for r in whole.rows] == [r.name for r in formula.rows]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_values_are_numpys(sa, sb, dtype) -> None:
    a, b = _data(sa, 0), _data(sb, 1)
    if dtype == np.int32:  # integers wrap in their own dtype as numpy's do
        a, b = (a * 2**20).astype(np.int32), (b * 2**12).astype(np.int32)
    a, b = a.astype(dtype), b.astype(dtype)
    with no_grad():
        y = Tensor(a) @ Tensor(b)
    assert is_composite(y.uop)
    got = y.numpy()
    assert got.dtype == (a @ b).dtype
    if dtype == np.int32:
        np.testing.assert_array_equal(got, a @ b)
    else:
        np.testing.assert_allclose(got, a @ b, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_vectors_and_mixed_dtypes() -> None:
    v, m = _data((5,), 0), _data((5, 3), 1)
    np.testing.assert_allclose((Tensor(v) @ Tensor(m)).numpy(), v @ m, rtol=1e-5)
    np.testing.assert_allclose((Tensor(m.T) @ Tensor(v)).numpy(), m.T @ v, rtol=1e-5)
    np.testing.assert_allclose((Tensor(v) @ Tensor(v)).numpy(), v @ v, rtol=1e-5)
    i = np.arange(15, dtype=np.int32).reshape(5, 3)
    got = Tensor(v) @ Tensor(i)
    assert got.dtype.name == "float32"
    np.testing.assert_allclose(got.numpy(), v @ i.astype(np.float32), rtol=1e-5)


def _grads(loss: Tensor, *leaves: Tensor) -> list[np.ndarray]:
    grads = gradient(loss.uop, Tensor.ones(()).uop, {t.uop for t in leaves})
    return [Tensor(grads[t.uop], "CPU").numpy() for t in leaves]


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_gradients_are_torchs(sa, sb) -> None:
    a, b = _data(sa, 0), _data(sb, 1)
    ta, tb = Tensor(a), Tensor(b)
    with no_grad():
        y = ta @ tb
    assert is_composite(y.uop)
    ga, gb = _grads((y.tanh() * 3).sum(), ta, tb)
    xa, xb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((xa @ xb).tanh() * 3).sum().backward()
    np.testing.assert_allclose(ga, xa.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gb, xb.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_gradient_of_a_product_with_itself() -> None:
    x = _data((4, 4), 2)
    t = Tensor(x)
    with no_grad():
        y = t @ t
    assert is_composite(y.uop) and y.uop.src == (t.uop, t.uop)
    (g,) = _grads(y.square().sum(), t)
    xt = torch.tensor(x, requires_grad=True)
    (xt @ xt).square().sum().backward()
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_a_training_graph_keeps_the_formula() -> None:
    """With a tensor that requires grad and gradients enabled the product is the formula's nodes, and backward
    gives torch's gradient for the one operand that requires it."""
    x, w = _data((4, 4), 2), _data((4, 3), 3)
    t, tw = Tensor(x).requires_grad_(), Tensor(w)
    y = t @ tw
    assert not is_composite(y.uop) and y.uop is matmul_formula(t.uop, tw.uop)
    y.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np.ones((4, 3), np.float32) @ w.T, rtol=1e-5)


def test_second_order_gradient() -> None:
    """The slope is a graph of ordinary nodes, so it differentiates again: d/dx of d/dW of (x @ W)^2 summed."""
    x, w = _data((3, 4), 0), _data((4, 2), 1)
    tx, tw = Tensor(x), Tensor(w)
    with no_grad():
        y = tx @ tw
    assert is_composite(y.uop)
    loss = y.square().sum()
    dw = gradient(loss.uop, Tensor.ones(()).uop, {tw.uop})[tw.uop]
    dx = gradient(Tensor(dw, "CPU").sum().uop, Tensor.ones(()).uop, {tx.uop})[tx.uop]
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (g,) = torch.autograd.grad((xt @ wt).square().sum(), wt, create_graph=True)
    (g2,) = torch.autograd.grad(g.sum(), xt)
    np.testing.assert_allclose(Tensor(dw, "CPU").numpy(), g.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(Tensor(dx, "CPU").numpy(), g2.numpy(), rtol=1e-4, atol=1e-5)


def test_jitted_inference_matches_eager() -> None:
    """A jitted function over products under no_grad gives the eager values (the same kernels after expansion)."""
    w = Tensor(_data((4, 5), 4))

    def infer(x: Tensor) -> Tensor:
        with no_grad():
            return ((x @ w).relu() @ w.T).realize()
    jitted = tolk_core.jit(infer)
    for i in range(3):
        x = _data((3, 4), 10 + i)
        np.testing.assert_array_equal(jitted(Tensor(x)).numpy(), infer(Tensor(x)).numpy())
