"""Comparing a tolk computation with torch's (CPU, float32) on the same inputs: values and gradients.

`check(device, ours, theirs, inputs)`: `inputs` are numpy arrays; float ones become tensors that require grad
on both sides. `ours(*tolk tensors)` and `theirs(*torch tensors)` return one tensor or a tuple; each output is
weighted by a fixed random array and summed, the sum is differentiated, and the outputs and the gradients of
every float input (and of the `params` pairs given, tolk tensor with its torch twin) must agree within
rtol 1e-4, atol 1e-5 (float32 sums of up to a few hundred terms in another order)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tolk_core.frontend.tensor import Tensor

RTOL, ATOL = 1e-4, 1e-5


def _as_tuple(v: Any) -> tuple:
    return v if isinstance(v, tuple) else (v,)


def check(device: str, ours: Callable[..., Any], theirs: Callable[..., Any], inputs: Sequence[np.ndarray],
          params: Sequence[tuple[Tensor, Any]] = (), grad: bool = True, rtol: float = RTOL, atol: float = ATOL,
          what: str = "") -> None:
    import torch
    floating = [np.issubdtype(a.dtype, np.floating) for a in inputs]
    ts = [Tensor(a, device=device).requires_grad_() if f and grad else Tensor(a, device=device)
          for a, f in zip(inputs, floating, strict=True)]
    tts = [torch.tensor(a, requires_grad=bool(f and grad)) for a, f in zip(inputs, floating, strict=True)]
    outs, touts = _as_tuple(ours(*ts)), _as_tuple(theirs(*tts))
    assert len(outs) == len(touts), what
    rng = np.random.default_rng(123)
    weights = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in touts]
    for i, (o, t) in enumerate(zip(outs, touts, strict=True)):
        assert o.shape == tuple(t.shape), f"{what} output {i}: shape {o.shape} vs torch {tuple(t.shape)}"
    if grad:  # differentiated before any output is read (reading realizes a tensor and drops its graph)
        loss = sum(((o * Tensor(w, device=device)).sum() for o, w in zip(outs, weights, strict=True)),
                   Tensor(0.0, device=device))
        loss.backward()
        sum((t * torch.tensor(w)).sum() for t, w in zip(touts, weights, strict=True)).backward()
    for i, (o, t) in enumerate(zip(outs, touts, strict=True)):
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=rtol, atol=atol, err_msg=f"{what} output {i}")
    if not grad:
        return
    pairs = [(t, tt, f"input {i}") for i, (t, tt, f) in enumerate(zip(ts, tts, floating, strict=True)) if f]
    pairs += [(p, tp, f"param {i}") for i, (p, tp) in enumerate(params)]
    for t, tt, name in pairs:
        assert t.grad is not None and tt.grad is not None, f"{what} {name}: a gradient is missing"
        np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"{what} gradient of {name}")


def copy_params(ours: Any, theirs: Any) -> list[tuple[Tensor, Any]]:
    """Load torch module `theirs`'s state dict into tolk module `ours` (same names), and pair each tolk
    parameter with its torch twin, for `check(params=...)`. Every torch key must be one of ours (ours may hold
    more: nn.Dropout's mask-stream counter)."""
    state = {k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}
    missing = state.keys() - ours.state_dict().keys()
    assert not missing, f"torch's keys {sorted(missing)} are not in the tolk module's state dict"
    ours.load_state_dict(state, strict=False)
    tp = dict(theirs.named_parameters())
    return [(t, tp[k]) for k, t in ours.state_dict().items() if t.requires_grad]
