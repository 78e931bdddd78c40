"""Normalisation layers as torch defines them: LayerNorm, BatchNorm1d/2d, GroupNorm, RMSNorm.

Batch norm in training mode normalises by the batch's mean and biased variance over every axis but the
channels (axis 1) and, with `track_running_stats`, updates its buffers in place with `assign` (so a JIT
replay updates them too): running_mean and running_var (the batch's *unbiased* variance) move by `momentum`
towards the batch's, or with momentum=None towards the cumulative average (factor 1 / num_batches_tracked);
num_batches_tracked (int64, 0-d) counts the batches. In eval mode the running statistics normalise; without
running statistics the batch's are used in both modes (torch's rules).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.frontend.composite import as_node
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.nn.module import Module, param
from tolk_core.nn.running_norm import RunningNorm


class LayerNorm(Module):
    """Normalise over the last len(shape) axes, then scale and shift (elementwise_affine and bias as torch)."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device: str | None = None):
        self.shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = param(np.ones(self.shape), device) if elementwise_affine else None
        self.bias = param(np.zeros(self.shape), device) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = F.layernorm(x, tuple(range(-len(self.shape), 0)), self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y + self.bias if self.bias is not None else y


class _BatchNorm(RunningNorm):
    """torch's _BatchNorm: see the module docstring. `dims`: the input ranks the subclass accepts."""

    dims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: str | None = None):
        self._norm_state(num_features, eps, affine, track_running_stats, device)
        self.momentum = momentum
        if track_running_stats:
            self.register_buffer("num_batches_tracked", Tensor(np.zeros((), np.int64), device=device))
        else:
            self.num_batches_tracked = None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.dims or x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}({self.num_features}) needs a {' or '.join(map(str, self.dims))}"
                             f"-d input with {self.num_features} channels on axis 1, got shape {x.shape}")
        axes = (0,) + tuple(range(2, x.ndim))
        shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        use_batch = self.training or self.running_mean is None
        if use_batch:
            if self.training and self.running_mean is not None:
                mean, var = _batch_stats(x, axes)  # (the node's expansion builds the same nodes)
                self._update_running(mean.reshape(self.num_features), var.reshape(self.num_features),
                                     x.numel() // self.num_features)
            affine = () if self.weight is None or self.bias is None else \
                (self.weight.reshape(shape), self.bias.reshape(shape))
            if (y := as_node("batch_norm", _batch_norm, (x, *affine), (axes, self.eps))) is not None:
                return y
            mean, var = _batch_stats(x, axes)
        else:
            assert self.running_var is not None
            mean, var = self.running_mean.reshape(shape), self.running_var.reshape(shape)
        y = (x - mean) * (var + self.eps).rsqrt()
        if self.weight is not None and self.bias is not None:
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y

    def _update_running(self, mean: Tensor, var: Tensor, n: int) -> None:
        """Move the running statistics towards the batch's (stored in place, outside the gradient graph)."""
        assert self.running_mean is not None and self.running_var is not None and self.num_batches_tracked is not None
        mean, var = mean.detach(), var.detach()
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        if self.momentum is None:  # cumulative average: factor 1 / batches seen, read on the device
            factor: Tensor | float = self.num_batches_tracked.cast(dtypes.float32).reciprocal()
        else:
            factor = self.momentum
        unbiased = var * (n / max(n - 1, 1))
        self.running_mean.assign(self.running_mean * (1 - factor) + mean * factor)
        self.running_var.assign(self.running_var * (1 - factor) + unbiased * factor)


def _batch_stats(x: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """The batch's mean and biased variance over `axes`, kept."""
    mean = x.mean(axes, keepdim=True)
    return mean, (x - mean).square().mean(axes, keepdim=True)


def _batch_norm(x: Tensor, *rest: Any) -> Tensor:
    """Batch norm by the batch's statistics, the formula of a batch_norm node: `rest` is (weight, bias)
    reshaped to broadcast, or nothing, then axes and eps."""
    *affine, axes, eps = rest
    mean, var = _batch_stats(x, axes)
    y = (x - mean) * (var + eps).rsqrt()
    return y * affine[0] + affine[1] if affine else y


class BatchNorm1d(_BatchNorm):
    """torch's BatchNorm1d over (N, C) or (N, C, L)."""

    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """torch's BatchNorm2d over (N, C, H, W)."""

    dims = (4,)


class GroupNorm(Module):
    """torch's GroupNorm: per-sample statistics over groups of channels; per-channel weight (1) and bias (0)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: str | None = None):
        if num_channels % num_groups:
            raise ArgumentError(f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = param(np.ones(num_channels), device) if affine else None
        self.bias = param(np.zeros(num_channels), device) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    """torch's RMSNorm: x / sqrt(mean(x^2) + eps) over the last len(shape) axes, times weight (1)."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float | None = None,
                 elementwise_affine: bool = True, device: str | None = None):
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = param(np.ones(self.normalized_shape), device) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
