"""Gradients against torch's (CPU) on the same random inputs: matmul, softmax + cross-entropy, layernorm, conv2d.
float32 on both sides; tolerance rtol 1e-4, atol 1e-5 (sums of tens of terms in a different order)."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import nn
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import functional as F

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")


def _pair(rng, *shape):
    a = rng.standard_normal(shape).astype(np.float32)
    return a, torch.tensor(a, requires_grad=True)


def test_gradients_match_torch(device) -> None:
    rng = np.random.default_rng(0)
    tf = torch.nn.functional
    results = []  # (name, tolk tensors, torch tensors)

    a, ta = _pair(rng, 5, 7)
    b, tb = _pair(rng, 7, 3)
    w, tw = _pair(rng, 5, 3)
    xa, xb = Tensor(a, device=device).requires_grad_(), Tensor(b, device=device).requires_grad_()
    ((xa @ xb) * Tensor(w, device=device)).sum().backward()
    ((ta @ tb) * torch.tensor(w)).sum().backward()
    results.append(("matmul", [xa.grad, xb.grad], [ta.grad, tb.grad]))

    logits, tlogits = _pair(rng, 6, 10)
    labels = rng.integers(0, 10, 6).astype(np.int32)
    xl = Tensor(logits, device=device).requires_grad_()
    F.cross_entropy(xl, Tensor(labels, device=device)).backward()
    tf.cross_entropy(tlogits, torch.tensor(labels, dtype=torch.long)).backward()
    results.append(("cross_entropy", [xl.grad], [tlogits.grad]))

    s, ts = _pair(rng, 4, 9)
    sw = rng.standard_normal((4, 9)).astype(np.float32)
    xs = Tensor(s, device=device).requires_grad_()
    (xs.softmax(axis=-1) * Tensor(sw, device=device)).sum().backward()
    (ts.softmax(dim=-1) * torch.tensor(sw)).sum().backward()
    results.append(("softmax", [xs.grad], [ts.grad]))

    h, th = _pair(rng, 3, 4, 8)
    hw = rng.standard_normal((3, 4, 8)).astype(np.float32)
    ln = nn.LayerNorm(8, device=device)
    tln = torch.nn.LayerNorm(8)
    gamma, beta = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    ln.weight.assign(Tensor(gamma, device=device))
    ln.bias.assign(Tensor(beta, device=device))
    with torch.no_grad():
        tln.weight.copy_(torch.tensor(gamma))
        tln.bias.copy_(torch.tensor(beta))
    xh = Tensor(h, device=device).requires_grad_()
    (ln(xh) * Tensor(hw, device=device)).sum().backward()
    (tln(th) * torch.tensor(hw)).sum().backward()
    results.append(("layernorm", [xh.grad, ln.weight.grad, ln.bias.grad], [th.grad, tln.weight.grad, tln.bias.grad]))

    img, timg = _pair(rng, 2, 3, 7, 6)
    k, tk = _pair(rng, 4, 3, 3, 2)
    bias, tbias = _pair(rng, 4)
    xi, xk, xbias = (Tensor(v, device=device).requires_grad_() for v in (img, k, bias))
    out = F.conv2d(xi, xk, xbias, stride=(2, 1), padding=1)
    tout = tf.conv2d(timg, tk, tbias, stride=(2, 1), padding=1)
    cw = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
    assert out.shape == tuple(tout.shape)
    (out * Tensor(cw, device=device)).sum().backward()
    (tout * torch.tensor(cw)).sum().backward()
    results.append(("conv2d", [xi.grad, xk.grad, xbias.grad], [timg.grad, tk.grad, tbias.grad]))

    ours = [g for _, gs, _ in results for g in gs]
    ours[0].realize(*ours[1:])
    for name, gs, tgs in results:
        for i, (g, tg) in enumerate(zip(gs, tgs, strict=True)):
            np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{name} input {i}")
