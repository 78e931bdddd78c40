"""Recurrent cells as torch defines them: GRUCell and LSTMCell.

Weights are stacked by gate along the first axis, in torch's order (GRU: reset r, update z, new n; LSTM:
input i, forget f, cell g, output o), named weight_ih (G*hidden, input), weight_hh (G*hidden, hidden),
bias_ih, bias_hh (G*hidden), so torch's state dicts load unchanged. Every parameter starts as
U(-1/sqrt(hidden), 1/sqrt(hidden)) (torch's initialisation). An unbatched (1-d) input gives an unbatched
state; a missing state is zeros.
"""
from __future__ import annotations

import math

from tolk_core.errors import ShapeError
from tolk_core.frontend.tensor import Tensor
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

    def _projections(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """(x W_ih^T + b_ih, h W_hh^T + b_hh), each (batch, gates * hidden)."""
        gi, gh = x @ self.weight_ih.T, h @ self.weight_hh.T
        if self.bias_ih is not None and self.bias_hh is not None:
            gi, gh = gi + self.bias_ih, gh + self.bias_hh
        return gi, gh

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
        gi, gh = self._projections(x, h)
        (ir, iz, inew), (hr, hz, hnew) = gi.chunk(3, 1), gh.chunk(3, 1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        out = (1 - z) * (inew + r * hnew).tanh() + z * h
        return out.reshape(-1) if single else out


class LSTMCell(_Cell):
    """torch's LSTMCell: i, f, g, o gates from x W_ih^T + b_ih + h W_hh^T + b_hh (sigmoid, sigmoid, tanh,
    sigmoid); c' = f * c + i * g, h' = o * tanh(c'). Returns (h', c')."""

    gates = 4

    def forward(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        h0, c0 = (None, None) if hx is None else hx
        x, (h, c), single = self._batched(x, h0, c0)
        gi, gh = self._projections(x, h)
        i, f, g, o = (gi + gh).chunk(4, 1)
        c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h2 = o.sigmoid() * c2.tanh()
        return (h2.reshape(-1), c2.reshape(-1)) if single else (h2, c2)
