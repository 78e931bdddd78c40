"""Recurrent cells as torch defines them: GRUCell and LSTMCell.

Weights are stacked by gate along the first axis, in torch's order (GRU: reset r, update z, new n; LSTM:
input i, forget f, cell g, output o), named weight_ih (G*hidden, input), weight_hh (G*hidden, hidden),
bias_ih, bias_hh (G*hidden), so torch's state dicts load unchanged. Every parameter starts as
U(-1/sqrt(hidden), 1/sqrt(hidden)) (torch's initialisation). An unbatched (1-d) input gives an unbatched
state; a missing state is zeros.

A GRU cell step is one node, `CALL(x, h, W_ih, W_hh, b_ih, b_hh)` with the `GRU_CELL` composite (the weights and
biases as the formula's products and sums read them: `_Cell._sources`), which prepare_rangeify expands into the nodes
the cell's formula builds (`_gru_math`, the same code the step runs otherwise): the kernels are the formula's,
and an eager recurrent step builds and walks one node per step instead of ~30 (as torch's GRUCell is one
operator). In training each source's gradient is one node too (`autograd.node_slope`), expanded into the
formula's gradient only when scheduled: an eager GRU train step builds ~70 nodes fewer per cell step. An LSTM step
is two such nodes over (x, h, c, W_ih, W_hh, b_ih, b_hh), `LSTM_H` and `LSTM_C`, one per output, where no
gradient is expected (inference); a training graph keeps its formula (`_one_node` says why).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tolk_core.errors import ShapeError
from tolk_core.frontend import autograd
from tolk_core.frontend.movement import broadcast_uop
from tolk_core.frontend.products import matmul_read, operand_b
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.calls import Composite
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.nn.module import Module, param, uniform_init


class _Cell(Module):
    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None):
        self.input_size, self.hidden_size = input_size, hidden_size
        bound, g = 1 / math.sqrt(hidden_size), self.gates * hidden_size
        self.weight_ih = param(uniform_init(bound, g, input_size), device)
        self.weight_hh = param(uniform_init(bound, g, hidden_size), device)
        self.bias_ih = param(uniform_init(bound, g), device) if bias else None
        self.bias_hh = param(uniform_init(bound, g), device) if bias else None

    def _sources(self, state: tuple[Tensor, ...], params: tuple[Tensor | None, ...]) -> tuple[UOp, ...]:
        """A cell composite's sources: the input and state, then each weight and bias as the formula's products
        and sums read it, broadcast over the batch (`products.operand_b`, the bias's broadcast). Those nodes are
        the same for every step of a recurrence (interned), and a training step's gradients of all its steps
        meet there before the one reduction over the batch and the steps that the formula's graph has (a weight
        given plain would take one reduction per step: 14 more kernels in an 8-step GRU step). Kept on the cell
        for the next step while the parameters are updated in place (most of a cell step's Python otherwise)."""
        w_ih, w_hh, b_ih, b_hh = params
        assert w_ih is not None and w_hh is not None and b_ih is not None and b_hh is not None
        xs, hs = state[0].shape, state[1].shape
        key = (w_ih.uop, w_hh.uop, b_ih.uop, b_hh.uop, xs, hs)
        got = getattr(self, "_reads", None)
        if got is None or got[0] != key:
            wt_ih, wt_hh = w_ih.T, w_hh.T
            rows = (xs[0], wt_ih.shape[1])
            got = self._reads = (key, (operand_b(wt_ih.uop, xs, wt_ih.shape), operand_b(wt_hh.uop, hs, wt_hh.shape),
                                       broadcast_uop(b_ih.uop, b_ih.shape, rows),
                                       broadcast_uop(b_hh.uop, b_hh.shape, rows)))
        return (*(t.uop for t in state), *got[1])

    def _batched(self, x: Tensor, *state: Tensor | None) -> tuple[Tensor, list[Tensor], bool]:
        """x as (batch, input) and each state as (batch, hidden) (zeros when None); whether x was 1-d."""
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ShapeError(f"{type(self).__name__}({self.input_size}, {self.hidden_size}) needs an input of shape "
                             f"(batch, {self.input_size}) or ({self.input_size},), got {x.shape}")
        single = x.ndim == 1
        x = x.reshape(1, -1) if single else x
        out = []
        for s in state:
            if s is None:
                s = Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            elif s.shape != ((self.hidden_size,) if single else (x.shape[0], self.hidden_size)):
                raise ShapeError(f"{type(self).__name__} state of shape {s.shape} for an input of shape {x.shape}")
            out.append(s.reshape(1, -1) if single else s)
        return x, out, single


class GRUCell(_Cell):
    """torch's GRUCell: r = sig(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in +
    r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h."""

    gates = 3

    def forward(self, x: Tensor, hx: Tensor | None = None) -> Tensor:
        x, (h,), single = self._batched(x, hx)
        params = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if _one_node(x, h, params):
            out = x._wrap(UOp.shaped(Op.CALL, x.uop.dtype, self._sources((x, h), params), GRU_CELL, h.shape))
        else:
            out = _gru_math(x, h, *params)
        return out.reshape(-1) if single else out


def _projections(x: Tensor, h: Tensor, wt_ih: Tensor, wt_hh: Tensor, b_ih: Tensor | None,
                 b_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    """(x W_ih^T + b_ih, h W_hh^T + b_hh), each (batch, gates * hidden), from the transposed weights."""
    gi, gh = x @ wt_ih, h @ wt_hh
    if b_ih is not None and b_hh is not None:
        gi, gh = gi + b_ih, gh + b_hh
    return gi, gh


def _gru_math(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None, b_hh: Tensor | None) -> Tensor:
    """One GRU step of x (batch, input) and h (batch, hidden), as Tensor ops (GRUCell's formula)."""
    return _gru_gates(*_projections(x, h, w_ih.T, w_hh.T, b_ih, b_hh), h)


def _gru_gates(gi: Tensor, gh: Tensor, h: Tensor) -> Tensor:
    (ir, iz, inew), (hr, hz, hnew) = gi.chunk(3, 1), gh.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    return (1 - z) * (inew + r * hnew).tanh() + z * h


def _lstm_math(x: Tensor, h: Tensor, c: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None,
               b_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    """One LSTM step of x (batch, input) and the state h, c (batch, hidden): (h', c') as Tensor ops."""
    return _lstm_gates(*_projections(x, h, w_ih.T, w_hh.T, b_ih, b_hh), c)


def _lstm_gates(gi: Tensor, gh: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    i, f, g, o = (gi + gh).chunk(4, 1)
    c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c2.tanh(), c2


# ---------------------------------------------------------------- the composites
def _read_projections(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor,
                      b_hh: Tensor) -> tuple[Tensor, Tensor]:
    """`_projections` over the sources `_Cell._sources` gives (weights and biases as the formula reads them):
    the same nodes."""
    def product(a: Tensor, w: Tensor) -> Tensor:
        n, m, k = w.shape
        return a._wrap(matmul_read(a.uop, w.uop, a.shape, (k, m)))
    return product(x, w_ih) + b_ih, product(h, w_hh) + b_hh


def _gru_read(x: Tensor, h: Tensor, *params: Tensor) -> Tensor:
    return _gru_gates(*_read_projections(x, h, *params), h)


def _lstm_read(x: Tensor, h: Tensor, c: Tensor, *params: Tensor) -> tuple[Tensor, Tensor]:
    return _lstm_gates(*_read_projections(x, h, *params), c)


def _one_node(x: Tensor, h: Tensor, params: tuple[Tensor | None, ...], *state: Tensor) -> bool:
    """Whether this step may be a cell composite: biases present, every operand of one float dtype on one
    device, shapes of plain ints (the sharding pass maps only the IR's own ops); an LSTM step (given its cell
    state) only where no gradient is expected: its two nodes would each carry their own gradient through the
    step (the new cell state feeds the output), two backward paths and more kernels where the formula has one."""
    if any(p is None for p in params) or type(x.device) is not str or (state and autograd.gradients_expected()):
        return False
    operands = (x, h, *state, *params)
    dt = x.uop.dtype
    return dtypes.is_float(dt) and all(t.uop.dtype is dt and t.device == x.device and  # type: ignore[union-attr]
                                       all(type(d) is int for d in t.shape) for t in operands)  # type: ignore[union-attr]


def _expansion(math: Callable[..., Any], which: int | None = None) -> Callable[..., UOp]:
    """A cell composite's expansion: `math` (its output `which`, for a cell of several) over the call's sources,
    built as under `no_grad`, as the node was. An LSTM step's two calls have the same sources, so their expansions
    share every node."""
    def expand(*src: UOp) -> UOp:
        device = src[0].device
        with autograd.no_grad():
            out = math(*(Tensor(u, device) for u in src))
        return (out if which is None else out[which]).uop
    return expand


def _composite(name: str, expand: Callable[..., UOp]) -> Composite:
    """A cell composite of h's shape, differentiated by its formula, each source's gradient one node
    (`autograd.node_slope`)."""
    return Composite(name, expand, autograd.node_slope(name, expand), lambda src: src[1]._shape)


GRU_CELL = _composite("gru_cell", _expansion(_gru_read))
LSTM_H = _composite("lstm_h", _expansion(_lstm_read, 0))
LSTM_C = _composite("lstm_c", _expansion(_lstm_read, 1))


class LSTMCell(_Cell):
    """torch's LSTMCell: i, f, g, o gates from x W_ih^T + b_ih + h W_hh^T + b_hh (sigmoid, sigmoid, tanh,
    sigmoid); c' = f * c + i * g, h' = o * tanh(c'). Returns (h', c')."""

    gates = 4

    def forward(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        h0, c0 = (None, None) if hx is None else hx
        x, (h, c), single = self._batched(x, h0, c0)
        params = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if _one_node(x, h, params, c):
            srcs = self._sources((x, h, c), params)
            h2, c2 = (x._wrap(UOp.shaped(Op.CALL, x.uop.dtype, srcs, fn, h.shape)) for fn in (LSTM_H, LSTM_C))
        else:
            h2, c2 = _lstm_math(x, h, c, *params)
        return (h2.reshape(-1), c2.reshape(-1)) if single else (h2, c2)
