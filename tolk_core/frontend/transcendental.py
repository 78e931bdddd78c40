"""Inverse trigonometric and hyperbolic functions, `atan2`, `tan`, `expm1` and `log1p`, accurate over their
whole domain (docs/dtypes.md states each one's measured ULP error).

An op belongs here when it is a transcendental function built from the IR's primitives (EXP2, LOG2, SQRT,
SIN, COS, RECIPROCAL) by a range reduction that keeps its relative precision everywhere: near the ends of
asin's and acos's domain, at atan's huge arguments, where sinh or expm1 would cancel near 0, and where a naive
formula overflows before its result does. Every branch of a `where` reads an input clamped to its own range,
so the branch not taken never produces inf or NaN and its zero share of the gradient stays finite: gradients
come from autograd through these graphs (docs/dtypes.md).

Dtypes: integer and bool inputs become the default float; float16 and bfloat16 are computed in float32 and
rounded once to their dtype; float32 and float64 are computed in their own dtype (float64 with longer series).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

_LOG2_E, _LN_2 = math.log2(math.e), math.log(2)
_PI, _HALF_PI, _QUARTER_PI = math.pi, math.pi / 2, math.pi / 4
_TAN_PI_8 = math.tan(math.pi / 8)
# atan(u) = u * sum_n (-1)^n u^(2n) / (2n + 1) on |u| <= tan(pi/8): the truncation after N terms is below
# tan(pi/8)^(2N) / (2N + 1) relative, 2^-27 for float32's 9 terms and 2^-56 for float64's 21
_ATAN_SERIES = {4: tuple((-1) ** n / (2 * n + 1) for n in range(9)),
                8: tuple((-1) ** n / (2 * n + 1) for n in range(21))}
# ln 2 split for the reduction of exp (Cody and Waite): k * hi is exact for every k whose exp is finite or
# subnormal (|k| < 2^8 in float32, < 2^11 in float64), lo carries the rest
_LN2_HI = {4: math.ldexp(round(math.ldexp(_LN_2, 16)), -16), 8: math.ldexp(round(math.ldexp(_LN_2, 40)), -40)}
# ln 2 to 40 digits: lo must be the exact ln 2 minus hi, not the float ln 2 minus hi (that loses 2^-54 ln 2)
_LN2_DIGITS = Decimal("0.6931471805599453094172321214581765680755")
_LN2_LO = {size: float(_LN2_DIGITS - Decimal(hi)) for size, hi in _LN2_HI.items()}
# |x| from which asinh and acosh are ln(2|x|): the next term, 1/(4x^2), is below half an ulp of the result
_HYP_BIG = {4: 2.0 ** 13, 8: 2.0 ** 28}
# exp's argument range: below it the result is 0, above it inf (clamping keeps the reduction finite)
_EXP_RANGE = {4: (-104.0, 89.0), 8: (-746.0, 710.0)}
# |x| from which expm1(x) is exp(x) or exp(x) - 1 and sinh/cosh are exp(|x|) / 2: e^-|x| is below 2^-57
_EXP_TAIL = 40.0
_FINITE_MAX = {4: float.fromhex("0x1.fffffep127"), 8: float.fromhex("0x1.fffffffffffffp1023")}


def in_float(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """`fn` of `x` as a float: integers and bools become the default float, float16/bfloat16 are computed in
    float32 and rounded once to their dtype (a series evaluated in half precision would round at every step)."""
    x = x._as_float()
    if x.dtype.itemsize == 2:
        return fn(x.cast(dtypes.float32)).cast(x.dtype)
    return fn(x)


def sign_bit(x: Tensor) -> Tensor:
    """C's signbit(x) for floats other than NaN: True for negative x, -0.0 and -inf."""
    return (x < 0) | ((x == 0) & (x.reciprocal() < 0))


def copysign(mag: Tensor, like: Tensor) -> Tensor:
    """`mag` (not negative, or NaN) with the sign of `like`: -0.0 and negative `like` give -mag."""
    return sign_bit(like).where(-mag, mag)


def exp_accurate(x: Tensor) -> Tensor:
    """e^x within about 2 ulp for float32/float64 `x`: x = k ln2 + r with k an integer and |r| <= ln2 / 2 (ln 2
    split so k * hi is exact), e^x = 2^k e^r. Tensor.exp's exp2(x * log2 e) instead loses the bits of x * log2 e
    rounded, up to 64 ulp near overflow. 2^k is applied in two halves so e^r 2^k stays finite up to the dtype's
    largest value and rounds once into the subnormals."""
    size = x.dtype.itemsize
    lo_x, hi_x = _EXP_RANGE[size]
    xc = x.clip(lo_x, hi_x)
    hi = _LN2_HI[size]
    k = (xc * _LOG2_E + 0.5).floor()
    r = (xc - k * hi) - k * _LN2_LO[size]
    k1 = (k * 0.5).trunc()
    return (r * _LOG2_E)._alu(Op.EXP2) * k1._alu(Op.EXP2) * (k - k1)._alu(Op.EXP2)


def _expm1(x: Tensor) -> Tensor:
    """e^x - 1 (Kahan): with u = e^x rounded, (u - 1) * x / ln u, whose error in u cancels between numerator
    and denominator, so it keeps its relative precision near 0 where e^x - 1 cancels; x where u rounds to 1.
    Beyond |x| = 40, e^x - 1 is e^x (or -1 + e^x) to the last bit."""
    xs = x.clip(-_EXP_TAIL, _EXP_TAIL)
    u = exp_accurate(xs)
    one = u == 1
    lu = one.where(1.0, u.log())
    kahan = one.where(xs, (u - 1) * (xs / lu))
    return (x > _EXP_TAIL).where(exp_accurate(x.clip(_EXP_TAIL)),
                                 (x < -_EXP_TAIL).where(exp_accurate(x.clip(None, -_EXP_TAIL)) - 1, kahan))


def _log1p(x: Tensor) -> Tensor:
    """ln(1 + x) (Goldberg): with u = 1 + x rounded, ln(u) * x / (u - 1), which corrects the rounding of 1 + x;
    x where u rounds to 1. +inf gives inf, -1 gives -inf, below -1 NaN."""
    u = 1 + x.clip(None, _FINITE_MAX[x.dtype.itemsize])
    one = u == 1
    den = one.where(1.0, u - 1)
    return (x == math.inf).where(math.inf, one.where(x, u.log() * (x / den)))


def _atan_unit(t: Tensor) -> Tensor:
    """atan(t) for t in [0, 1]: above tan(pi/8), pi/4 + atan((t - 1) / (t + 1)), so the series runs on
    |u| <= tan(pi/8) only."""
    coeffs = _ATAN_SERIES[t.dtype.itemsize]
    big = t > _TAN_PI_8
    u = big.where((t - 1) / (t + 1), t)
    u2 = u * u
    series = u2 * 0.0 + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        series = series * u2 + c
    series = series * u
    return big.where(series + _QUARTER_PI, series)


def _atan2_quadrant(y: Tensor, x: Tensor) -> Tensor:
    """atan2(y, x) for y, x >= 0 (or NaN), in [0, pi/2]: atan of the smaller over the larger, from pi/2 where
    y is the larger. Both infinite gives pi/4, both zero 0."""
    steep = y > x
    num, den = steep.where(x, y), steep.where(y, x)
    ratio = ((num == math.inf) & (den == math.inf)).where(1.0, num / (den == 0).where(1.0, den))
    a = _atan_unit(ratio)
    return steep.where(_HALF_PI - a, a)


def _asin(x: Tensor) -> Tensor:
    a = x.abs()
    root = ((1 - a) * (1 + a)).clip(0.0).sqrt()  # 1 - a is exact where a >= 1/2: no cancellation near 1
    out = _atan2_quadrant(a, root)
    return (a > 1).where(math.nan, copysign(out, x))


def _acos(x: Tensor) -> Tensor:
    """acos(x) = 2 atan2(sqrt(1 - x), sqrt(1 + x)): each root is exact where its argument would cancel."""
    xc = x.clip(-1.0, 1.0)
    out = _atan2_quadrant((1 - xc).sqrt(), (1 + xc).sqrt()) * 2
    return (x.abs() > 1).where(math.nan, out)


def _atan2(y: Tensor, x: Tensor) -> Tensor:
    """numpy's arctan2: the quadrant angle of |y|, |x|, reflected to pi - angle where x is negative (-0.0
    included) and given y's sign (so atan2(-0.0, -0.0) = -pi)."""
    q = _atan2_quadrant(y.abs(), x.abs())
    q = sign_bit(x).where(_PI - q, q)
    return copysign(q, y)


def _sinh(x: Tensor) -> Tensor:
    """sinh(|x|) = (E + E / (E + 1)) / 2 with E = expm1(|x|), which has no cancellation near 0; beyond 40,
    (e^(|x|/2) / 2) e^(|x|/2), finite up to the dtype's overflow of sinh itself."""
    a = x.abs()
    e = _expm1(a.clip(None, _EXP_TAIL))
    h = exp_accurate(a.clip(_EXP_TAIL) * 0.5)
    out = (a > _EXP_TAIL).where(h * 0.5 * h, (e + e / (e + 1)) * 0.5)
    return copysign(out, x)


def _cosh(x: Tensor) -> Tensor:
    a = x.abs()
    e = exp_accurate(a.clip(None, _EXP_TAIL))
    h = exp_accurate(a.clip(_EXP_TAIL) * 0.5)
    return (a > _EXP_TAIL).where(h * 0.5 * h, e * 0.5 + 0.5 / e)


def _asinh(x: Tensor) -> Tensor:
    """ln(|x| + sqrt(x^2 + 1)) as log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), exact in relative terms near 0; from
    2^13 (float32; float64 2^28), ln|x| + ln 2."""
    big_at = _HYP_BIG[x.dtype.itemsize]
    a = x.abs()
    s = a.clip(None, big_at)
    small = _log1p(s + s * s / (1 + (1 + s * s).sqrt()))
    out = (a > big_at).where(a.clip(big_at).log() + _LN_2, small)
    return copysign(out, x)


def _acosh(x: Tensor) -> Tensor:
    """log1p(t + sqrt(t (t + 2))) with t = x - 1 (exact near 1, where ln(x + sqrt(x^2 - 1)) cancels); from 2^13
    (float32; float64 2^28), ln x + ln 2. Below 1, NaN."""
    big_at = _HYP_BIG[x.dtype.itemsize]
    t = x.clip(1.0, big_at) - 1
    small = _log1p(t + (t * (t + 2)).sqrt())
    out = (x > big_at).where(x.clip(big_at).log() + _LN_2, small)
    return (x < 1).where(math.nan, out)


def _atanh(x: Tensor) -> Tensor:
    """log1p(2|x| / (1 - |x|)) / 2 with x's sign: +-inf at +-1, NaN beyond."""
    a = x.abs()
    out = _log1p(a * 2 / (1 - a)) * 0.5
    return (a > 1).where(math.nan, copysign(out, x))


class TranscendentalMixin:
    """Inverse trigonometric and hyperbolic functions; mixed into `Tensor` through ElementwiseMixin."""

    __slots__ = ()

    def asin(self: Tensor) -> Tensor: return in_float(self, _asin)
    def acos(self: Tensor) -> Tensor: return in_float(self, _acos)
    def atan(self: Tensor) -> Tensor: return in_float(self, lambda x: _atan2(x, x.full_like(1.0)))
    def sinh(self: Tensor) -> Tensor: return in_float(self, _sinh)
    def cosh(self: Tensor) -> Tensor: return in_float(self, _cosh)
    def asinh(self: Tensor) -> Tensor: return in_float(self, _asinh)
    def acosh(self: Tensor) -> Tensor: return in_float(self, _acosh)
    def atanh(self: Tensor) -> Tensor: return in_float(self, _atanh)
    def expm1(self: Tensor) -> Tensor: return in_float(self, _expm1)
    def log1p(self: Tensor) -> Tensor: return in_float(self, _log1p)

    def tan(self: Tensor) -> Tensor:
        """sin(x) / cos(x): both are reduced by the device's math library, so near pi/2 the small cosine keeps
        its relative precision and so does the quotient."""
        return in_float(self, lambda x: x._alu(Op.SIN) / x._alu(Op.COS))

    def atan2(self: Tensor, other: Any) -> Tensor:
        """numpy's arctan2(self, other) (torch.atan2): the angle of the point (other, self), in [-pi, pi],
        signed zeros and infinities as in C99. Operands broadcast and promote as in arithmetic."""
        y, x = self._coerce(other)
        if not dtypes.is_float(y.dtype):
            y, x = y.cast(dtypes.default_float), x.cast(dtypes.default_float)
        if y.dtype.itemsize == 2:
            return _atan2(y.cast(dtypes.float32), x.cast(dtypes.float32)).cast(y.dtype)
        return _atan2(y, x)
