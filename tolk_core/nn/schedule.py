"""Learning-rate schedules as torch.optim.lr_scheduler's: StepLR, LinearLR (linear warm-up),
CosineAnnealingLR, LambdaLR and SequentialLR (e.g. linear warm-up, then cosine).

A schedule sets `optimizer.lr` at construction (epoch 0) and on every `step()` (the next epoch), from a closed
form of the epoch. The optimizer keeps its learning rate in a device tensor, so a jitted training step picks the
new value up on its next replay. The base rate is the optimizer's rate when its first schedule was made
(torch's `initial_lr`), so schedules built one after another (for SequentialLR) share it.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

from tolk_core.errors import ArgumentError


class LRScheduler:
    """Base: `lr_at(epoch)` is the subclass's closed form; `step()` advances the epoch and sets the rate."""

    def __init__(self, optimizer: Any, last_epoch: int = -1):
        if not hasattr(optimizer, "initial_lr"):
            optimizer.initial_lr = optimizer.lr
        self.optimizer, self.base_lr = optimizer, optimizer.initial_lr
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, epoch: int) -> float:
        raise NotImplementedError

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.lr = self.lr_at(self.last_epoch)

    def get_last_lr(self) -> list[float]:
        return [self.optimizer.lr]

    def state_dict(self) -> dict[str, Any]:
        return {"last_epoch": self.last_epoch, "base_lr": self.base_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_epoch, self.base_lr = state["last_epoch"], state["base_lr"]
        self.optimizer.lr = self.lr_at(self.last_epoch)


class StepLR(LRScheduler):
    """base * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class LinearLR(LRScheduler):
    """base * the factor going linearly from start_factor to end_factor over total_iters epochs, then held."""

    def __init__(self, optimizer: Any, start_factor: float = 1 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ArgumentError(f"LinearLR factors must be in (0, 1] and [0, 1], got {start_factor} and {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        done = min(epoch, self.total_iters) / self.total_iters
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803 - torch's name
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LambdaLR(LRScheduler):
    """base * lr_lambda(epoch)."""

    def __init__(self, optimizer: Any, lr_lambda: Callable[[int], float], last_epoch: int = -1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        return self.base_lr * self.lr_lambda(epoch)


class SequentialLR(LRScheduler):
    """schedulers[i] from epoch milestones[i-1] on, restarted there at its own epoch 0 (torch's SequentialLR)."""

    def __init__(self, optimizer: Any, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1:
            raise ArgumentError(f"SequentialLR needs one milestone fewer than schedulers, got {len(milestones)} for "
                             f"{len(schedulers)}")
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        i = bisect.bisect_right(self.milestones, epoch)
        return self.schedulers[i].lr_at(epoch - (self.milestones[i - 1] if i else 0))
