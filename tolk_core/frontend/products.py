"""Matrix products as nodes: the formula `Tensor.matmul` builds, and the composite that keeps it one node.

A product of a (batch_a..., n, k) and b (batch_b..., k, m) is the elementwise product of a as (n, 1, k) and b^T
as (1, m, k), both broadcast to (batch..., n, m, k), summed over k: eight tensor-level nodes. An eager step
builds them on every call, and every walk of the step's graph (the schedule cache's key, the placements
digest, autograd) visits them. So a product of one float or integer dtype with shapes of plain ints on one
device, built where no gradient is expected (`autograd.gradients_expected`: under `no_grad`, or while no tensor
requires grad: inference), is one `CALL(a, b)` node with the `MATMUL` composite (ir/calls.py), which
prepare_rangeify expands into exactly the formula's nodes: the kernels are those of the formula. Its gradient,
should one be asked after all, is the formula's, by the rules applied to the formula's few nodes
(`autograd.formula_gradient`), so second-order gradients work as before. A training graph keeps the formula's
nodes: differentiating the node builds the formula again, and the backward pass reads the formula's operand
nodes anyway, so the node would cost a training step more than it saves (measured: docs/performance.md).

Contract: `matmul_formula(a, b)` and `MATMUL.expand(a, b)` are the same interned nodes; `product_nodes` is the
elementwise product before the sum, for the dtypes whose sum is not in the operands' dtype (bool: an OR of
ANDs, half floats: summed in float32), which `Tensor.matmul` reduces itself.
"""
from __future__ import annotations

from tolk_core.frontend import autograd
from tolk_core.frontend.movement import broadcast_shape, broadcast_uop
from tolk_core.ir.calls import Composite
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, sint


def batch_shape(sa: tuple[sint, ...], sb: tuple[sint, ...]) -> tuple[sint, ...]:
    """The broadcast batch axes of operands of shapes `sa` (..., n, k) and `sb` (..., k, m)."""
    if len(sa) <= 2 and len(sb) <= 2:
        return ()
    return broadcast_shape(sa[:-2], sb[:-2])  # type: ignore[arg-type]  # (a symbolic size passes through)


def product_nodes(au: UOp, bu: UOp, sa: tuple[sint, ...], sb: tuple[sint, ...]) -> UOp:
    """The elementwise product (batch..., n, m, k) of `au` (shape `sa`, (..., n, k)) and `bu` (shape `sb`,
    (..., k, m)), one dtype, shapes checked by the caller: the movements are built on the nodes directly, with
    their shapes (the public reshape/expand would validate each again and make a Tensor of each)."""
    return _product(au, operand_b(bu, sa, sb), sa, sb)


def operand_b(bu: UOp, sa: tuple[sint, ...], sb: tuple[sint, ...]) -> UOp:
    """b (shape `sb`, (..., k, m)) as its product with an a of shape `sa` reads it: transposed and broadcast
    to (batch..., n, m, k). One node for every product of that b with an a of that shape (interned): a
    recurrent step's weight, which is where the gradients of all its steps meet."""
    batch, dt = batch_shape(sa, sb), bu.dtype
    nb, n, (k, m) = len(batch), sa[-2], sb[-2:]
    b_rows = batch + (1, m, k)
    bu = broadcast_uop(bu, sb, batch + (k, m))
    bu = UOp.shaped(Op.PERMUTE, dt, (bu,), tuple(range(nb)) + (nb + 1, nb), batch + (m, k))
    return broadcast_uop(UOp.shaped(Op.RESHAPE, dt, (bu,), b_rows, b_rows), b_rows, batch + (n, m, k))


def _product(au: UOp, b_read: UOp, sa: tuple[sint, ...], sb: tuple[sint, ...]) -> UOp:
    """`product_nodes` of `au` and b as `operand_b` reads it (`b_read`)."""
    batch, dt = batch_shape(sa, sb), au.dtype
    n, k = sa[-2:]
    full, a_rows = batch + (n, sb[-1], k), batch + (n, 1, k)
    au = broadcast_uop(au, sa, batch + (n, k))
    au = broadcast_uop(UOp.shaped(Op.RESHAPE, dt, (au,), a_rows, a_rows), a_rows, full)
    return UOp.shaped(Op.MUL, dt, (au, b_read), None, full)


def matmul_formula(au: UOp, bu: UOp) -> UOp:
    """a @ b as the formula's nodes (what `sum(axis=-1)` of the product builds, in the operands' dtype: the
    reduce, then a reshape dropping the summed axis)."""
    return matmul_read(au, operand_b(bu, au.tensor_shape, bu.tensor_shape), au.tensor_shape, bu.tensor_shape)


def matmul_read(au: UOp, b_read: UOp, sa: tuple[sint, ...], sb: tuple[sint, ...]) -> UOp:
    """`matmul_formula` of `au` (shape `sa`) and a b of shape `sb` given as `operand_b` reads it."""
    product, dt = _product(au, b_read, sa, sb), au.dtype
    out = batch_shape(sa, sb) + (sa[-2], sb[-1])
    summed = UOp.shaped(Op.REDUCE_AXIS, dt, (product,), (Op.ADD, (len(out),)), out + (1,))
    return UOp.shaped(Op.RESHAPE, dt, (summed,), out, out)


def _out_shape(src: tuple[UOp, ...]) -> tuple | None:
    sa, sb = src[0]._shape, src[1]._shape
    return None if sa is None or sb is None else batch_shape(sa, sb) + (sa[-2], sb[-1])


def _slope(y: UOp, g: UOp) -> tuple[UOp | None, ...]:
    """d/da and d/db of y = a @ b reached by g: the rules over the formula's nodes (g @ b^T and a^T @ g, summed
    over the axes a broadcast batch added). For a @ a, the whole derivative goes to the first source."""
    return autograd.formula_slope(matmul_formula, y, g)


MATMUL = Composite("matmul", matmul_formula, _slope, _out_shape)


def matmul_node(au: UOp, bu: UOp, sa: tuple[sint, ...], sb: tuple[sint, ...]) -> UOp:
    """a @ b as one composite node, of the shape the formula has (operands of one dtype, checked shapes)."""
    return UOp.shaped(Op.CALL, au.dtype, (au, bu), MATMUL, batch_shape(sa, sb) + (sa[-2], sb[-1]))
