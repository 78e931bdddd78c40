"""Softmax along one axis, with its gradient given as a whole (docs/training.md, "Softmax gradient").

Contract: `softmax(x, axis)` is exp(x - max) / sum(exp(x - max)) along `axis` (x a float tensor; the caller
casts). A row of -inf gives NaN (0/0, torch's softmax), or zeros with `masked_rows_zero` (torch's
scaled_dot_product_attention, where such a row is a query every mask hides); +inf or NaN anywhere in a row
gives NaN in that row.

Its gradient is registered with `autograd.define_gradient` on the output node: for an upstream gradient g,
dx = p * (g - sum(g * p)), p the output. The node-by-node rules give the same value through a longer graph:
they differentiate the row maximum (a comparison against every element and a tie count), the division (which
reads the row sum) and the exponential (which reads exp(x - max), so that value had to be stored for the
backward pass). Here the backward reads only the stored output and g, so the forward's exp row stays inside
the one row kernel that computes the output (docs/placements.md, row fusion), and the backward is one row
kernel as well: its row sum of g * p is fused the same way.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from tolk_core.ir.uop import UOp

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def softmax(x: Tensor, axis: int, masked_rows_zero: bool = False) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis` (keeping every axis), differentiated by `_vjp`."""
    # the row values are broadcast before any other op reads them: a value computed from a row reduction and
    # then broadcast is stored (docs/placements.md, row fusion), one broadcast straight off it is fused
    m = x.max(axis=axis, keepdim=True).expand(x.shape)
    if masked_rows_zero:  # a row of -inf: shifted by 0 its exps are all 0, and so is its output (not 0/0)
        m = (m == float("-inf")).where(0.0, m)
    e = (x - m).exp()
    total = e.sum(axis=axis, keepdim=True).expand(x.shape)
    out = e / total
    if masked_rows_zero:  # the sum is 0 only when every exp is: the row's maximum is exp(0) = 1 otherwise
        out = (total == 0).where(0.0, out)
    from tolk_core.frontend import autograd  # deferred, as Tensor.backward does
    autograd.define_gradient(out.uop, _vjp(x, out, axis))
    return out


def _vjp(x: Tensor, out: Tensor, axis: int) -> Callable[[UOp], list[tuple[UOp, UOp]]]:
    """The gradient of softmax's output `out` of `x` along `axis`: the pair (x, p * (g - sum(g * p)))."""
    # the graph's nodes, not the Tensors: a Tensor kept alive here would count as a live lazy value (see
    # nn_ops._conv_vjp). The output node only weakly: the gradient table is keyed weakly on it, and a value
    # holding its key would keep the node (and the buffer it is realized into) alive for good, so the same
    # softmax built again would be found realized instead of computed
    new, device, xu, pref = type(x), x.device, x.uop, weakref.ref(out.uop)

    def vjp(g: UOp) -> list[tuple[UOp, UOp]]:
        pu = pref()
        assert pu is not None, "a gradient is asked of a node that no longer exists"
        gt, p = new(g, device), new(pu, device)
        return [(xu, (p * (gt - (gt * p).sum(axis=axis, keepdim=True))).uop)]
    return vjp
