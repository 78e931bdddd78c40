"""Float formulas built as nodes: the composite activations' fast path (sigmoid, tanh, ...).

A composite like `tanh` is a dozen elementwise ops over one float tensor and Python constants. Written with
Tensor operators, every intermediate is a Tensor whose operands are coerced (dtype promotion, device check,
broadcast) and which is registered as lazy: ~30 µs of Python per op, ~0.7 ms per `tanh`, which is most of an
eager recurrent step. `Nodes` builds the same graph directly: its operands are one float dtype and one shape by
construction, so each op is the node alone.

Contract: every operation here makes exactly the node the Tensor operator of the same name makes for float
operands of one shape and weak Python scalars (elementwise.py: `a + 1` is ADD(a, 1), `1 + a` is ADD(1, a),
`a - b` is ADD(a, NEG(b)), `a / b` is FDIV, `exp` is EXP2(a * log2(e)), `abs` is where(a < 0, -a, a) + 0.0,
constants are seeded and broadcast as `_coerce` does), so a formula built here and the same formula written with
Tensor operators are one graph (interned nodes: the same objects). tests/frontend/test_nodes.py checks each
operation against its Tensor twin.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Union

from tolk_core.frontend.construction import as_const
from tolk_core.frontend.movement import broadcast_uop
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, sint
from tolk_core.schedule import placements

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

_LOG2_E = math.log2(math.e)

Operand = Union["Nodes", float, int]


# (dtype, Python type, value, sign, shape) -> the broadcast constant node: a scalar operand costs three nodes
# (CONST, RESHAPE, EXPAND) and most of a Tensor op's time where it is built each time; the same few constants
# at the same few shapes recur on every step (0.5, 1, an optimizer's betas). Holds its nodes alive; cleared
# when full.
_scalars: dict[tuple, UOp] = {}
_SCALARS_MAX = 4096


def broadcast_scalar(dt: DType, v: bool | int | float, shape: tuple[sint, ...]) -> UOp:
    """Python scalar `v` as a constant of `dt` (ScalarOverflowError for an int `dt` cannot hold), seeded as a
    constant and broadcast to `shape`: the node of a weak scalar operand, as a Tensor operator makes it."""
    # -0.0 and 0.0 are equal keys but different constants; a NaN is never equal to itself (built each time)
    key = (dt, type(v), v, math.copysign(1.0, v) if type(v) is float else 0, shape)
    if (hit := _scalars.get(key)) is not None:
        return hit
    c = UOp.const(dt, as_const(v, dt))
    placements.seed_constant(c)
    out = broadcast_uop(c, (), shape)
    if len(_scalars) >= _SCALARS_MAX:
        _scalars.clear()
    _scalars[key] = out
    return out


class Nodes:
    """A float value of shape `shape` as a node `u` (dtype `u.dtype`; comparisons give bool Nodes)."""

    __slots__ = ("u", "shape")

    def __init__(self, u: UOp, shape: tuple[sint, ...]) -> None:
        self.u, self.shape = u, shape

    # ---- building blocks ----
    def const(self, v: float | int, dtype: DType | None = None) -> UOp:
        """Python scalar `v` as this value's dtype (or `dtype`), broadcast to its shape (a weak scalar)."""
        return broadcast_scalar(dtype or self.u.dtype, v, self.shape)

    def _node(self, o: Operand) -> UOp:
        return o.u if isinstance(o, Nodes) else self.const(o)

    def _op(self, op: Op, *src: UOp, dtype: DType | None = None) -> Nodes:
        return Nodes(UOp.shaped(op, dtype or src[0].dtype, src, None, self.shape), self.shape)

    # ---- arithmetic (the Tensor operators' nodes) ----
    def __add__(self, o: Operand) -> Nodes: return self._op(Op.ADD, self.u, self._node(o))
    def __radd__(self, o: Operand) -> Nodes: return self._op(Op.ADD, self._node(o), self.u)
    def __mul__(self, o: Operand) -> Nodes: return self._op(Op.MUL, self.u, self._node(o))
    def __rmul__(self, o: Operand) -> Nodes: return self._op(Op.MUL, self._node(o), self.u)
    def __truediv__(self, o: Operand) -> Nodes: return self._op(Op.FDIV, self.u, self._node(o))
    def __rtruediv__(self, o: Operand) -> Nodes: return self._op(Op.FDIV, self._node(o), self.u)
    def __neg__(self) -> Nodes: return self._op(Op.NEG, self.u)

    def __sub__(self, o: Operand) -> Nodes:
        return self._op(Op.ADD, self.u, self._op(Op.NEG, self._node(o)).u)

    def __rsub__(self, o: Operand) -> Nodes:
        return self._op(Op.ADD, self._node(o), (-self).u)

    def __lt__(self, o: Operand) -> Nodes:
        return self._op(Op.CMPLT, self.u, self._node(o), dtype=dtypes.bool)

    def __gt__(self, o: Operand) -> Nodes:
        return self._op(Op.CMPLT, self._node(o), self.u, dtype=dtypes.bool)

    def where(self, a: Operand, b: Operand) -> Nodes:
        """`a if self else b` (self a bool Nodes); a scalar branch takes the other branch's dtype."""
        dt = a.u.dtype if isinstance(a, Nodes) else b.u.dtype if isinstance(b, Nodes) else dtypes.default_float
        na = a.u if isinstance(a, Nodes) else self.const(a, dt)
        nb = b.u if isinstance(b, Nodes) else self.const(b, dt)
        return self._op(Op.WHERE, self.u, na, nb, dtype=dt)

    # ---- functions ----
    def exp(self) -> Nodes:
        return self._op(Op.EXP2, (self * _LOG2_E).u)

    def abs(self) -> Nodes:
        """|x| with -0.0 made 0.0 (the `+ 0.0`), as Tensor.abs for floats."""
        return (self < 0).where(-self, self) + 0.0

    def reciprocal(self) -> Nodes:
        return self._op(Op.RECIPROCAL, self.u)

    def sqrt(self) -> Nodes:
        return self._op(Op.SQRT, self.u)

    @staticmethod
    def of(t: Tensor, shape: tuple[sint, ...]) -> Nodes:
        """Tensor `t` broadcast to `shape` (which it broadcasts to), as Nodes: an operand of one shape."""
        return Nodes(broadcast_uop(t.uop, t.shape, shape), shape)
