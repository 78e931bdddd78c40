"""Gradient clipping as torch's torch.nn.utils: `clip_grad_norm_` and `clip_grad_value_`.

Both replace each parameter's `.grad` with a lazy clipped tensor (nothing is read back to the host), so they
can sit between `backward()` and `optimizer.step()` inside a jitted training step.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from tolk_core.errors import TolkError
from tolk_core.frontend.tensor import Tensor


def _with_grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    ps = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p for p in ps if p.grad is not None]


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale every gradient by min(1, max_norm / (total + 1e-6)), total being the `norm_type` norm of all the
    gradients together (inf: the largest magnitude); returns total (a 0-d tensor, float32). With
    `error_if_nonfinite` a nan or infinite total raises TolkError (this reads the total: not inside a JIT)."""
    ps = _with_grads(parameters)
    if not ps:
        return Tensor(0.0)
    grads: list[Tensor] = []
    for p in ps:
        assert p.grad is not None
        grads.append(p.grad.cast("float32").to(ps[0].device))
    if norm_type == math.inf:
        parts = [g.abs().max() for g in grads]
        total = parts[0].stack(*parts[1:]).max()
    else:
        parts = [(g.abs() ** norm_type).sum() for g in grads]
        total = parts[0].stack(*parts[1:]).sum() ** (1 / norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise TolkError(f"clip_grad_norm_: the total gradient norm is {total.item()}: some gradient holds nan or "
                        "inf (fix the loss, or pass error_if_nonfinite=False to clip anyway)")
    coef = (max_norm / (total + 1e-6)).clip(max_=1.0)
    for p in ps:
        assert p.grad is not None
        p.grad = p.grad * coef.to(p.grad.device).cast(p.grad.dtype)
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient element into [-clip_value, clip_value]."""
    for p in _with_grads(parameters):
        assert p.grad is not None
        p.grad = p.grad.clip(-clip_value, clip_value)
