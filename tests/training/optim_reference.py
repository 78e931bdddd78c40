"""numpy's statement of one optimizer update, the reference both optimizer test files compare against."""
from __future__ import annotations

import numpy as np


def adam_update(p, m, v, g, t, lr, betas, eps, weight_decay, decoupled):
    """One Adam (decoupled: AdamW) step at step number `t` (from 1): the new (p, m, v)."""
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    m = betas[0] * m + (1 - betas[0]) * g
    v = betas[1] * v + (1 - betas[1]) * g * g
    return p - lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps), m, v
