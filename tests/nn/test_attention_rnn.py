"""Attention and recurrent cells against torch 2.13's: scaled_dot_product_attention (boolean masks True =
attend, float masks added, is_causal, scale), MultiheadAttention (batch_first or not, unbatched, boolean and
float masks with torch's True = not allowed, key padding, need_weights per head or averaged, torch's state dict
names), GRUCell and LSTMCell (torch's gate order and weight layout: torch's weights are loaded by name).
Values and gradients (tests/nn/torch_check.py)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.nn.torch_check import check, copy_params
from tolk_core import nn
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import F

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")
tf = torch.nn.functional


def _n(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("case", ["plain", "bool_mask", "float_mask", "causal", "scale"])
def test_sdpa(device, case) -> None:
    rng = np.random.default_rng(0)
    q, k, v = _n(rng, 2, 3, 5, 4), _n(rng, 2, 3, 6, 4), _n(rng, 2, 3, 6, 3)
    kw: dict = {}
    mask = None
    if case == "bool_mask":
        mask = rng.random((5, 6)) > 0.3
        mask[:, 0] = True  # every query attends somewhere
    elif case == "float_mask":
        mask = _n(rng, 2, 1, 5, 6)
    elif case == "causal":
        kw["is_causal"] = True
    elif case == "scale":
        kw["scale"] = 0.7

    def ours(q, k, v):
        m = None if mask is None else Tensor(mask, device=device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)

    def theirs(q, k, v):
        return tf.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else torch.tensor(mask), **kw)
    check(device, ours, theirs, [q, k, v])


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "bool", "float_padding", "causal_per_head"])
def test_multihead_attention(device, batch_first, masks) -> None:
    torch.manual_seed(0)
    e, h, n, lq, s = 8, 2, 3, 4, 5
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=batch_first)
    with torch.no_grad():  # non-zero biases, so their gradients are tested
        theirs.in_proj_bias.normal_()
        theirs.out_proj.bias.normal_()
    ours = nn.MultiheadAttention(e, h, batch_first=batch_first, device=device)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    params = copy_params(ours, theirs)
    rng = np.random.default_rng(1)
    shape = (n, lq, e) if batch_first else (lq, n, e)
    kshape = (n, s, e) if batch_first else (s, n, e)
    q, kv = _n(rng, *shape), _n(rng, *kshape)
    attn = pad = None
    kw: dict = {}
    if masks == "bool":
        attn = rng.random((lq, s)) > 0.7
        attn[:, 0] = False
    elif masks == "float_padding":
        attn = _n(rng, lq, s)
        pad = np.zeros((n, s), bool)
        pad[0, 3:] = True
    elif masks == "causal_per_head":
        s = lq
        kv = kv[:lq] if not batch_first else kv[:, :lq]
        attn = np.triu(np.ones((n * h, lq, s), bool), 1)
        kw["average_attn_weights"] = False

    def t(a, dev):
        return None if a is None else (Tensor(a, device=device) if dev else torch.tensor(a))
    check(device, lambda x, y: ours(x, y, y, key_padding_mask=t(pad, True), attn_mask=t(attn, True), **kw),
          lambda x, y: theirs(x, y, y, key_padding_mask=t(pad, False), attn_mask=t(attn, False), **kw),
          [q, kv], params, what=masks)


def test_multihead_attention_unbatched_without_weights(device) -> None:
    torch.manual_seed(1)
    theirs, ours = torch.nn.MultiheadAttention(6, 3), nn.MultiheadAttention(6, 3, device=device)
    params = copy_params(ours, theirs)
    x = _n(np.random.default_rng(2), 4, 6)
    check(device, lambda x: ours(x, x, x, need_weights=False)[0], lambda x: theirs(x, x, x, need_weights=False)[0],
          [x], params)
    assert ours(Tensor(x, device=device), Tensor(x, device=device), Tensor(x, device=device),
                need_weights=False)[1] is None


@pytest.mark.parametrize("batched", [True, False])
def test_gru_cell(device, batched) -> None:
    torch.manual_seed(2)
    theirs, ours = torch.nn.GRUCell(5, 4), nn.GRUCell(5, 4, device=device)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    params = copy_params(ours, theirs)
    rng = np.random.default_rng(3)
    x, h = (_n(rng, 3, 5), _n(rng, 3, 4)) if batched else (_n(rng, 5), _n(rng, 4))
    check(device, ours, theirs, [x, h], params)


def test_gru_cell_zero_state(device) -> None:
    torch.manual_seed(3)
    theirs, ours = torch.nn.GRUCell(3, 2, bias=False), nn.GRUCell(3, 2, bias=False, device=device)
    params = copy_params(ours, theirs)
    check(device, ours, theirs, [_n(np.random.default_rng(4), 2, 3)], params)


@pytest.mark.parametrize("batched", [True, False])
def test_lstm_cell(device, batched) -> None:
    torch.manual_seed(4)
    theirs, ours = torch.nn.LSTMCell(5, 4), nn.LSTMCell(5, 4, device=device)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    params = copy_params(ours, theirs)
    rng = np.random.default_rng(5)
    shape = (3,) if batched else ()
    x, h, c = _n(rng, *shape, 5), _n(rng, *shape, 4), _n(rng, *shape, 4)
    check(device, lambda x, h, c: ours(x, (h, c)), lambda x, h, c: theirs(x, (h, c)), [x, h, c], params)
    # a sequence of steps with no initial state (zeros)
    xs = _n(rng, 4, 2, 5)

    def run(cell, xs):
        state = None
        for i in range(xs.shape[0]):
            state = cell(xs[i], state)
        return state
    check(device, lambda xs: run(ours, xs), lambda xs: run(theirs, xs), [xs], what="sequence")


@pytest.mark.parametrize("kind", ["kdim_vdim", "bias_kv", "zero_attn", "all"])
def test_multihead_attention_key_value_options(device, kind) -> None:
    """kdim/vdim (separate q/k/v projection weights), add_bias_kv and add_zero_attn, with a padding mask and
    an attention mask, so the appended key positions' mask columns are tested too."""
    torch.manual_seed(3)
    e, h, n, lq, s = 8, 2, 2, 3, 4
    kdim, vdim = (5, 6) if kind in ("kdim_vdim", "all") else (None, None)
    kw = dict(kdim=kdim, vdim=vdim, add_bias_kv=kind in ("bias_kv", "all"), add_zero_attn=kind in ("zero_attn", "all"))
    theirs = torch.nn.MultiheadAttention(e, h, batch_first=True, **kw)
    with torch.no_grad():
        theirs.in_proj_bias.normal_()
    ours = nn.MultiheadAttention(e, h, batch_first=True, device=device, **kw)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    params = copy_params(ours, theirs)
    rng = np.random.default_rng(4)
    q, k, v = _n(rng, n, lq, e), _n(rng, n, s, kdim or e), _n(rng, n, s, vdim or e)
    pad = np.zeros((n, s), bool)
    pad[1, 2:] = True
    attn = rng.random((lq, s)) > 0.8

    def t(a, ours_side):
        return Tensor(a, device=device) if ours_side else torch.tensor(a)
    check(device, lambda x, y, z: ours(x, y, z, key_padding_mask=t(pad, True), attn_mask=t(attn, True)),
          lambda x, y, z: theirs(x, y, z, key_padding_mask=t(pad, False), attn_mask=t(attn, False)),
          [q, k, v], params, what=kind)
