"""The built-in programs `tolk viz --example NAME` records: the two docs/viz.md shows and the browser test opens."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tolk_core.demo import DigitsNet, make_step
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import manual_seed
from tolk_core.nn.optim import Adam


def softmax(device: str | None = None) -> np.ndarray:
    """A row softmax of a (32, 64) tensor: one kernel on CPU, its rows kept kernel-local (docs/architecture.md)."""
    x = Tensor(np.random.default_rng(0).standard_normal((32, 64), dtype=np.float32), device=device)
    return x.softmax(axis=1).numpy()


def mlp_step(device: str | None = None) -> np.ndarray:
    """One training step of the demo's 64-128-10 classifier (forward, backward, Adam) on a random batch of 32;
    returns the loss. The parameters are made and realized first: their schedules come before the step's."""
    manual_seed(0)
    model = DigitsNet(device)
    opt = Adam(model.parameters(), lr=5e-3)
    for p in model.parameters():
        p.realize()
    rng = np.random.default_rng(0)
    x = Tensor(rng.random((32, 64), dtype=np.float32), device=device)
    y = Tensor(rng.integers(0, 10, 32).astype(np.int32), device=device)
    return make_step(model, opt)(x, y).numpy()


EXAMPLES: dict[str, Callable[[str | None], np.ndarray]] = {"softmax": softmax, "mlp": mlp_step}
