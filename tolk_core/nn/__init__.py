"""Neural-network layers, optimizers (`nn.optim`) and state dicts (`nn.state`).

Layers are plain objects holding Tensors; `Module` adds train/eval mode, `parameters()` and state dicts.
Parameters are created from numpy draws of nn's own seeded generator (`manual_seed`), uploaded once, and
marked `requires_grad`, so initialisation is reproducible and identical on every device.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.nn.state import get_parameters, get_state_dict, load_state_dict

__all__ = ["Module", "Linear", "Conv2d", "LayerNorm", "Embedding", "Dropout", "ReLU", "GELU", "SiLU", "Tanh",
           "Sigmoid", "Sequential", "F", "manual_seed", "get_parameters", "get_state_dict", "load_state_dict"]

_rng = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    """Seed the generator that initialises parameters (and the default seeds of Dropout layers)."""
    _rng[0] = np.random.default_rng(seed)


def _param(arr: np.ndarray, device: str | None) -> Tensor:
    return Tensor(arr.astype(np.float32), device=device).requires_grad_()


def _uniform(bound: float, *shape: int) -> np.ndarray:
    return _rng[0].uniform(-bound, bound, shape)


class Module:
    """Base of the layers: `__call__` runs `forward`; `train()`/`eval()` set `training` on this module and
    every module reachable from its attributes."""

    training: bool = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def train(self, mode: bool = True) -> Module:
        for m in _modules(self):
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def parameters(self) -> list[Tensor]:
        return get_parameters(self)

    def state_dict(self) -> dict[str, Tensor]:
        return get_state_dict(self)

    def load_state_dict(self, state: dict[str, Tensor], strict: bool = True) -> None:
        load_state_dict(self, state, strict)


def _modules(root: Module) -> list[Module]:
    out, seen, stack = [], set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Module):
            out.append(obj)
            stack.extend(vars(obj).values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
    return out


class Linear(Module):
    """y = x @ weight.T + bias, weight (out, in); torch's initialisation U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None):
        bound = 1 / math.sqrt(in_features)
        self.weight = _param(_uniform(bound, out_features, in_features), device)
        self.bias = _param(_uniform(bound, out_features), device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y


class Conv2d(Module):
    """2-D convolution (torch's Conv2d and its initialisation)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True, device: str | None = None):
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        bound = 1 / math.sqrt(in_channels // groups * kh * kw)
        self.weight = _param(_uniform(bound, out_channels, in_channels // groups, kh, kw), device)
        self.bias = _param(_uniform(bound, out_channels), device) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class LayerNorm(Module):
    """Normalise over the last len(shape) axes, then scale and shift (elementwise_affine as torch)."""

    def __init__(self, shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True,
                 device: str | None = None):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = eps
        self.weight = _param(np.ones(self.shape), device) if elementwise_affine else None
        self.bias = _param(np.zeros(self.shape), device) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        y = F.layernorm(x, tuple(range(-len(self.shape), 0)), self.eps)
        return y * self.weight + self.bias if self.weight is not None else y


class Embedding(Module):
    """Rows of `weight` (num, dim) picked by integer indices; weight drawn from N(0, 1) as torch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device: str | None = None):
        self.weight = _param(_rng[0].standard_normal((num_embeddings, embedding_dim)), device)

    def forward(self, idx: Tensor) -> Tensor:
        # a one-hot matmul: its gradient (a scatter-add into the rows) comes from the matmul's rule
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
        self.seed = int(_rng[0].integers(0, 2 ** 32)) if seed is None else seed
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


class GELU(_Activation):
    fn = staticmethod(F.gelu)


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
