"""`contiguous_backward()`: the forward value is unchanged, and the gradient arriving at that node is stored once
(one more kernel, one more buffer in the schedule) instead of being recomputed by every kernel that reads it."""
from __future__ import annotations

import numpy as np

from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import Op
from tolk_core.schedule.placements import Lineage


def _grads(store: bool, device: str):
    r = np.random.default_rng(0)
    a, b = r.standard_normal((16, 32)).astype(np.float32), r.standard_normal((16, 32)).astype(np.float32)
    x, w = Tensor(a, device=device).requires_grad_(), Tensor(b, device=device).requires_grad_()
    y = x * w
    if store:
        y = y.contiguous_backward()
    ((y.exp() * 3).sum()).backward()
    return x, w, a, b


def test_the_gradient_is_stored_once(device) -> None:
    for store, kernels in ((False, 2), (True, 3)):
        x, w, a, b = _grads(store, device)
        with Lineage():
            linear = schedule(target_for(device), [x.grad.uop, w.grad.uop]).linear
        assert len(linear.src) == kernels
        buffers = {u for c in linear.src for u in c.src[1:] if u.op is Op.BUFFER}
        assert len(buffers) == 2 + 2 + (1 if store else 0)  # inputs, the two gradients, the stored one
        g = 3 * np.exp(a * b)
        np.testing.assert_allclose(x.grad.numpy(), g * b, rtol=1e-5)
        np.testing.assert_allclose(w.grad.numpy(), g * a, rtol=1e-5)


def test_the_forward_value_is_unchanged(device) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor(a, device=device)
    np.testing.assert_array_equal((t * 2).contiguous_backward().numpy(), a * 2)
