"""Fusion that never multiplies work, on the training steps users write (small sizes): with the default
FUSION_WORK_BOUND every kernel's work ratio (executed over nominal operations, counted from the kernel ASTs by
`tolk_core.profile`) is at most 2.0, and the values are right. The GRU unrolled 32 steps trains with cold caches
within a liveness limit, its gradients equal torch's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tolk_core
from tolk_core.frontend.tensor import Tensor

BOUND = 2.0


def _t(r, *shape, grad: bool = False) -> Tensor:
    t = Tensor((r.standard_normal(shape) * 0.3).astype(np.float32))
    return t.requires_grad_() if grad else t


def _attention(r, sum_loss: bool = False):
    q, k, v = (_t(r, 2, 4, 32, 16, grad=True) for _ in range(3))
    i = Tensor(np.arange(32, dtype=np.int32))
    s = (i.reshape(32, 1) >= i.reshape(1, 32)).where((q @ k.transpose(-1, -2)) * 0.25, -1e9)
    out = s.softmax() @ v
    # a sum loss makes the upstream gradient a broadcast of ones: reductions over it must not repeat per copy
    (out.sum() if sum_loss else (out * _t(r, 2, 4, 32, 16)).sum()).backward()
    return [q.grad, k.grad, v.grad]


def _attention_sum_loss(r):
    return _attention(r, sum_loss=True)


def _block(r):
    x = _t(r, 4, 16, 32)
    w1, w2, wq, wk, wv = (_t(r, *s, grad=True) for s in ((32, 64), (64, 32), (32, 32), (32, 32), (32, 32)))
    h = x.layernorm()
    a = ((h @ wq) @ (h @ wk).transpose(-1, -2) * (32 ** -0.5)).softmax() @ (h @ wv)
    x = x + a
    y = x + (x.layernorm() @ w1).gelu() @ w2
    (y * y).mean().backward()
    return [w1.grad, w2.grad, wq.grad, wk.grad, wv.grad]


def _cnn(r):
    x = _t(r, 8, 1, 8, 8)
    w1, w2, wl = _t(r, 4, 1, 3, 3, grad=True), _t(r, 8, 4, 3, 3, grad=True), _t(r, 32, 10, grad=True)

    def bn(h):
        m = h.mean(axis=(0, 2, 3), keepdim=True)
        return (h - m) / (((h - m) ** 2).mean(axis=(0, 2, 3), keepdim=True) + 1e-5).sqrt()

    def pool(h):
        n, c, hh, ww = h.shape
        return h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))

    h = pool(bn(pool(bn(x.conv2d(w1, padding=1)).relu()).conv2d(w2, padding=1)).relu())
    (h.reshape(8, -1) @ wl).log_softmax().mean().backward()
    return [w1.grad, w2.grad, wl.grad]


def _gru_stacked(r):
    # torch's GRUCell: the three gates' weights stacked, sliced per gate; the gradient of the stacked
    # weights is a cat of the three gates' gradients (sizes where the recomputation passes FUSION_MIN_EXCESS)
    n, ins = 128, 16
    wi, wh, bi, bh = (_t(r, *s, grad=True) for s in ((3 * n, ins), (3 * n, n), (3 * n,), (3 * n,)))
    h = Tensor.zeros(16, n)
    for _ in range(4):
        gi, gh = _t(r, 16, ins) @ wi.T + bi, h @ wh.T + bh
        rr, z = (gi[:, :n] + gh[:, :n]).sigmoid(), (gi[:, n:2 * n] + gh[:, n:2 * n]).sigmoid()
        h = (1 - z) * (gi[:, 2 * n:] + rr * gh[:, 2 * n:]).tanh() + z * h
    ((h - _t(r, 16, n)) ** 2).mean().backward()
    return [wi.grad, wh.grad, bi.grad, bh.grad]


def _attention_fused_qkv(r):
    # q, k and v sliced from one projection (the char GPT's attention): the projection's gradient reads a cat of
    # three matmul-shaped reductions (dq, dk, dv), each padded to the cat's whole width; inlined, every output
    # column computed all three folds (x2.97), so each part is stored and the cat only adds
    b, t, d, heads = 4, 64, 128, 4
    x, w = _t(r, b, t, d), _t(r, d, 3 * d, grad=True)
    qkv = x @ w
    q, k, v = (qkv[:, :, j * d:(j + 1) * d].reshape(b, t, heads, d // heads).transpose(1, 2) for j in range(3))
    i = Tensor(np.arange(t, dtype=np.int32))
    s = (i.reshape(t, 1) >= i.reshape(1, t)).where((q @ k.transpose(-1, -2)) * (d // heads) ** -0.5, -1e9)
    out = (s.softmax() @ v).transpose(1, 2).reshape(b, t, d)
    (out * _t(r, b, t, d)).sum().backward()
    return [w.grad]


@pytest.mark.parametrize("step", [_attention, _attention_sum_loss, _block, _cnn, _gru_stacked, _attention_fused_qkv],
                         ids=["causal-attention", "causal-attention-sum-loss", "transformer-block", "cnn",
                              "gru-stacked-gates", "fused-qkv-attention"])
def test_every_kernel_stays_within_the_work_bound(step) -> None:
    grads = step(np.random.default_rng(0))
    with tolk_core.profile() as prof:
        grads[0].realize(*grads[1:])
    assert len(prof.rows) > 3
    over = [(row.name, row.ops, round(row.work_ratio, 2)) for row in prof.rows if row.work_ratio > BOUND]
    assert not over, f"kernels that recompute work past {BOUND}: {over}"
    assert all(np.isfinite(g.numpy()).all() for g in grads)


_GRU = """
import sys, numpy as np
from tolk_core.frontend.tensor import Tensor
H, I, B, T = 32, 16, 4, 32
r = np.random.default_rng(0)
ws = [(r.standard_normal((I + H, H)) * 0.3).astype(np.float32) for _ in range(3)]
xs = r.standard_normal((T, B, I)).astype(np.float32)
Wz, Wr, Wh = (Tensor(w).requires_grad_() for w in ws)
h = Tensor.zeros(B, H)
for t in range(T):
    x = Tensor(xs[t])
    xh = x.cat(h, dim=1)
    z, rr = (xh @ Wz).sigmoid(), (xh @ Wr).sigmoid()
    h = (1 - z) * h + z * (x.cat(rr * h, dim=1) @ Wh).tanh()
(h * h).sum().backward()
np.savez(sys.argv[1], xs=xs, wz=ws[0], wr=ws[1], wh=ws[2], gz=Wz.grad.numpy(), gr=Wr.grad.numpy(), gh=Wh.grad.numpy())
"""


@pytest.mark.timeout(180)
def test_a_gru_unrolled_32_steps_trains_with_cold_caches(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="the gradients are compared with torch's")
    env = {**os.environ, "TOLK_CACHE_DIR": str(tmp_path / "cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out = tmp_path / "gru.npz"
    subprocess.run([sys.executable, "-c", _GRU, str(out)], check=True, timeout=120, env=env)
    d = np.load(out)
    wz, wr, wh = (torch.tensor(d[k], requires_grad=True) for k in ("wz", "wr", "wh"))
    h = torch.zeros(4, 32)
    for x in torch.tensor(d["xs"]):
        xh = torch.cat([x, h], 1)
        z, rr = torch.sigmoid(xh @ wz), torch.sigmoid(xh @ wr)
        h = (1 - z) * h + z * torch.tanh(torch.cat([x, rr * h], 1) @ wh)
    (h * h).sum().backward()
    for mine, ref in ((d["gz"], wz.grad), (d["gr"], wr.grad), (d["gh"], wh.grad)):
        np.testing.assert_allclose(mine, ref.numpy(), rtol=2e-3, atol=2e-4)
