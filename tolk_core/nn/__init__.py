"""Neural-network layers (torch's names, arguments, defaults and train/eval behaviour), optimizers and
learning-rate schedules (`nn.optim`, `nn.schedule`), gradient clipping (`nn.utils`) and state dicts (`nn.state`).

Layers are plain objects holding Tensors; `Module` (nn/module.py) adds train/eval mode, parameters and buffers,
state dicts and `to(device)`. Parameters are created from numpy draws of nn's own seeded generator
(`manual_seed`), uploaded once, and marked `requires_grad`, so initialisation is reproducible and identical on
every device. Layers by subject: norm.py (LayerNorm, BatchNorm, GroupNorm, RMSNorm), pool.py, attention.py,
rnn.py; the basic layers are here.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tolk_core.errors import ArgumentError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.nn import schedule, utils
from tolk_core.nn.activation import (
    CELU,
    ELU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    Mish,
    PReLU,
    ReLU6,
    Softplus,
    Softsign,
)
from tolk_core.nn.attention import MultiheadAttention
from tolk_core.nn.conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from tolk_core.nn.instance_norm import InstanceNorm1d, InstanceNorm2d
from tolk_core.nn.module import RNG, Module, manual_seed, param, uniform_init
from tolk_core.nn.norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from tolk_core.nn.pool import AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d
from tolk_core.nn.rnn import GRUCell, LSTMCell
from tolk_core.nn.state import get_parameters, get_state_dict, load_state_dict

__all__ = ["Module", "Linear", "Conv1d", "Conv2d", "Conv3d", "LayerNorm", "BatchNorm1d", "BatchNorm2d", "GroupNorm",
           "RMSNorm", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "MultiheadAttention", "GRUCell",
           "LSTMCell", "Embedding", "Dropout", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Sequential", "F",
           "schedule", "utils", "manual_seed", "get_parameters", "get_state_dict", "load_state_dict"]
__all__ += ["ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
__all__ += ["ELU", "SELU", "CELU", "LeakyReLU", "Hardsigmoid", "Hardswish", "Hardtanh", "ReLU6", "Softplus", "Softsign",
            "Mish", "PReLU", "InstanceNorm1d", "InstanceNorm2d"]

_rng = RNG  # the initialisation generator's slot, for callers that draw from it (the kernel corpus)


class Linear(Module):
    """y = x @ weight.T + bias, weight (out, in); torch's initialisation U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None):
        bound = 1 / math.sqrt(in_features)
        self.weight = param(uniform_init(bound, out_features, in_features), device)
        self.bias = param(uniform_init(bound, out_features), device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y


class _ConvNd(Module):
    """torch's Conv{nd}d and its initialisation U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C_in/groups *
    prod(kernel)."""

    nd = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: str | None = None):
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ArgumentError(f"Conv{self.nd}d(padding_mode={padding_mode!r}): padding_mode must be 'zeros', "
                                "'reflect', 'replicate' or 'circular'")
        kernel = (kernel_size,) * self.nd if isinstance(kernel_size, int) else tuple(kernel_size)
        bound = 1 / math.sqrt(in_channels // groups * math.prod(kernel))
        self.weight = param(uniform_init(bound, out_channels, in_channels // groups, *kernel), device)
        self.bias = param(uniform_init(bound, out_channels), device) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.padding_mode = padding_mode

    def forward(self, x: Tensor) -> Tensor:
        conv = (F.conv1d, F.conv2d, F.conv3d)[self.nd - 1]
        if self.padding_mode == "zeros":
            return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        # torch's other modes: the input padded by that mode first, then a convolution without padding
        p = self.padding
        if isinstance(p, str):
            flat = F.named_padding(p, self.nd, tuple(self.weight.shape[2:]), self.stride, self.dilation)
        else:
            flat = tuple(q for v in reversed((p,) * self.nd if isinstance(p, int) else tuple(p)) for q in (v, v))
        return conv(F.pad(x, flat, self.padding_mode), self.weight, self.bias, self.stride, 0, self.dilation,
                    self.groups)


class Conv1d(_ConvNd):
    """torch's Conv1d over (N, C, L) or (C, L)."""

    nd = 1


class Conv2d(_ConvNd):
    """torch's Conv2d over (N, C, H, W) or (C, H, W)."""

    nd = 2


class Conv3d(_ConvNd):
    """torch's Conv3d over (N, C, D, H, W) or (C, D, H, W)."""

    nd = 3


class Embedding(Module):
    """Rows of `weight` (num, dim) picked by integer indices; weight drawn from N(0, 1) as torch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device: str | None = None):
        self.weight = param(RNG[0].standard_normal((num_embeddings, embedding_dim)), device)

    def forward(self, idx: Tensor) -> Tensor:
        # a one-hot matmul, which rangeify turns into a load of each index's row (schedule/gather.py); its
        # gradient (a scatter-add into the rows) comes from the matmul's rule and stays a one-hot product
        return F.one_hot(idx, self.weight.shape[0]) @ self.weight


class Dropout(Module):
    """Zero each element with probability p and scale the rest by 1/(1-p) in training mode; identity in eval.

    Masks are hashes of (element, seed, draw counter); the counter lives on the device and is advanced with
    `assign` on every call, so masks are reproducible from the seed, differ per call, and a JIT replay draws
    fresh ones. The counter is part of the state dict, so resumed training continues the same mask stream."""

    def __init__(self, p: float = 0.5, seed: int | None = None, device: str | None = None):
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.seed = int(RNG[0].integers(0, 2 ** 32)) if seed is None else seed
        self.counter = Tensor(np.zeros(1, np.uint32), device=device)
        self._index: dict[tuple[int, ...], Tensor] = {}

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        if self.counter.device != x.device:
            self.counter = self.counter.to(x.device)
        if (index := self._index.get(x.shape)) is None or index.device != x.device:
            index = self._index[x.shape] = Tensor.arange(math.prod(x.shape), dtype=dtypes.uint32,
                                                         device=x.device).reshape(x.shape)
        self.counter.assign(self.counter + 1)
        keep = F.uniform_bits(index, self.seed, self.counter) >= self.p
        return keep.where(x / (1 - self.p), 0.0)


class _Activation(Module):
    fn: Any = None

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


class ReLU(_Activation):
    fn = staticmethod(F.relu)


class GELU(Module):
    """torch's GELU: exact by erf (`approximate="none"`) or the tanh form."""

    def __init__(self, approximate: str = "none"):
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class SiLU(_Activation):
    fn = staticmethod(F.silu)


class Tanh(_Activation):
    fn = staticmethod(F.tanh)


class Sigmoid(_Activation):
    fn = staticmethod(F.sigmoid)


class Sequential(Module):
    """Apply layers (modules or functions of a Tensor) in order."""

    def __init__(self, *layers: Any):
        self.layers = list(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
