"""The state torch's batch and instance norms share, in a module of its own: nn.functional re-exports the
instance norm, and the batch norms' module reads nn.functional, so neither may hold it."""
from __future__ import annotations

import numpy as np

from tolk_core.frontend.tensor import Tensor
from tolk_core.nn.module import Module, param


class RunningNorm(Module):
    """The state torch's batch and instance norms share (`_norm_state`): the affine weight (ones) and bias
    (zeros), and the running mean (zeros) and variance (ones) as buffers when tracked (None otherwise)."""

    def _norm_state(self, num_features: int, eps: float, affine: bool, track_running_stats: bool,
                    device: str | None) -> None:
        self.num_features, self.eps = num_features, eps
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = param(np.ones(num_features), device) if affine else None
        self.bias = param(np.zeros(num_features), device) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", Tensor(np.zeros(num_features, np.float32), device=device))
            self.register_buffer("running_var", Tensor(np.ones(num_features, np.float32), device=device))
        else:
            self.running_mean = self.running_var = None
