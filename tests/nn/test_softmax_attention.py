"""Softmax with its gradient given whole (frontend/softmax.py) and the attention built on it: values and gradients
against numpy's Jacobian and torch 2.13's scaled_dot_product_attention at odd sizes, -inf/NaN/inf rows, and the
kernels attention is scheduled into (scores, one softmax row kernel, P @ V; docs/placements.md, row fusion)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.nn.torch_check import check
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import F


def _n(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _np_softmax_vjp(x: np.ndarray, g: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """softmax along `axis` and g's pull-back through the full Jacobian diag(p) - p p^T of each row (float64)."""
    xm, gm = np.moveaxis(x.astype(np.float64), axis, -1), np.moveaxis(g.astype(np.float64), axis, -1)
    e = np.exp(xm - xm.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    jac = np.einsum("...i,ij->...ij", p, np.eye(p.shape[-1])) - p[..., :, None] * p[..., None, :]
    dx = np.einsum("...ij,...i->...j", jac, gm)
    return np.moveaxis(p, -1, axis), np.moveaxis(dx, -1, axis)


@pytest.mark.parametrize("shape,axis", [((3, 37), -1), ((5, 4, 7), 1), ((9, 2, 3), 0), ((1, 1), -1)])
def test_softmax_gradient_against_the_jacobian(device, shape, axis) -> None:
    rng = np.random.default_rng(0)
    x, g = _n(rng, *shape) * 3, _n(rng, *shape)
    t = Tensor(x, device=device).requires_grad_()
    out = t.softmax(axis)
    (out * Tensor(g, device=device)).sum().backward()
    p, dx = _np_softmax_vjp(x, g, axis)
    np.testing.assert_allclose(out.numpy(), p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t.grad.numpy(), dx, rtol=1e-4, atol=1e-6)


def test_softmax_special_rows(device) -> None:
    """torch's softmax: -inf entries get 0 and no gradient; a row of -inf, or one holding +inf or NaN, is NaN."""
    inf = np.inf
    x = np.array([[1.0, -inf, 2.0, -inf], [-inf, -inf, -inf, -inf], [0.5, inf, 1.0, 2.0], [1.0, np.nan, 0.0, 3.0],
                  [-0.0, 0.0, -0.0, 0.0]], np.float32)
    g = np.arange(20, dtype=np.float32).reshape(5, 4) / 7
    t = Tensor(x, device=device).requires_grad_()
    out = t.softmax(-1)
    (out * Tensor(g, device=device)).sum().backward()
    p, dx = _np_softmax_vjp(x[:1], g[:1], -1)
    got, grad = out.numpy(), t.grad.numpy()
    np.testing.assert_allclose(got[0], p[0], rtol=1e-6)
    assert got[0, 1] == 0 and got[0, 3] == 0 and grad[0, 1] == 0 and grad[0, 3] == 0
    np.testing.assert_allclose(grad[0], dx[0], rtol=1e-5, atol=1e-7)
    assert np.isnan(got[1:4]).all() and np.isnan(grad[1:4]).all()
    np.testing.assert_array_equal(got[4], np.full(4, 0.25, np.float32))


torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "causal_wide"])
def test_sdpa_odd_lengths(device, case) -> None:
    """Sizes that fill no vector or block: 37 queries, 53 keys (causal: 37 and 37, or 37 queries over 53 keys,
    torch's top-left aligned mask), head sizes 12 and 20."""
    rng = np.random.default_rng(1)
    lq, s = 37, (37 if case == "causal" else 53)
    q, k, v = _n(rng, 2, 3, lq, 12), _n(rng, 2, 3, s, 12), _n(rng, 2, 3, s, 20)
    mask = None
    kw: dict = {"is_causal": True} if case.startswith("causal") else {}
    if case == "bool_mask":
        mask = rng.random((3, lq, s)) > 0.4
    elif case == "float_mask":
        mask = _n(rng, 2, 1, lq, s)

    def ours(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else Tensor(mask, device=device),
                                              **kw)

    def theirs(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=None if mask is None else torch.tensor(mask), **kw)
    check(device, ours, theirs, [q, k, v])


def test_sdpa_fully_masked_queries_are_zero(device) -> None:
    """A query that no key may attend to gets zeros and zero gradients (torch 2.13's sdpa; its softmax alone
    would give NaN), while NaN in a query still propagates to that query's row."""
    rng = np.random.default_rng(2)
    q, k, v = _n(rng, 1, 2, 5, 8), _n(rng, 1, 2, 7, 8), _n(rng, 1, 2, 7, 4)
    mask = rng.random((5, 7)) > 0.3
    mask[1] = False
    mask[3] = False

    def ours(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=Tensor(mask, device=device))

    def theirs(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(mask))
    check(device, ours, theirs, [q, k, v])
    tq = Tensor(q, device=device).requires_grad_()
    out = F.scaled_dot_product_attention(tq, Tensor(k, device=device), Tensor(v, device=device),
                                         attn_mask=Tensor(mask, device=device))
    out.sum().backward()
    got, grad = out.numpy(), tq.grad.numpy()
    assert (got[:, :, [1, 3]] == 0).all() and (grad[:, :, [1, 3]] == 0).all()
    qn = q.copy()
    qn[0, 1, 0, 0] = np.nan
    got = F.scaled_dot_product_attention(Tensor(qn, device=device), Tensor(k, device=device), Tensor(v, device=device),
                                         attn_mask=Tensor(mask, device=device)).numpy()
    assert np.isnan(got[0, 1, 0]).all() and not np.isnan(np.delete(got[0, 1], [0], axis=0)).any()


def test_attention_kernels(device, kernels) -> None:
    """Forward: the scores, one softmax row kernel (its max and exp sum fused), P @ V (and the causal mask)."""
    rng = np.random.default_rng(3)
    q, k, v = _n(rng, 2, 3, 40, 16), _n(rng, 2, 3, 40, 16), _n(rng, 2, 3, 40, 16)
    tq, tk, tv = (Tensor(a, device=device) for a in (q, k, v))
    with kernels() as kc:
        out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).numpy()
    assert kc.count == 4  # the causal mask, the scores, the softmax, P @ V
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.tensor, (q, k, v)), is_causal=True)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-5)


def test_a_softmax_output_node_dies_with_its_tensor():
    # its gradient rule is kept weakly on the node: a rule holding the node would keep it (and any buffer it
    # was realized into) alive, and the same softmax built again would be found realized, never computed
    import gc
    import weakref
    y = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).softmax(-1)
    node = weakref.ref(y.uop)
    del y
    gc.collect()
    assert node() is None
