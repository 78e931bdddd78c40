"""Instance normalisation as torch defines it: `instance_norm` (re-exported by nn.functional) and the layers
InstanceNorm1d/2d (re-exported by nn).

Each (sample, channel) pair is normalised over its own spatial axes by its mean and biased variance. With
running statistics and `use_input_stats`, they move by `momentum` towards the batch average of the per-instance
mean and *unbiased* variance (torch computes instance norm as a batch norm over N*C channels and averages
the N copies of each channel's statistics), stored in place with `assign`; without `use_input_stats` the
running statistics normalise instead. The layers use the input's statistics in training mode or without
`track_running_stats` (default off, as torch), the running ones in eval mode; `affine` (default off) adds a
per-channel weight (1) and bias (0). An unbatched input (C, *spatial) is treated as a batch of one.
"""
from __future__ import annotations

from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn.running_norm import RunningNorm


def _channel(t: Tensor, ndim: int) -> Tensor:
    """A per-channel vector shaped to broadcast over (N, C, *spatial)."""
    return t.reshape((1, t.shape[0]) + (1,) * (ndim - 2))


def instance_norm(x: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """torch's F.instance_norm over (N, C, *spatial): see the module docstring."""
    if x.ndim < 3:
        raise ShapeError(f"instance_norm of {x.shape}: needs (N, C, spatial...) with at least one spatial axis")
    axes = tuple(range(2, x.ndim))
    if use_input_stats:
        xf = x._as_float()
        mean = xf.mean(axes, keepdim=True)
        var = (xf - mean).square().mean(axes, keepdim=True)
        if running_mean is not None or running_var is not None:
            n = x.numel() // (x.shape[0] * x.shape[1])
            if not isinstance(n, int):
                raise ShapeError(f"instance_norm of {x.shape}: running statistics need concrete spatial sizes")
            _update_running(running_mean, running_var, mean, var, n, momentum)
    else:
        if running_mean is None or running_var is None:
            raise ArgumentError("instance_norm with use_input_stats=False needs running_mean and running_var "
                                "(the statistics to normalise by)")
        xf, mean, var = x._as_float(), _channel(running_mean, x.ndim), _channel(running_var, x.ndim)
    y = (xf - mean) * (var + eps).rsqrt()
    if weight is not None:
        y = y * _channel(weight, x.ndim)
    return y + _channel(bias, x.ndim) if bias is not None else y


def _update_running(running_mean: Tensor | None, running_var: Tensor | None, mean: Tensor, var: Tensor, n: int,
                    momentum: float) -> None:
    """Move the running statistics towards the batch average of the per-instance ones (outside the gradient)."""
    mean, var = mean.detach(), var.detach()
    if running_mean is not None:
        batch_mean = mean.mean(0).reshape(running_mean.shape)
        running_mean.assign(running_mean * (1 - momentum) + batch_mean.cast(running_mean.dtype) * momentum)
    if running_var is not None:
        batch_var = (var * (n / max(n - 1, 1))).mean(0).reshape(running_var.shape)
        running_var.assign(running_var * (1 - momentum) + batch_var.cast(running_var.dtype) * momentum)


class _InstanceNorm(RunningNorm):
    """torch's _InstanceNorm: see the module docstring. `spatial`: the number of spatial axes."""

    spatial = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: str | None = None):
        self._norm_state(num_features, eps, affine, track_running_stats, device)
        self.momentum = momentum

    def forward(self, x: Tensor) -> Tensor:
        batched = x.ndim == self.spatial + 2
        if x.ndim not in (self.spatial + 1, self.spatial + 2) or x.shape[1 if batched else 0] != self.num_features:
            raise ShapeError(f"{type(self).__name__}({self.num_features}) needs an (N, C"
                             f"{', L' if self.spatial == 1 else ', H, W'}) input (N optional) with "
                             f"{self.num_features} channels, got shape {x.shape}")
        xb = x if batched else x.unsqueeze(0)
        use_input = self.training or self.running_mean is None
        y = instance_norm(xb, self.running_mean, self.running_var, self.weight, self.bias, use_input,
                          self.momentum, self.eps)
        return y if batched else y.reshape(x.shape)


class InstanceNorm1d(_InstanceNorm):
    """torch's InstanceNorm1d over (N, C, L) or (C, L)."""

    spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """torch's InstanceNorm2d over (N, C, H, W) or (C, H, W)."""

    spatial = 2
