"""Loss curves against torch: the CNN (Adam) and the char GPT (AdamW) of bench.models, at their tiny sizes, from
the same seeded weights and data, trained 50 steps; every step's loss within 1e-4 relative of torch's. A small
difference in one step's update would grow over the curve, so this checks the optimizers and the backward pass
over many steps, not one."""
from __future__ import annotations

import numpy as np
import pytest

from bench import models as M

torch = pytest.importorskip("torch", reason="the loss curves are compared with torch's (pip install torch==2.13.0)")
STEPS = 50


def _curve(step, inputs, to_float) -> np.ndarray:
    return np.array([to_float(step(*inputs)[0]) for _ in range(STEPS)])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_loss_curve_matches_torch(name: str, device: str) -> None:
    job, inputs, numbers = M.tolk_setup(name, "tiny", device)
    ours = _curve(job.step, inputs, lambda t: float(t.numpy()))
    tjob, tinputs = M.torch_setup(name, "tiny", "eager", numbers)
    theirs = _curve(tjob.step, tinputs, lambda t: float(t.detach()))
    assert ours[-1] < ours[0]  # it trains
    rel = np.abs(ours - theirs) / np.abs(theirs)
    assert rel.max() <= 1e-4, f"{name} on {device}: step {int(rel.argmax())} differs by {rel.max():.2e}"
