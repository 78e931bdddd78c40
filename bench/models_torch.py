"""The model workloads of bench.models in torch, module for module as bench.models_tolk writes them (the same
attribute names, so the two state dicts have the same keys). Each `build_<name>(cfg, variant)` returns a Job
like bench.models_tolk's; `variant` picks between ways torch offers to write the same workload (attention:
"written" matmul/softmax or "sdpa", torch's fused scaled_dot_product_attention)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


class Job(NamedTuple):
    model: Any
    step: Callable[..., list[torch.Tensor]]
    probe: Callable[[], dict[str, torch.Tensor]]


class DigitsCNN(nn.Module):
    def __init__(self, c1: int, c2: int):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c1, track_running_stats=False)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c2, track_running_stats=False)
        self.fc = nn.Linear(c2 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.where(mask, q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).permute(0, 2, 1, 3).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, layers: int, heads: int, d: int, ctx: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(ctx, d))
        self.blocks = nn.ModuleList(GPTBlock(d, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos
        mask = torch.ones(idx.shape[1], idx.shape[1], dtype=torch.bool).tril()
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


class BasicBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)


class ResNetStack(nn.Module):
    def __init__(self, cin: int, c: int, blocks: int):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(cin, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.blocks = nn.Sequential(*(BasicBlock(c) for _ in range(blocks)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(F.relu(self.bn(self.stem(x))))


class GRUUnrolled(nn.Module):
    def __init__(self, inp: int, hidden: int):
        super().__init__()
        self.cell = nn.GRUCell(inp, hidden)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(xs.shape[1], self.cell.hidden_size)
        for t in range(xs.shape[0]):
            h = self.cell(xs[t], h)
        return h


def _params(model: nn.Module) -> Callable[[], dict[str, torch.Tensor]]:
    """The parameters and (as "NAME:grad") the gradients the step computed for them."""
    def probe() -> dict[str, torch.Tensor]:
        params = dict(model.named_parameters())
        return {k: v.detach() for k, v in params.items()} | \
            {f"{k}:grad": v.grad for k, v in params.items() if v.grad is not None}
    return probe


def _train_job(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor]) -> Job:
    def step(*inputs: torch.Tensor) -> list[torch.Tensor]:
        opt.zero_grad()
        loss = loss_fn(*inputs)
        loss.backward()
        opt.step()
        return [loss.detach()]
    return Job(model, step, _params(model))


def _forward_job(model: nn.Module) -> Job:
    model.eval()

    def step(*inputs: torch.Tensor) -> list[torch.Tensor]:
        with torch.no_grad():
            return [model(*inputs)]
    return Job(model, step, dict)


def build_cnn(cfg: dict[str, int], variant: str) -> Job:
    model = DigitsCNN(cfg["c1"], cfg["c2"])
    return _train_job(model, torch.optim.Adam(model.parameters(), lr=1e-3),
                      lambda x, y: F.cross_entropy(model(x), y.long()))


def build_gpt(cfg: dict[str, int], variant: str) -> Job:
    model = GPT(cfg["vocab"], cfg["layers"], cfg["heads"], cfg["d"], cfg["ctx"])

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x.long()).reshape(-1, cfg["vocab"]), y.long().reshape(-1))
    return _train_job(model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01), loss)


def build_resnet(cfg: dict[str, int], variant: str) -> Job:
    return _forward_job(ResNetStack(cfg["cin"], cfg["c"], cfg["blocks"]))


def attention_written(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    t = q.shape[-2]
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    return torch.where(torch.ones(t, t, dtype=torch.bool).tril(), s, float("-inf")).softmax(-1) @ v


def build_attention(cfg: dict[str, int], variant: str) -> Job:
    fn = attention_written if variant == "written" else \
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        fn(*leaves).sum().backward()
        return [t.grad for t in leaves]
    return Job(None, step, dict)


def build_gru(cfg: dict[str, int], variant: str) -> Job:
    return _forward_job(GRUUnrolled(cfg["inp"], cfg["hidden"]))


def build_gru_train(cfg: dict[str, int], variant: str) -> Job:
    model = GRUUnrolled(cfg["inp"], cfg["hidden"])
    return _train_job(model, torch.optim.SGD(model.parameters(), lr=0.1),
                      lambda x, y: (model(x) - y).square().mean())


BUILDERS = {"cnn": build_cnn, "gpt": build_gpt, "resnet": build_resnet, "attention": build_attention,
            "gru": build_gru, "gru_train": build_gru_train}
