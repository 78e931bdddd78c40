"""Elementwise ops: one output element from the elements at the same index of the (broadcast) inputs.
Arithmetic, comparisons, `where`, casts and bitcast, rounding (`round` half to even), classification (`isnan`,
`isinf`, `isfinite`), `sign`, floor division and modulo (`fmod` too), powers, exp/log/trig and activation
functions, clipping, logical and bitwise operators. The inverse trigonometric and hyperbolic functions live in
transcendental.py and torch's further activations in activations.py; their mixins are bases of this one.

An op belongs here when it maps elements one to one (after broadcasting). Every method composes the IR's
primitive ALU ops through `_alu`; `_coerce` gives two operands one dtype and one shape first, with numpy/torch
promotion (Python scalars are weak: they take the tensor's dtype unless a float meets an integer tensor). An
ndarray operand becomes a Tensor on the other operand's device (its own dtype, promoted like a Tensor's); a
Tensor on another device is a DeviceMismatchError, any other operand an ArgumentTypeError.

Semantics:
- `//` and `%` follow numpy's floor convention (the quotient rounds toward -inf, the remainder takes the
  divisor's sign). The IR's IDIV/MOD truncate (C), so the result is fixed up explicitly. Integer division by
  zero gives 0 for both, as numpy does (C would trap), and `INT_MIN // -1` wraps as numpy does.
- `**` follows torch: a negative float base with a non-integer exponent gives nan; an integer tensor raised
  to a negative Python int raises `DTypeError`; integer tensor exponents < 0 give torch's 0 / +-1.
- `&`, `|`, `^`, `~`, `<<`, `>>` accept bool and integer tensors (shifts: integers only); `~` of a bool tensor
  is logical not. Floats raise `DTypeError`.
- `gelu()` is the tanh approximation (tinygrad's gelu, torch's `gelu(approximate="tanh")`);
  `gelu(approximate="none")` is exact, by `erf` (a polynomial/exponential fit accurate to float32).
- `tril`/`triu` keep the lower/upper triangle of the last two axes; `masked_fill` writes a value where a
  boolean mask is True (torch's).
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
from tolk_core.frontend import autograd
from tolk_core.frontend.activations import ActivationMixin
from tolk_core.frontend.arguments import as_operand, check_devices
from tolk_core.frontend.composite import as_node
from tolk_core.frontend.construction import as_const
from tolk_core.frontend.movement import broadcast_shape, broadcast_uop
from tolk_core.frontend.nodes import Nodes, broadcast_scalar
from tolk_core.frontend.transcendental import TranscendentalMixin, sign_bit
from tolk_core.ir.calls import Composite
from tolk_core.ir.dtype import DType, dtypes, promote_types, weak_promote
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, sint

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

_SQRT_2_OVER_PI, _SQRT_HALF = math.sqrt(2 / math.pi), math.sqrt(0.5)
# erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)): coefficients of x^(2n+1), n = 0..9. On |x| <= 1 the
# series alternates with falling terms, so stopping after n = 9 errs by at most the n = 10 term, 1.5e-8 (a
# quarter of float32's ulp at erf(1) = 0.84)
_ERF_SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(10))
# Numerical Recipes' erfc fit: the polynomial in t (constant term first) inside the exponential
_ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
             -0.82215223, 0.17087277)
_LOG2_E, _LN_2 = math.log2(math.e), math.log(2)


# the composite activations as node formulas (frontend/nodes.py: the same graph as Tensor operators, without a
# Tensor per intermediate); the methods below document their numerics
def _sigmoid_formula(x: Nodes) -> Nodes:
    e = (-x.abs()).exp()
    return (x < 0).where(e, 1.0) / (1 + e)


def _tanh_formula(x: Nodes) -> Nodes:
    cut = 1 / 64 if x.u.dtype == dtypes.float64 else 0.25
    ax = x.abs()
    e = (ax * -2).exp()
    big = (1 - e) / (1 + e)
    x2 = x * x
    small = x * (1 + x2 * (-1 / 3 + x2 * (2 / 15 + x2 * (-17 / 315 + x2 * (62 / 2835)))))
    return (ax < cut).where(small, (x < 0).where(-big, big))


# their derivatives read off the output, torch's (docs/training.md, "Activation gradients")
def _sigmoid_slope(y: Nodes) -> Nodes: return y * (1 - y)
def _tanh_slope(y: Nodes) -> Nodes: return 1 - y * y


Formula = Callable[[Nodes], Nodes]


def _composite(name: str, formula: Formula, slope: Formula) -> Composite:
    """The IR's handle on an activation kept as one node (ir/calls.py): prepare expands `formula` over the
    call's input; the gradient is g * slope(y)."""
    def expand(x: UOp) -> UOp:
        return formula(Nodes(x, x.tensor_shape)).u

    def gradient(y: UOp, g: UOp) -> tuple[UOp | None, ...]:
        shape = y.tensor_shape
        return ((Nodes(g, shape) * slope(Nodes(y, shape))).u,)
    return Composite(name, expand, gradient)


# each activation's composite (its formula is also kept for values that cannot hold the composite node)
_COMPOSITES = {"sigmoid": (_composite("sigmoid", _sigmoid_formula, _sigmoid_slope), _sigmoid_formula),
               "tanh": (_composite("tanh", _tanh_formula, _tanh_slope), _tanh_formula)}


def _activation(name: str, x: Nodes, whole: bool) -> Nodes:
    """Activation `name` of `x`: one composite node when `whole` (see `_whole`), else its formula, its output
    node given the composite's gradient (`_with_slope`)."""
    call, formula = _COMPOSITES[name]
    if whole:
        return Nodes(UOp.shaped(Op.CALL, x.u.dtype, (x.u,), call, x.shape), x.shape)
    return _with_slope(x, formula(x), call.slope)


def _whole(x: Tensor) -> bool:
    """Whether `x`'s activations may be kept as composite nodes: one device (the sharding pass maps only the
    IR's own ops shard by shard) and a shape of plain ints."""
    return type(x.device) is str and all(type(s) is int for s in x.shape)


def _with_slope(x: Nodes, y: Nodes, gradient: Callable[[UOp, UOp], tuple[UOp | None, ...]]) -> Nodes:
    """`y`, computed from `x` by a composite formula, differentiated by `gradient(y, g)` (the composite's) instead
    of by the rules walked through every node of the formula (its branches, comparisons and constants)."""
    # registered whether or not a gradient is wanted yet: a tensor may be marked after its values were built,
    # and the rules' derivative of the formula is NaN at +-inf (exp(-2|x|) / (1 + ...) meets inf * 0)
    xu, yref = x.u, weakref.ref(y.u)  # the key weakly: see softmax._vjp

    def vjp(g: UOp) -> list[tuple[UOp, UOp]]:
        yu = yref()
        assert yu is not None, "a gradient is asked of a node that no longer exists"
        (gx,) = gradient(yu, g)
        assert gx is not None, "an activation's slope gives its input a gradient"
        return [(xu, gx)]
    autograd.define_gradient(y.u, vjp)
    return y


class ElementwiseMixin(TranscendentalMixin, ActivationMixin):
    """Elementwise operations; mixed into `Tensor` (see the module docstring for semantics)."""

    __slots__ = ()

    # ---- operands ----
    def _coerce(self: Tensor, other: Any, reflected: bool = False) -> tuple[Tensor, Tensor]:
        """Both operands as Tensors of one dtype and one broadcast shape. `other` is a Tensor on this one's
        device (else DeviceMismatchError), a Python or numpy scalar (weak, see the module docstring) or an ndarray
        (made a Tensor on this device: `arguments.as_operand`); anything else is an ArgumentTypeError."""
        if type(other) is type(self):  # the common cases first: a Tensor of this class, a Python int or float
            if other.device != self.device:
                check_devices("an elementwise op", (self, other))  # raises
            sd, od = self.uop.dtype, other.uop.dtype
            a, b = (self, other) if sd is od else (self.cast(promote_types(sd, od)), other.cast(promote_types(sd, od)))
            sa, sb = a.shape, b.shape
            if sa != sb:  # to the shape broadcast_shape checked: no checks again
                shape = broadcast_shape(sa, sb)
                a = a if sa == shape else a._wrap(broadcast_uop(a.uop, sa, shape))
                b = b if sb == shape else b._wrap(broadcast_uop(b.uop, sb, shape))
            return (b, a) if reflected else (a, b)
        if type(other) is int or type(other) is float:
            dt = weak_promote(self.uop.dtype, other)  # as_const refuses an int that dt cannot hold
            a = self.cast(dt)
            b = a._wrap(broadcast_scalar(dt, other, a.shape))  # a scalar broadcasts to the tensor's shape
            return (b, a) if reflected else (a, b)
        other = as_operand(self, other)
        if isinstance(other, type(self)):
            check_devices("an elementwise op", (self, other))
            dt = promote_types(self.dtype, other.dtype)
            a, b = self, other
        else:
            if not isinstance(other, (bool, int, float, np.generic)):
                raise ArgumentTypeError(f"cannot combine a Tensor with {type(other).__name__}: an operand must be a "
                                        "Tensor, a scalar or an ndarray (make it one, e.g. Tensor(np.asarray(x)))")
            other = other.item() if isinstance(other, np.generic) else other
            dt = weak_promote(self.dtype, other)  # as_const refuses an int that dt cannot hold
            a, b = self, self._wrap(UOp.const(dt, as_const(other, dt)))
        a, b = a.cast(dt), b.cast(dt)
        shape = broadcast_shape(a.shape, b.shape)
        a, b = a._broadcast_to(shape), b._broadcast_to(shape)
        return (b, a) if reflected else (a, b)

    def _alu(self: Tensor, op: Op, *others: Tensor, dtype: DType | None = None) -> Tensor:
        shape, device, same = self.shape, self.device, True
        for o in others:
            if o.device != device:
                check_devices(op.name.lower(), (self, *others))  # raises
            if o.shape != shape:
                same = False
        src = (self.uop, *(o.uop for o in others)) if others else (self.uop,)
        dt = dtype or self.uop.dtype
        # sources of one shape: the node's shape is theirs, recorded now (else UOp.shape names the mismatch)
        return self._wrap(UOp.shaped(op, dt, src, None, shape) if same else UOp(op, dt, src))

    def _operand_nodes(self: Tensor, other: Any) -> tuple[UOp, UOp, tuple[sint, ...]] | None:
        """The common operands' fast path: for a Tensor of this class on this device and of this dtype, or an int
        or float scalar that keeps this dtype (`weak_promote`), the two operands' nodes broadcast to their
        shape, and that shape; None for anything else (`_coerce` handles it). The nodes are `_coerce`'s, without
        its intermediate Tensors (a broadcast operand's Tensor and registration cost as much as the op's node)."""
        u, sa = self.uop, self.shape
        if type(other) is type(self):
            ou = other.uop
            if other.device != self.device or ou.dtype is not u.dtype:
                return None
            sb = other.shape
            if sa == sb:
                return u, ou, sa
            shape = broadcast_shape(sa, sb)
            return broadcast_uop(u, sa, shape), broadcast_uop(ou, sb, shape), shape
        if (type(other) is int or type(other) is float) and weak_promote(u.dtype, other) is u.dtype:
            return u, broadcast_scalar(u.dtype, other, sa), sa
        return None

    def _binary(self: Tensor, op: Op, other: Any, reflected: bool = False) -> Tensor:
        if (nodes := self._operand_nodes(other)) is not None:
            xu, yu, shape = nodes
            return self._wrap(UOp.shaped(op, xu.dtype, (yu, xu) if reflected else (xu, yu), None, shape))
        a, b = self._coerce(other, reflected)
        return a._alu(op, b)

    def _difference(self: Tensor, other: Any, reflected: bool) -> Tensor:
        """`self - other` (`other - self` when `reflected`) as ADD(minuend, NEG(subtrahend)), the nodes
        `_coerce` and the operators would make, built directly in the common case (`_operand_nodes`)."""
        if (nodes := self._operand_nodes(other)) is not None and not dtypes.is_bool(self.uop.dtype):
            xu, yu, shape = nodes
            if reflected:
                xu, yu = yu, xu
            neg = UOp.shaped(Op.NEG, yu.dtype, (yu,), None, shape)
            return self._wrap(UOp.shaped(Op.ADD, xu.dtype, (xu, neg), None, shape))
        a, b = self._coerce(other, reflected)
        return a._alu(Op.ADD, -b)

    def cast(self: Tensor, dtype: Any) -> Tensor:
        if dtype is self.dtype:
            return self
        dt = dtypes.parse(dtype)
        return self if dt == self.dtype else self._alu(Op.CAST, dtype=dt)

    def _as_float(self: Tensor) -> Tensor:
        """This tensor, cast to the default float unless it holds floats already (for ops defined on floats)."""
        return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

    # ---- arithmetic ----
    def __add__(self: Tensor, other: Any) -> Tensor: return self._binary(Op.ADD, other)
    def __radd__(self: Tensor, other: Any) -> Tensor: return self._binary(Op.ADD, other, True)
    def __mul__(self: Tensor, other: Any) -> Tensor: return self._binary(Op.MUL, other)
    def __rmul__(self: Tensor, other: Any) -> Tensor: return self._binary(Op.MUL, other, True)

    def __sub__(self: Tensor, other: Any) -> Tensor: return self._difference(other, False)
    def __rsub__(self: Tensor, other: Any) -> Tensor: return self._difference(other, True)

    def __neg__(self: Tensor) -> Tensor:
        if dtypes.is_bool(self.dtype):
            raise TypeError("negation of a bool tensor: use logical_not")
        return self._alu(Op.NEG)

    def __truediv__(self: Tensor, other: Any) -> Tensor:
        a, b = self._coerce(other)
        a, b = a._as_float(), b._as_float()
        return a._alu(Op.FDIV, b)

    def __rtruediv__(self: Tensor, other: Any) -> Tensor:
        a, b = self._coerce(other, True)
        a, b = a._as_float(), b._as_float()
        return a._alu(Op.FDIV, b)

    def maximum(self: Tensor, other: Any) -> Tensor:
        a, b = self._coerce(other)
        if dtypes.is_bool(a.dtype):
            return a.cast(dtypes.uint8)._alu(Op.MAX, b.cast(dtypes.uint8)).cast(dtypes.bool)
        return a._alu(Op.MAX, b)

    def minimum(self: Tensor, other: Any) -> Tensor:
        a, b = self._coerce(other)
        if dtypes.is_float(a.dtype):  # through MAX, which keeps a NaN of either operand; negation is exact
            return -((-a)._alu(Op.MAX, -b))
        return (a < b).where(a, b)

    # ---- comparisons and selection ----
    def _cmp(self: Tensor, op: Op, other: Any, reflected: bool = False) -> Tensor:
        if (side := self._int_beyond_dtype(other)) is not None:
            # a Python int outside this integer dtype compares exactly (numpy 2): it lies above (side 1) or below
            # (side -1) every element, so the answer is one constant
            below = (side > 0) != reflected  # whether the left operand is the lesser
            answer = {Op.CMPLT: below, Op.CMPEQ: False, Op.CMPNE: True}[op]
            return self.full_like(answer, dtypes.bool)
        a, b = self._coerce(other, reflected)
        return a._alu(op, b, dtype=dtypes.bool)

    def _int_beyond_dtype(self: Tensor, other: Any) -> int | None:
        """1 or -1 when `other` is a Python int above or below every value of this integer tensor's dtype, else
        None."""
        if not dtypes.is_int(self.dtype) or isinstance(other, bool) or not isinstance(other, (int, np.integer)):
            return None
        v = int(other)
        return None if dtypes.fits(self.dtype, v) else (1 if v > 0 else -1)

    def _lt_or_eq(self: Tensor, other: Any, reflected: bool) -> Tensor:
        """`self <= other` (reflected: `other <= self`). Floats: `a < b or a == b`, which is False when either
        is NaN, as in numpy; `not (a > b)` would be True there. Bools and integers have no NaN: `not (a > b)`."""
        if self._int_beyond_dtype(other) is not None:
            return self._cmp(Op.CMPLT, other, reflected)  # a constant: no element equals the int
        a, b = self._coerce(other, reflected)
        if dtypes.is_float(a.dtype):
            return a._alu(Op.CMPLT, b, dtype=dtypes.bool) | a._alu(Op.CMPEQ, b, dtype=dtypes.bool)
        return b._alu(Op.CMPLT, a, dtype=dtypes.bool).logical_not()

    def __lt__(self: Tensor, other: Any) -> Tensor: return self._cmp(Op.CMPLT, other)
    def __gt__(self: Tensor, other: Any) -> Tensor: return self._cmp(Op.CMPLT, other, True)
    def __le__(self: Tensor, other: Any) -> Tensor: return self._lt_or_eq(other, False)
    def __ge__(self: Tensor, other: Any) -> Tensor: return self._lt_or_eq(other, True)
    def __eq__(self: Tensor, other: Any) -> Tensor: return self._cmp(Op.CMPEQ, other)  # type: ignore[override]  # a Tensor, not bool
    def __ne__(self: Tensor, other: Any) -> Tensor: return self._cmp(Op.CMPNE, other)  # type: ignore[override]  # a Tensor, not bool
    __hash__ = object.__hash__

    def where(self: Tensor, x: Any, y: Any) -> Tensor:
        """Elementwise `x if self else y`, broadcasting all three; scalars are weak as in arithmetic, ndarrays
        become Tensors on this device. All Tensors must be on one device (DeviceMismatchError)."""
        x, y = as_operand(self, x), as_operand(self, y)
        check_devices("where", [t for t in (self, x, y) if isinstance(t, type(self))])
        if not isinstance(x, type(self)):
            if not isinstance(y, type(self)):
                dt = dtypes.default_float if any(isinstance(v, float) for v in (x, y)) else \
                    promote_types(dtypes.from_py(x), dtypes.from_py(y))
                y = type(self)(UOp.const(dt, as_const(y, dt)), self.device)
            y, x = y._coerce(x)
        else:
            x, y = x._coerce(y)
        shape = broadcast_shape(self.shape, x.shape)
        cond = self.cast(dtypes.bool)._broadcast_to(shape)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return type(self)(UOp(Op.WHERE, x.dtype, (cond.uop, x.uop, y.uop)), self.device)

    # ---- rounding ----
    def trunc(self: Tensor) -> Tensor:
        return self._alu(Op.TRUNC) if dtypes.is_float(self.dtype) else self

    def floor(self: Tensor) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self: Tensor) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self: Tensor) -> Tensor:
        """Round half to even (numpy's `round`, torch's `round`); integers and bools are unchanged. A zero
        result keeps the input's sign (round(-0.4) = -0.0); values from 2^(mantissa bits) on are integers already,
        and +-inf and NaN stay. Half floats round in float32 (their results are exact there)."""
        if not dtypes.is_float(self.dtype):
            return self
        if self.dtype.itemsize == 2:
            return self.cast(dtypes.float32).round().cast(self.dtype)
        whole = 2.0 ** (23 if self.dtype.itemsize == 4 else 52)
        fl = self.floor()
        frac = self - fl  # exact: x and floor(x) share their leading bits
        odd = (fl - (fl * 0.5).floor() * 2) == 1
        up = (frac > 0.5) | ((frac == 0.5) & odd)
        r = up.where(fl + 1, fl)
        r = (r == 0).where(_signed_zero(self), r)
        return (self.abs() < whole).where(r, self.detach())  # NaN and inf: not below `whole`

    def isnan(self: Tensor) -> Tensor:
        """True where the element is NaN (never for integers and bools)."""
        return self != self if dtypes.is_float(self.dtype) else self.full_like(False, dtypes.bool)

    def isinf(self: Tensor) -> Tensor:
        """True where the element is +inf or -inf (never for integers and bools)."""
        if not dtypes.is_float(self.dtype):
            return self.full_like(False, dtypes.bool)
        return (self == math.inf) | (self == -math.inf)

    def isfinite(self: Tensor) -> Tensor:
        """True where the element is neither infinite nor NaN (always for integers and bools)."""
        if not dtypes.is_float(self.dtype):
            return self.full_like(True, dtypes.bool)
        return (self < math.inf) & (self > -math.inf)

    def sign(self: Tensor) -> Tensor:
        """-1, 0 or 1 in this dtype (numpy's `sign`): sign(-0.0) = 0.0, NaN gives NaN (torch gives 0 there); bools
        are unchanged, unsigned integers give 0 or 1."""
        if dtypes.is_bool(self.dtype):
            return self
        if dtypes.is_float(self.dtype):
            return (self > 0).where(1.0, (self < 0).where(-1.0, (self == 0).where(0.0, self)))
        pos = (self > 0).cast(self.dtype)
        return pos if dtypes.is_unsigned(self.dtype) else pos - (self < 0).cast(self.dtype)

    def fmod(self: Tensor, other: Any) -> Tensor:
        """C's fmod (numpy's `fmod`, torch's `fmod`): the remainder of division truncated toward zero, with the
        dividend's sign (`%` takes the divisor's). Floats: fmod(x, 0), fmod(+-inf, y) and NaN give NaN,
        fmod(x, +-inf) = x, signed zeros kept. Integers: x fmod 0 is 0, as numpy gives (and `%` does), and
        INT_MIN fmod -1 is 0."""
        a, b = self._coerce(other)
        if dtypes.is_bool(a.dtype):
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if dtypes.is_float(a.dtype):
            return a._alu(Op.MOD, b)
        trap = (b == 0) | (b == -1) if not dtypes.is_unsigned(a.dtype) else b == 0  # C traps at x/0 and INT_MIN/-1
        return trap.where(0, a._alu(Op.MOD, trap.where(1, b)))

    # ---- floor division and modulo ----
    def _divmod(self: Tensor, other: Any, reflected: bool) -> tuple[Tensor, Tensor]:
        """(a // b, a % b) with numpy's semantics: floor division and a remainder with the divisor's sign;
        integer x // 0 and x % 0 are 0 (C would trap)."""
        a, b = self._coerce(other, reflected)
        if dtypes.is_bool(a.dtype):
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if dtypes.is_float(a.dtype):
            return _float_divmod(a, b)
        zero = b == 0
        signed = not dtypes.is_unsigned(a.dtype)
        minus_one = b == -1
        safe = ((zero | minus_one) if signed else zero).where(1, b)  # x/0 and INT_MIN/-1 trap in C
        q, r = a._alu(Op.IDIV, safe), a._alu(Op.MOD, safe)
        if signed:
            q, r = minus_one.where(-a, q), minus_one.where(0, r)
            step = (r != 0) & ((r < 0) != (safe < 0))  # truncation rounded up: step down to the floor
            q, r = step.where(q - 1, q), step.where(r + safe, r)
        return zero.where(0, q), zero.where(0, r)

    def __floordiv__(self: Tensor, other: Any) -> Tensor: return self._divmod(other, False)[0]
    def __rfloordiv__(self: Tensor, other: Any) -> Tensor: return self._divmod(other, True)[0]
    def __mod__(self: Tensor, other: Any) -> Tensor: return self._divmod(other, False)[1]
    def __rmod__(self: Tensor, other: Any) -> Tensor: return self._divmod(other, True)[1]

    # ---- powers ----
    def pow(self: Tensor, exponent: Any, reflected: bool = False) -> Tensor:
        """`self ** exponent` (or `exponent ** self` when reflected), with the semantics of the module docstring."""
        if (not reflected and isinstance(exponent, (int, float)) and not isinstance(exponent, bool)
                and float(exponent).is_integer() and abs(exponent) <= 64):
            return self._pow_int_scalar(int(exponent), float_exp=isinstance(exponent, float))
        a, b = self._coerce(exponent, reflected)
        if dtypes.is_bool(a.dtype):
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if not dtypes.is_float(a.dtype):
            return a._pow_int_tensor(b)
        return _float_pow(a, b)

    def _pow_int_scalar(self: Tensor, n: int, float_exp: bool) -> Tensor:
        x = self._as_float() if float_exp else (self.cast(dtypes.default_int) if dtypes.is_bool(self.dtype) else self)
        if n < 0 and not dtypes.is_float(x.dtype):
            raise DTypeError(f"integer tensor ({x.dtype.name}) to a negative integer power {n}: cast to float first")
        result, base, m = None, x, abs(n)
        while m:  # square and multiply: exact for integers, few roundings for floats
            if m & 1:
                result = base if result is None else result * base
            m >>= 1
            if m:
                base = base * base
        if result is None:
            return x.full_like(1)
        return 1 / result if n < 0 else result

    def _pow_int_tensor(self: Tensor, e: Tensor) -> Tensor:
        result, base = self.full_like(1), self
        for bit in range(8 * e.dtype.itemsize - (0 if dtypes.is_unsigned(e.dtype) else 1)):
            result = (((e >> bit) & 1) == 1).where(result * base, result)
            base = base * base
        if dtypes.is_unsigned(e.dtype):
            return result
        # torch: x ** negative is 0, except 1 ** n = 1 and (-1) ** n = +-1
        sign = ((e & 1) == 1).where(self, self.full_like(1))
        return (e < 0).where((self == 1).where(1, (self == -1).where(sign, 0)), result)

    def __pow__(self: Tensor, other: Any) -> Tensor: return self.pow(other)
    def __rpow__(self: Tensor, other: Any) -> Tensor: return self.pow(other, reflected=True)

    # ---- unary maths ----
    def relu(self: Tensor) -> Tensor:
        """max(x, 0); its gradient is torch's: 0 where x <= 0 (at 0 too, where max's tie rule would give 1/2),
        1 elsewhere (NaN passes it, as torch's does)."""
        if not (dtypes.is_float(self.dtype) and autograd.gradients_expected()):
            return self.maximum(0)
        # one node where a gradient is expected: its backward is then one node too (frontend/composite.py)
        if (node := as_node("relu", _relu, (self,))) is not None:
            return node
        return _relu(self)

    def exp(self: Tensor) -> Tensor:
        return (self._as_float() * _LOG2_E)._alu(Op.EXP2)

    def log(self: Tensor) -> Tensor:
        return self._as_float()._alu(Op.LOG2) * _LN_2

    def sqrt(self: Tensor) -> Tensor:
        return self._as_float()._alu(Op.SQRT)


    def abs(self: Tensor) -> Tensor:
        if dtypes.is_bool(self.dtype) or dtypes.is_unsigned(self.dtype):
            return self
        if dtypes.is_float(self.dtype):  # + 0.0 turns -0.0 into 0.0 (numpy's abs(-0.0)) and keeps everything else
            return (self < 0).where(-self, self) + 0.0
        return (self < 0).where(-self, self)

    def exp2(self: Tensor) -> Tensor:
        return self._as_float()._alu(Op.EXP2)

    def log2(self: Tensor) -> Tensor:
        return self._as_float()._alu(Op.LOG2)

    def rsqrt(self: Tensor) -> Tensor:
        return self.sqrt()._alu(Op.RECIPROCAL)

    def reciprocal(self: Tensor) -> Tensor:
        return self._as_float()._alu(Op.RECIPROCAL)

    def sin(self: Tensor) -> Tensor:
        return self._as_float()._alu(Op.SIN)

    def cos(self: Tensor) -> Tensor:
        return self._as_float()._alu(Op.COS)

    def square(self: Tensor) -> Tensor:
        return self * self

    def sigmoid(self: Tensor) -> Tensor:
        """1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below: e = exp(-|x|) never overflows, so the tail below
        x = -88 keeps its (subnormal) value instead of 1 / inf = 0."""
        x = self._as_float()
        return x._wrap(_activation("sigmoid", Nodes(x.uop, x.shape), _whole(x)).u)

    def tanh(self: Tensor) -> Tensor:
        """tanh(x) = sign(x) * (1 - e) / (1 + e) with e = exp(-2|x|), which keeps its relative precision where
        2*sigmoid(2x) - 1 cancels; below |x| = 1/4 (where 1 - e cancels) its Taylor series to x^9, whose next
        term is below 2^-26 of the result there (float64: below |x| = 1/64, where that term is below 2^-60, and the
        cancellation above it costs at most 2^-48). NaN stays NaN; +-inf gives +-1; -0.0 stays -0.0."""
        x = self._as_float()
        return x._wrap(_activation("tanh", Nodes(x.uop, x.shape), _whole(x)).u)

    def silu(self: Tensor) -> Tensor:
        x = self._as_float()
        n = Nodes(x.uop, x.shape)
        return x._wrap((n * _activation("sigmoid", n, _whole(x))).u)

    def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
        """GELU: `approximate="tanh"` (the default here, tinygrad's) or `"none"`, the exact x * Phi(x) by `erf`
        (torch's default, which nn.functional.gelu keeps)."""
        x = self._as_float()
        if approximate == "none":
            return 0.5 * x * (1 + (x * _SQRT_HALF).erf())
        if approximate != "tanh":
            raise ArgumentError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
        n = Nodes(x.uop, x.shape)
        return x._wrap((0.5 * n * (1 + _activation("tanh", _SQRT_2_OVER_PI * (n + 0.044715 * n * n * n), _whole(x)))).u)

    def erf(self: Tensor) -> Tensor:
        """The error function. |x| < 1: its Maclaurin series through x^19 (truncation below 1.5e-8); otherwise
        1 - erfc(|x|) with the sign of x, erfc by Numerical Recipes' Chebyshev fit t exp(-z^2 + P(t)),
        t = 1 / (1 + z/2) (fractional error below 1.2e-7). Each branch reads its input clamped to its own range,
        so the unused branch never overflows and its zero gradient stays finite. Measured in float32 on CPU
        against math.erf over [-6, 6] in steps of 1e-4: max absolute error 1.4e-7 (about 2 ulp near 0.85), max
        relative error 1.7e-7 (tests/nn/test_functions.py checks both bounds)."""
        x = self._as_float()
        small = x.clip(-1.0, 1.0)
        s2 = small * small
        series = s2 * _ERF_SERIES[-1] + _ERF_SERIES[-2]
        for c in reversed(_ERF_SERIES[:-2]):
            series = series * s2 + c
        series = series * small
        z = x.abs().clip(1.0, 10.0)
        t = (1 + 0.5 * z).reciprocal()
        poly = t * _ERFC_FIT[-1] + _ERFC_FIT[-2]
        for c in reversed(_ERFC_FIT[:-2]):
            poly = poly * t + c
        erfc = t * (poly - z * z).exp()
        big = (x < 0).where(erfc - 1, 1 - erfc)
        return (x.abs() < 1.0).where(series, big)

    def clip(self: Tensor, min_: Any = None, max_: Any = None) -> Tensor:
        """torch.clamp: values below `min_` become `min_`, above `max_` become `max_`; nan stays nan."""
        if min_ is None and max_ is None:
            raise ValueError("clip needs min_ or max_")
        x = self
        if min_ is not None:
            a, lo = x._coerce(x._clip_bound(min_, -1))
            x = (a < lo).where(lo, a)
        if max_ is not None:
            a, hi = x._coerce(x._clip_bound(max_, 1))
            x = (a > hi).where(hi, a)
        return x

    def _clip_bound(self: Tensor, bound: Any, side: int) -> Any:
        """A Python int bound beyond this integer tensor's dtype on its own `side` (-1: a lower bound below the
        dtype, 1: an upper bound above it) bounds nothing: the dtype's nearest end clips exactly as the bound
        would (numpy 2 clips exactly; wrapping it would clip int8 data to -200 as to -56). On the other side
        every element would become the bound, which the dtype cannot hold: as_const raises
        ScalarOverflowError, as numpy 2 does."""
        if self._int_beyond_dtype(bound) != side:
            return bound
        return dtypes.max(self.dtype) if side > 0 else dtypes.min(self.dtype)

    clamp = clip

    # ---- masks ----
    def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
        """`value` where the boolean `mask` (broadcast against this tensor) is True, this tensor elsewhere."""
        if not dtypes.is_bool(mask.dtype):
            raise DTypeError(f"masked_fill needs a bool mask, got {mask.dtype.name}: compare first (mask = m != 0)")
        out = mask.where(value, self)
        return out.cast(self.dtype) if out.dtype != self.dtype else out

    def _triangle(self: Tensor, diagonal: int, lower: bool) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(f"{'tril' if lower else 'triu'} needs at least 2 dimensions, got shape {self.shape}")
        r, c = self.shape[-2:]
        rows = type(self).arange(r, device=self.device).reshape(r, 1)
        cols = type(self).arange(c, device=self.device).reshape(1, c)
        keep = (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)
        return keep.where(self, type(self).full((), 0, self.dtype, self.device))

    def tril(self: Tensor, diagonal: int = 0) -> Tensor:
        """Elements on and below diagonal `diagonal` of the last two axes (0: the main one, >0 above it); the
        rest are zero (torch.tril)."""
        return self._triangle(diagonal, True)

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:
        """Elements on and above diagonal `diagonal` of the last two axes; the rest are zero (torch.triu)."""
        return self._triangle(diagonal, False)

    # ---- logical and bitwise ----
    def _bitwise(self: Tensor, op: Op, other: Any, reflected: bool = False, shift: bool = False) -> Tensor:
        a, b = self._coerce(other, reflected)
        if dtypes.is_float(a.dtype) or (shift and dtypes.is_bool(a.dtype)):
            raise DTypeError(f"{op.name.lower()} needs {'integer' if shift else 'bool or integer'} tensors, "
                             f"got {a.dtype.name}")
        return a._alu(op, b)

    def __and__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.AND, other)
    def __rand__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.AND, other, True)
    def __or__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.OR, other)
    def __ror__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.OR, other, True)
    def __xor__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.XOR, other)
    def __rxor__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.XOR, other, True)
    def __lshift__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.SHL, other, shift=True)
    def __rlshift__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.SHL, other, True, shift=True)
    def __rshift__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.SHR, other, shift=True)
    def __rrshift__(self: Tensor, other: Any) -> Tensor: return self._bitwise(Op.SHR, other, True, shift=True)

    def __invert__(self: Tensor) -> Tensor:
        if dtypes.is_bool(self.dtype):
            return self.logical_not()
        if dtypes.is_float(self.dtype):
            raise DTypeError(f"bitwise not needs bool or integer tensors, got {self.dtype.name}")
        return self ^ dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else self ^ -1

    bitwise_not = __invert__

    def logical_and(self: Tensor, other: Any) -> Tensor:
        a, b = self._coerce(other)
        return a.cast(dtypes.bool)._alu(Op.AND, b.cast(dtypes.bool))

    def logical_not(self: Tensor) -> Tensor:
        return self.cast(dtypes.bool)._alu(Op.CMPNE, type(self)(UOp.const(dtypes.bool, True), self.device)
                                            ._broadcast_to(self.shape), dtype=dtypes.bool)

    def logical_or(self: Tensor, other: Any) -> Tensor:
        a, b = self._coerce(other)
        return a.cast(dtypes.bool)._alu(Op.OR, b.cast(dtypes.bool))

    def logical_xor(self: Tensor, other: Any) -> Tensor:
        a, b = self._coerce(other)
        return a.cast(dtypes.bool)._alu(Op.CMPNE, b.cast(dtypes.bool))

    # ---- reinterpretation ----
    def bitcast(self: Tensor, dtype: Any) -> Tensor:
        """The same bits read as `dtype` (numpy's `.view`). To a type of another size the last axis is rescaled,
        lanes least significant first, so its bytes must divide evenly (a 0-d tensor needs equal sizes)."""
        dt = dtypes.parse(dtype)
        if dtypes.is_bool(dt) or dtypes.is_bool(self.dtype):
            raise DTypeError(f"bitcast from {self.dtype.name} to {dt.name}: bool cannot be bitcast")
        if dt.itemsize != self.dtype.itemsize:
            last = self.shape[-1] * self.dtype.itemsize if self.shape else 0
            if not isinstance(last, int) or last % dt.itemsize:
                raise DTypeError(f"bitcast from {self.dtype.name} to {dt.name} of shape {self.shape}: the last axis "
                                 f"holds {last} bytes, not a whole number of {dt.itemsize}-byte elements")
        return self if dt == self.dtype else type(self)(UOp(Op.BITCAST, dt, (self.uop,)), self.device)


def _signed_zero(x: Tensor) -> Tensor:
    """0.0 carrying the sign of `x` (C's copysign(0, x)): -0.0 for negative x and for -0.0 itself."""
    return sign_bit(x).where(-0.0, 0.0).cast(x.dtype)


def _float_pow(a: Tensor, b: Tensor) -> Tensor:
    """C99's pow(a, b) (numpy's and torch's): |a| ** b as exp2(b * log2|a|), then the special cases in order.
    pow(x, +-0) = 1 and pow(1, y) = 1, NaN included; pow(-1, +-inf) = 1; a negative or signed-zero base with an
    odd integer exponent keeps its sign (pow(-0.0, -3) = -inf, pow(-inf, 3) = -inf); a finite negative base
    with a non-integer exponent is NaN; pow(-inf, y) is +-inf or +-0 by y's sign (pow(-inf, 0.5) = inf)."""
    mag = (b * a.abs()._alu(Op.LOG2))._alu(Op.EXP2)
    integral = b.trunc() == b  # False for NaN, True for +-inf
    odd = integral & ((b - (b * 0.5).floor() * 2) == 1)  # inf - inf is NaN: an infinite exponent is even
    one = (b == 0) | (a == 1) | ((a == -1) & (b.abs() == math.inf))
    undefined = (a < 0) & (a != -math.inf) & integral.logical_not()
    signed = (odd & sign_bit(a)).where(-mag, mag)
    return one.where(1.0, undefined.where(math.nan, signed))


def _float_divmod(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """numpy's float divmod, step for step: the exact remainder fmod(a, b) moved to the divisor's sign, and the
    quotient (a - remainder) / b rounded to the nearest integer, so that a == b * q + r as closely as floats
    allow (floor(a / b) alone is off by one where a / b rounds up to an integer)."""
    mod = a._alu(Op.MOD, b)
    div = (a - mod) / b
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    mod = fix.where(mod + b, (mod == 0).where(_signed_zero(b), mod))
    div = fix.where(div - 1, div)
    floor = div.floor()
    floor = (div - floor > 0.5).where(floor + 1, floor)
    quot = (div == 0).where(_signed_zero(a / b), floor)
    return (b == 0).where(a / b, quot), mod


def _relu(x: Tensor) -> Tensor:
    """The formula of a relu node where a gradient is expected: max(x, 0) (the same value wherever x is selected),
    its gradient reaching x only where x <= 0 is false."""
    return (x <= 0).where(x.maximum(0).detach(), x)
