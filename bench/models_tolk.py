"""The model workloads of bench.models in Tolk's public API only: `tolk_core.Tensor`, `tolk_core.nn` and
`tolk_core.nn.optim`. What nn does not have (a causal mask) is written here from Tensor ops, as a user would.

Each `build_<name>(cfg, device)` returns a Job: the model (whose state dict bench.models fills with seeded
numbers), the step (a function of the input tensors returning the tensors it computes: the loss of a train
step, the output of a forward) and `probe`, what to compare after the first step besides its outputs (the
parameters of a train step, and their gradients)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tolk_core import Tensor, nn, no_grad
from tolk_core.nn import F, optim


class Job(NamedTuple):
    model: Any
    step: Callable[..., list[Tensor]]
    probe: Callable[[], dict[str, Tensor]]


# ---------------------------------------------------------------- a layer nn lacks
def causal_mask(t: int, device: str) -> Tensor:
    """(t, t) booleans, True where key position j <= query position i."""
    i = Tensor.arange(t, device=device)
    return i.reshape(t, 1) >= i.reshape(1, t)


# ---------------------------------------------------------------- models
class DigitsCNN(nn.Module):
    def __init__(self, c1: int, c2: int, device: str):
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, bias=False, device=device)
        self.bn1 = nn.BatchNorm2d(c1, track_running_stats=False, device=device)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, bias=False, device=device)
        self.bn2 = nn.BatchNorm2d(c2, track_running_stats=False, device=device)
        self.fc = nn.Linear(c2 * 4, 10, device=device)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.bn1(self.conv1(x)).relu(), 2)
        x = F.max_pool2d(self.bn2(self.conv2(x)).relu(), 2)
        return self.fc(x.reshape(x.shape[0], -1))


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int, device: str):
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d, device=device), nn.LayerNorm(d, device=device)
        self.qkv = nn.Linear(d, 3 * d, bias=False, device=device)  # a key bias has no gradient (softmax)
        self.proj = nn.Linear(d, d, device=device)
        self.fc, self.out = nn.Linear(d, 4 * d, device=device), nn.Linear(4 * d, d, device=device)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = mask.where(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).permute(0, 2, 1, 3).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, layers: int, heads: int, d: int, ctx: int, device: str):
        self.tok = nn.Embedding(vocab, d, device=device)
        self.pos = Tensor(np.zeros((ctx, d), np.float32), device=device).requires_grad_()
        self.blocks = [GPTBlock(d, heads, device) for _ in range(layers)]
        self.ln_f, self.head = nn.LayerNorm(d, device=device), nn.Linear(d, vocab, device=device)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.tok(idx) + self.pos
        mask = causal_mask(idx.shape[1], idx.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


class BasicBlock(nn.Module):
    def __init__(self, c: int, device: str):
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False, device=device)
        self.bn1 = nn.BatchNorm2d(c, device=device)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False, device=device)
        self.bn2 = nn.BatchNorm2d(c, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return (self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())) + x).relu()


class ResNetStack(nn.Module):
    def __init__(self, cin: int, c: int, blocks: int, device: str):
        self.stem = nn.Conv2d(cin, c, 3, padding=1, bias=False, device=device)
        self.bn = nn.BatchNorm2d(c, device=device)
        self.blocks = [BasicBlock(c, device) for _ in range(blocks)]

    def forward(self, x: Tensor) -> Tensor:
        x = self.bn(self.stem(x)).relu()
        for block in self.blocks:
            x = block(x)
        return x


class GRUUnrolled(nn.Module):
    """A GRU cell applied along the first axis of (steps, batch, inp) from a zero state; the last state."""

    def __init__(self, inp: int, hidden: int, device: str):
        self.cell = nn.GRUCell(inp, hidden, device=device)

    def forward(self, xs: Tensor) -> Tensor:
        h = Tensor.zeros(xs.shape[1], self.cell.hidden_size, device=xs.device)
        for t in range(xs.shape[0]):
            h = self.cell(xs[t], h)
        return h


# ---------------------------------------------------------------- jobs
def _params(model: nn.Module) -> Callable[[], dict[str, Tensor]]:
    """The parameters and (as "NAME:grad") the gradients the step computed for them."""
    def probe() -> dict[str, Tensor]:
        params = {k: v for k, v in model.state_dict().items() if v.requires_grad}
        return params | {f"{k}:grad": v.grad for k, v in params.items() if v.grad is not None}
    return probe


def _train_job(model: nn.Module, opt: optim.Optimizer, loss_fn: Callable[..., Tensor]) -> Job:
    def step(*inputs: Tensor) -> list[Tensor]:
        opt.zero_grad()
        loss = loss_fn(*inputs)
        loss.backward()
        opt.step(loss)  # the loss computed with the gradients, before the parameters change
        return [loss]
    return Job(model, step, _params(model))


def _forward_job(model: nn.Module) -> Job:
    """Inference as a user writes it (and as the torch side does): eval mode, gradients off."""
    model.eval()

    def step(*inputs: Tensor) -> list[Tensor]:
        with no_grad():
            return [model(*inputs)]
    return Job(model, step, dict)


def build_cnn(cfg: dict[str, int], device: str) -> Job:
    model = DigitsCNN(cfg["c1"], cfg["c2"], device)
    return _train_job(model, optim.Adam(model.parameters(), lr=1e-3), lambda x, y: F.cross_entropy(model(x), y))


def build_gpt(cfg: dict[str, int], device: str) -> Job:
    model = GPT(cfg["vocab"], cfg["layers"], cfg["heads"], cfg["d"], cfg["ctx"], device)

    def loss(x: Tensor, y: Tensor) -> Tensor:
        return F.cross_entropy(model(x).reshape(-1, cfg["vocab"]), y.reshape(-1))
    return _train_job(model, optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01), loss)


def build_resnet(cfg: dict[str, int], device: str) -> Job:
    return _forward_job(ResNetStack(cfg["cin"], cfg["c"], cfg["blocks"], device))


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal softmax(q k^T / sqrt(d)) v over (batch, heads, t, d)."""
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    return causal_mask(q.shape[-2], q.device).where(s, float("-inf")).softmax(-1) @ v


def build_attention(cfg: dict[str, int], device: str) -> Job:
    """Forward and backward of attention(q, k, v).sum(): the step returns the gradients of q, k and v (leaf
    tensors of the data made here, so the step takes no inputs)."""
    del cfg, device

    def step(q: Tensor, k: Tensor, v: Tensor) -> list[Tensor]:
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        attention(*leaves).sum().backward()
        return [t.grad for t in leaves]
    return Job(None, step, dict)


def build_gru(cfg: dict[str, int], device: str) -> Job:
    return _forward_job(GRUUnrolled(cfg["inp"], cfg["hidden"], device))


def build_gru_train(cfg: dict[str, int], device: str) -> Job:
    model = GRUUnrolled(cfg["inp"], cfg["hidden"], device)
    return _train_job(model, optim.SGD(model.parameters(), lr=0.1), lambda x, y: (model(x) - y).square().mean())


BUILDERS = {"cnn": build_cnn, "gpt": build_gpt, "resnet": build_resnet, "attention": build_attention,
            "gru": build_gru, "gru_train": build_gru_train}
