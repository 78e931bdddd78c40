"""Layers against numpy references: Linear, Conv2d, Embedding (and its scatter-add gradient), LayerNorm,
cross_entropy, Dropout; parameters and train/eval mode."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import nn
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import F


def _np_conv2d(x, w, b, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    co, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out + b.reshape(1, co, 1, 1)


def _np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_layers_match_numpy(device) -> None:
    rng = np.random.default_rng(0)
    nn.manual_seed(1)
    lin, conv = nn.Linear(5, 3, device=device), nn.Conv2d(2, 4, 3, stride=2, padding=1, device=device)
    ln, emb = nn.LayerNorm((2, 3), device=device), nn.Embedding(6, 4, device=device)
    x, img, h = rng.standard_normal((4, 5)), rng.standard_normal((2, 2, 7, 7)), rng.standard_normal((3, 2, 3))
    idx = np.array([[1, 5, 1], [0, 2, 1]], np.int32)
    logits, labels = rng.standard_normal((5, 7)), np.array([0, 6, 3, 3, 1], np.int32)
    outs = [lin(Tensor(x.astype(np.float32), device=device)), conv(Tensor(img.astype(np.float32), device=device)),
            ln(Tensor(h.astype(np.float32), device=device)), emb(Tensor(idx, device=device))]
    lg = Tensor(logits.astype(np.float32), device=device)
    lb = Tensor(labels, device=device)
    outs += [F.cross_entropy(lg, lb), F.cross_entropy(lg, lb, reduction="none"),
             F.cross_entropy(lg, lb, reduction="sum", label_smoothing=0.1)]
    outs[0].realize(*outs[1:])
    w, b = lin.weight.numpy(), lin.bias.numpy()
    np.testing.assert_allclose(outs[0].numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1].numpy(), _np_conv2d(img, conv.weight.numpy(), conv.bias.numpy(), 2, 1),
                               rtol=1e-4, atol=1e-5)
    mu, var = h.mean(axis=(1, 2), keepdims=True), h.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(outs[2].numpy(), (h - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[3].numpy(), emb.weight.numpy()[idx], rtol=1e-6)
    nll = -_np_log_softmax(logits)[np.arange(5), labels]
    np.testing.assert_allclose(outs[4].numpy(), nll.mean(), rtol=1e-5)
    np.testing.assert_allclose(outs[5].numpy(), nll, rtol=1e-5)
    smooth = 0.9 * nll - 0.1 * _np_log_softmax(logits).mean(-1)
    np.testing.assert_allclose(outs[6].numpy(), smooth.sum(), rtol=1e-5)


def test_embedding_gradient_is_a_scatter_add() -> None:
    emb = nn.Embedding(5, 2)
    idx = np.array([3, 1, 3, 3], np.int32)
    g = np.arange(8, dtype=np.float32).reshape(4, 2)
    (emb(Tensor(idx)) * Tensor(g)).sum().backward()
    want = np.zeros((5, 2), np.float32)
    np.add.at(want, idx, g)
    np.testing.assert_array_equal(emb.weight.grad.numpy(), want)


def test_dropout() -> None:
    x = Tensor(np.ones((64, 64), np.float32))
    d = nn.Dropout(0.25, seed=7)
    first, second = d(x).numpy(), d(x).numpy()
    for out in (first, second):
        assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
        assert abs((out == 0).mean() - 0.25) < 0.03
    assert not np.array_equal(first, second), "two calls drew the same mask"
    np.testing.assert_array_equal(nn.Dropout(0.25, seed=7)(x).numpy(), first)  # seeded: reproducible
    assert int(d.counter.item()) == 2 and "counter" in d.state_dict()
    d.eval()
    assert d(x) is x
    with pytest.raises(ValueError, match="probability"):
        nn.Dropout(1.0)


class _Net(nn.Module):
    def __init__(self):
        self.body = [nn.Linear(3, 4), nn.Dropout(0.1)]
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(4, 2, bias=False), nn.Tanh())

    def forward(self, x):
        for layer in self.body:
            x = layer(x)
        return self.head(x)


def test_parameters_state_dict_and_modes() -> None:
    net = _Net()
    names = list(net.state_dict())
    assert names == ["body.0.weight", "body.0.bias", "body.1.counter", "head.layers.1.weight"]
    assert net.parameters() == [net.body[0].weight, net.body[0].bias, net.head.layers[1].weight]
    net.eval()
    assert not net.body[1].training and not net.head.layers[0].training
    net.train()
    assert net.body[1].training
    assert net(Tensor(np.ones((2, 3), np.float32))).shape == (2, 2)
