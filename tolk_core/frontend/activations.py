"""Activation functions with torch's names, arguments and semantics: `elu`, `selu`, `celu`, `leaky_relu`,
`hardsigmoid`, `hardswish`, `hardtanh`, `relu6`, `softplus`, `softsign`, `mish`, `prelu`.

An op belongs here when it is an elementwise activation that torch.nn.functional offers. Each is a graph of
elementwise ops, so autograd differentiates it; the piecewise ones select their pieces with comparisons placed
as torch places them, so the gradient at a kink is torch's (hardtanh and hardsigmoid pass none at their ends,
leaky_relu passes the slope at 0). The exponential pieces use expm1 (elu, selu, celu: no cancellation near 0)
and log1p of an accurate exponential (softplus), each reading its input clamped to its own range so the
branch not taken stays finite (docs/dtypes.md). NaN propagates through every one. Integer inputs become the
default float, except in hardtanh and relu6 with integer bounds, which clip in the integer dtype as torch does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tolk_core.errors import ShapeError
from tolk_core.frontend.transcendental import exp_accurate, in_float

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

# SELU's constants (Klambauer et al., as torch states them)
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _softplus(x: Tensor, beta: float, threshold: float) -> Tensor:
    """log(1 + e^(beta x)) / beta, and x itself where beta x > threshold (torch's switch to the identity)."""
    bx = x * beta
    soft = exp_accurate(bx.clip(None, threshold)).log1p() / beta
    return (bx > threshold).where(x, soft)


class ActivationMixin:
    """Activation functions; mixed into `Tensor` through ElementwiseMixin."""

    __slots__ = ()

    def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """x for x > 0, alpha * (e^x - 1) otherwise (torch.nn.functional.elu)."""
        return in_float(self, lambda x: (x > 0).where(x, x.clip(None, 0.0).expm1() * alpha))

    def selu(self: Tensor) -> Tensor:
        """scale * elu(x, alpha) with SELU's fixed alpha and scale."""
        return self.elu(_SELU_ALPHA) * _SELU_SCALE

    def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (e^(x/alpha) - 1)) (torch's celu)."""
        return in_float(self, lambda x: (x > 0).where(x, (x.clip(None, 0.0) / alpha).expm1() * alpha))

    def leaky_relu(self: Tensor, negative_slope: float = 0.01) -> Tensor:
        """x for x > 0, negative_slope * x otherwise."""
        return in_float(self, lambda x: (x > 0).where(x, x * negative_slope))

    def hardtanh(self: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x clipped to [min_val, max_val]; the gradient flows strictly inside only, as torch's."""
        x = self._as_float() if isinstance(min_val, float) or isinstance(max_val, float) else self
        return (x <= min_val).where(min_val, (x >= max_val).where(max_val, x)).cast(x.dtype)

    def relu6(self: Tensor) -> Tensor:
        """hardtanh(x, 0, 6)."""
        return self.hardtanh(0, 6)

    def hardsigmoid(self: Tensor) -> Tensor:
        """0 at x <= -3, 1 at x >= 3, x / 6 + 1/2 between."""
        return in_float(self, lambda x: (x <= -3).where(0.0, (x >= 3).where(1.0, x / 6 + 0.5)))

    def hardswish(self: Tensor) -> Tensor:
        """x * 0 at x <= -3 (-0.0, and NaN for -inf, as torch's x * relu6(x + 3) / 6 gives), x at x >= 3,
        x (x + 3) / 6 between; the gradient is torch's, 0 and 1 at the kinks."""
        return in_float(self, lambda x: (x <= -3).where(x * 0.0, (x >= 3).where(x, x * (x + 3) / 6)))

    def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + e^(beta x)) / beta, and x where beta x > threshold (torch's): log1p keeps the tail below 0
        (about e^(beta x) / beta), and no e^(beta x) overflows."""
        return in_float(self, lambda x: _softplus(x, beta, threshold))

    def softsign(self: Tensor) -> Tensor:
        """x / (1 + |x|)."""
        return in_float(self, lambda x: x / (x.abs() + 1))

    def mish(self: Tensor) -> Tensor:
        """x * tanh(softplus(x)) (softplus with torch's threshold 20)."""
        return in_float(self, lambda x: x * _softplus(x, 1.0, 20.0).tanh())

    def prelu(self: Tensor, weight: Any) -> Tensor:
        """x for x > 0, weight * x otherwise; `weight` holds one slope, or one per channel (axis 1), as torch's."""
        w = weight if isinstance(weight, type(self)) else type(self)(weight, device=self.device)
        if w.ndim > 1 or (w.numel() != 1 and (self.ndim < 2 or w.numel() != self.shape[1])):
            raise ShapeError(f"prelu weight of shape {w.shape} for input {self.shape}: give one slope or one per "
                             "channel (the input's axis 1)")
        if w.numel() != 1:
            w = w.reshape((1, w.numel()) + (1,) * (self.ndim - 2))
        elif w.ndim:
            w = w.reshape(())
        x = self._as_float()
        return (x > 0).where(x, x * w)
