"""The pretrained models' torch twins, the references of tests/models and bench/pretrained.py.

- `TorchBert`: BERT (the encoder of sentence-transformers' all-MiniLM-L6-v2) written with torch ops over the
  weights of a `model.safetensors` file, with the same mean pooling and L2 normalisation. It is written from the
  BERT architecture (post-norm layers, exact-erf GELU, additive attention mask), independently of
  tolk_core/nn/bert.py, so agreement checks Tolk's numbers, not a shared transcription.
- `resnet50(seed)`: torchvision's resnet50 architecture (bottleneck blocks 3-4-6-3, stride on the 3x3 conv)
  written here, since the torchvision wheel on PyPI is built for CUDA torch and does not import with torch's
  CPU build. Convolutions are drawn as torchvision draws them (kaiming normal, fan_out) from
  `torch.manual_seed(seed)`; batch norm's running statistics are then set from one seeded batch in training
  mode (cumulative average), so every layer's activations have a realistic scale instead of growing through 16
  residual blocks of identity normalisation.
"""
from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from torch import nn


class TorchBert(nn.Module):
    """BERT's encoder over `weights` (a name -> tensor dict in the Hugging Face layout); forward(input_ids,
    attention_mask) -> (batch, hidden) mean-pooled, L2-normalised sentence embeddings."""

    def __init__(self, config: dict, weights: dict[str, torch.Tensor]):
        super().__init__()
        self.heads, self.layers, self.eps = config["num_attention_heads"], config["num_hidden_layers"], \
            config["layer_norm_eps"]
        self.w = {k: v.float() for k, v in weights.items() if v.is_floating_point()}

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def _lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def _layer(self, x: torch.Tensor, bias: torch.Tensor, p: str) -> torch.Tensor:
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = (split(self._lin(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + bias
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = self._ln(self._lin(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = F.gelu(self._lin(x, f"{p}.intermediate.dense"))
        return self._ln(self._lin(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        s = input_ids.shape[1]
        x = self.w["embeddings.word_embeddings.weight"][input_ids] + \
            self.w["embeddings.position_embeddings.weight"][:s] + self.w["embeddings.token_type_embeddings.weight"][0]
        x = self._ln(x, "embeddings.LayerNorm")
        m = attention_mask.to(x.dtype)
        bias = (1.0 - m)[:, None, None, :] * torch.finfo(x.dtype).min  # padded keys get no weight
        for i in range(self.layers):
            x = self._layer(x, bias, f"encoder.layer.{i}")
        pooled = (x * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)


def load_torch_bert(model_dir: str | os.PathLike) -> TorchBert:
    """TorchBert over `model_dir`'s config.json and model.safetensors, in eval mode."""
    from safetensors.torch import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    return TorchBert(config, load_file(os.path.join(model_dir, "model.safetensors"))).eval()


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4), each with batch norm; relu after the sum."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        stages, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layers = []
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(2048, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(seed: int = 0, calibrate: tuple[int, ...] = (8, 3, 64, 64)) -> ResNet50:
    """ResNet50 with seeded weights (see the module docstring), in eval mode."""
    torch.manual_seed(seed)
    model = ResNet50()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.1, 0.1)
            m.momentum = None  # a cumulative average: after one batch, the running statistics are that batch's
    model.train()
    with torch.no_grad():
        model(torch.randn(*calibrate))
    return model.eval()
