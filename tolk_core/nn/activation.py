"""Activation functions and layers with torch's names and arguments: the functional forms (re-exported by
nn.functional) and the modules ELU, SELU, CELU, LeakyReLU, Hardsigmoid, Hardswish, Hardtanh, ReLU6, Softplus,
Softsign, Mish and PReLU (re-exported by nn).

The functions are Tensor's own methods (tolk_core/frontend/activations.py, whose docstring gives their
numerics); the modules hold the arguments, and PReLU its learnable slopes (`weight`, `num_parameters` of them,
initialised to `init`).
"""
from __future__ import annotations

import numpy as np

from tolk_core.frontend.tensor import Tensor
from tolk_core.nn.module import Module, param


def elu(x: Tensor, alpha: float = 1.0) -> Tensor: return x.elu(alpha)
def selu(x: Tensor) -> Tensor: return x.selu()
def celu(x: Tensor, alpha: float = 1.0) -> Tensor: return x.celu(alpha)
def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor: return x.leaky_relu(negative_slope)
def hardsigmoid(x: Tensor) -> Tensor: return x.hardsigmoid()
def hardswish(x: Tensor) -> Tensor: return x.hardswish()
def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor: return x.hardtanh(min_val, max_val)
def relu6(x: Tensor) -> Tensor: return x.relu6()
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor: return x.softplus(beta, threshold)
def softsign(x: Tensor) -> Tensor: return x.softsign()
def mish(x: Tensor) -> Tensor: return x.mish()
def prelu(x: Tensor, weight: Tensor) -> Tensor: return x.prelu(weight)


class ELU(Module):
    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return x.elu(self.alpha)


class SELU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.selu()


class CELU(Module):
    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return x.celu(self.alpha)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01):
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return x.leaky_relu(self.negative_slope)


class Hardsigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.hardsigmoid()


class Hardswish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.hardswish()


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0):
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x: Tensor) -> Tensor:
        return x.hardtanh(self.min_val, self.max_val)


class ReLU6(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.relu6()


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return x.softplus(self.beta, self.threshold)


class Softsign(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.softsign()


class Mish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.mish()


class PReLU(Module):
    """x for x > 0, weight * x otherwise, with `num_parameters` learnable slopes (1, or one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: str | None = None):
        self.num_parameters = num_parameters
        self.weight = param(np.full((num_parameters,), init), device)

    def forward(self, x: Tensor) -> Tensor:
        return x.prelu(self.weight)
