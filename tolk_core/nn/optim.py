"""Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW, updating parameters in place.

A step first computes every gradient in one schedule (together with any tensors passed to `step`, such as
the loss: they read the parameters, so they must be computed before the parameters change), then stores the
new values, each an expression of the storage before the step, in one schedule (`assign_stages`) whose kernels
store a parameter and its state together, parameters of one shape in one kernel (schedule/merge.py; Adam's
p, m and v were three kernels per parameter, each recomputing the moments); where the scheduler cannot merge
them, every parameter's in one schedule, then every state tensor's in another, which is storing them one by
one in torch's order (docs/training.md, "Optimizer updates").
Parameters, moments and the step count are device tensors updated in place, so a whole training step
(forward, backward, update) is one JIT capture whose replays read and write the same storage; nothing a
replay needs is a Python number that capture would freeze, except the hyperparameters (betas, momentum, ...).
The learning rate is a device tensor too (`lr_tensor`): setting `opt.lr` (as the schedules of nn/schedule.py
do) stores the new value there, so a captured step uses it on its next replay.
The update formulas are built as nodes (`frontend/nodes.py`): their operands are the parameter, its gradient and
state (one shape, one dtype) and Python scalars, so each operation is its node alone, without the coercion and
the Tensor of a Tensor operator; an eager step builds them for every parameter.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

from tolk_core.errors import TolkError
from tolk_core.frontend.composite import as_nodes
from tolk_core.frontend.nodes import Nodes
from tolk_core.frontend.tensor import Tensor, assign_stages
from tolk_core.ir.uop import UOp
from tolk_core.nn.state import StateDictError, load_state_dict


class Optimizer:
    """Base: holds the parameters (each must require grad) and per-parameter state tensors."""

    def __init__(self, params: Iterable[Tensor], lr: float):
        uniq: dict[int, Tensor] = {}
        for p in params:
            if not p.requires_grad:
                raise TolkError(f"optimizer parameter {p!r} does not require grad: mark it requires_grad = True")
            uniq.setdefault(id(p), p)
        if not uniq:
            raise TolkError("optimizer got no parameters")
        self.params = list(uniq.values())
        self.device = self.params[0].device
        self.lr_tensor = Tensor.full((1,), float(lr), device=self.device).contiguous().realize()
        self._lr = float(lr)
        self.t = Tensor.zeros(1, device=self.device).contiguous().realize()  # steps taken (float32: exact < 2^24)
        self._step_nodes: dict[tuple, tuple[UOp, str]] = {}  # `_per_step`'s nodes and their device

    @property
    def lr(self) -> float:
        """The learning rate; setting it stores the value into `lr_tensor`, which every update reads."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = float(value)
        self.lr_tensor.assign(Tensor.full((1,), self._lr, device=self.device))

    def _lr_for(self, p: Tensor) -> Tensor:
        """The learning rate as a tensor broadcastable against `p` (on its device, in its dtype)."""
        return self._per_step(("lr", p.device, p.dtype, p.ndim),
                              lambda: self.lr_tensor.to(p.device).cast(p.dtype).reshape((1,) * p.ndim))

    def _per_step(self, key: tuple, make: Callable[[], Tensor]) -> Tensor:
        """`make()` for every parameter of one `key` (device, dtype, rank): the learning rate and Adam's bias
        corrections as each parameter reads them, the same nodes for all of them, built once instead of a few
        Tensor ops per parameter per step. Their nodes read the storage of the step count and the learning rate,
        which every step updates in place, so they are the same from step to step: kept as nodes (a lazy Tensor
        kept alive would be computed by itself before the step count's store: `before_writes`), made again
        when that storage is another."""
        full = (key, self.t.uop, self.lr_tensor.uop)
        if (got := self._step_nodes.get(full)) is None:
            if len(self._step_nodes) >= 256:  # (storage replaced step after step: keep only the latest)
                self._step_nodes.clear()
            made = make()
            got = self._step_nodes[full] = (made.uop, made.device)
        return Tensor(got[0], got[1])

    def _zeros_like(self, p: Tensor) -> Tensor:
        return Tensor.zeros(p.shape, dtype=p.dtype, device=p.device).contiguous().realize()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self, *also: Tensor) -> None:
        """Update every parameter that has a gradient. `also`: tensors to compute in the same schedule as the
        gradients, before any parameter changes (the loss, metrics)."""
        live = [(i, p) for i, p in enumerate(self.params) if p.grad is not None]
        grads = [p.grad for _, p in live]
        todo = [t for t in (*grads, *also) if t is not None]
        if todo:
            todo[0].realize(*todo[1:])
        stages: list[list[tuple[Tensor, Tensor]]] = []
        for (i, p), g in zip(live, grads, strict=True):
            assert g is not None
            # an `_update` that stores by itself (returns None) has nothing left to store
            for k, pairs in enumerate(self._update(i, p, g.cast(p.dtype)) or []):
                if k == len(stages):
                    stages.append([])
                stages[k].extend(pairs)
        # the step count last: an update that reads it (Adam's bias corrections) reads the count before the step
        # and adds the one this step makes, so every value is an expression of the storage before the step
        stages.append([(self.t, self.t + 1)])
        assign_stages(stages)
        # the stored values now read their targets: nothing of them is needed later (kept alive, they too would
        # be computed before the next write into what they read)
        stages.clear()

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[list[tuple[Tensor, Tensor]]]:
        """The stores of parameter `i`'s update, in stages of (target, new value): the parameter first, then its
        state. Every value is an expression of the storage before the step (the new parameter computed from the
        state's new values, not from the state read back), so storing them all at once (`assign_stages`), or
        stage by stage, is storing them one by one in the torch order."""
        raise NotImplementedError

    def _state(self) -> dict[str, list[Tensor]]:
        """Per-parameter state tensors by kind (each list in parameter order)."""
        return {}

    def state_dict(self) -> dict[str, Tensor]:
        """The step count and per-parameter state as "t", "<kind>.<parameter index>"."""
        out = {"t": self.t}
        for kind, ts in self._state().items():
            out.update({f"{kind}.{i}": t for i, t in enumerate(ts)})
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Assign saved state into this optimizer's tensors in place (same parameter order and shapes)."""
        own = self.state_dict()
        if own.keys() != state.keys():
            raise StateDictError(f"optimizer state does not match {type(self).__name__}: missing "
                                 f"{sorted(own.keys() - state.keys())}, unexpected {sorted(state.keys() - own.keys())}")
        load_state_dict(own, state)


class SGD(Optimizer):
    """torch's SGD: g += weight_decay * p; with momentum, b = momentum * b + g and the step uses b (or
    g + momentum * b with Nesterov); p -= lr * step."""

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False):
        super().__init__(params, lr)
        if nesterov and not momentum:
            raise TolkError("SGD: Nesterov momentum needs momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.buf = [self._zeros_like(p) for p in self.params] if momentum else []

    def _state(self) -> dict[str, list[Tensor]]:
        return {"momentum": self.buf} if self.momentum else {}

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[list[tuple[Tensor, Tensor]]]:
        shape = p.shape  # the formula as nodes (see the module docstring)
        pn, gn = Nodes(p.uop, shape), Nodes(g.uop, shape)
        if self.weight_decay:
            gn = gn + self.weight_decay * pn
        state: list[tuple[Tensor, Tensor]] = []
        if self.momentum:
            b = self.buf[i]
            b_new = self.momentum * Nodes(b.uop, shape) + gn
            state.append((b, p._wrap(b_new.u)))
            gn = gn + self.momentum * b_new if self.nesterov else b_new
        return [[(p, p._wrap((pn - Nodes.of(self._lr_for(p), shape) * gn).u))], state]


class Adam(Optimizer):
    """torch's Adam (L2 weight decay added to the gradient); `decoupled=True` is AdamW."""

    decoupled = False

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.b1, self.b2 = betas
        self.eps, self.weight_decay = eps, weight_decay
        self.m = [self._zeros_like(p) for p in self.params]
        self.v = [self._zeros_like(p) for p in self.params]

    def _state(self) -> dict[str, list[Tensor]]:
        return {"m": self.m, "v": self.v}

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[list[tuple[Tensor, Tensor]]]:
        m, v = self.m[i], self.v[i]
        c1, c2 = (self._per_step((k, p.device, p.dtype, p.ndim), functools.partial(self._correction, b, p))
                  for k, b in (("c1", self.b1), ("c2", self.b2)))
        operands = (p, g.cast(p.dtype), m, v, c1, c2, self._lr_for(p))
        static = (self.b1, self.b2, self.eps, self.weight_decay, self.decoupled)
        # three nodes (the new parameter, m and v) over the same sources, whose expansions share every node: an
        # eager step builds and keys 3 nodes per parameter instead of ~20 (frontend/composite.py)
        new = as_nodes("adam", _adam_one, operands, tuple((*static, k) for k in range(3)))
        p_new, m_new, v_new = new if new is not None else _adam(*operands, *static)
        return [[(p, p_new)], [(m, m_new), (v, v_new)]]

    def _correction(self, beta: float, p: Tensor) -> Tensor:
        """The bias correction 1 - beta^t for the count t this step makes (the device-side count before it, plus
        one: it is stored with the updates), broadcastable against `p` in its dtype (b^t = 2^(t log2 b))."""
        c = 1 - ((self.t + 1) * math.log(beta)).exp() if beta > 0 else Tensor.ones(1, device=self.device)
        return c.cast(p.dtype).reshape((1,) * p.ndim)


def _adam(p: Tensor, g: Tensor, m: Tensor, v: Tensor, c1: Tensor, c2: Tensor, lr: Tensor, b1: float, b2: float,
          eps: float, weight_decay: float, decoupled: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Adam's new parameter, m and v from the storage before the step (`c1`, `c2`: the bias corrections and `lr`
    broadcastable against `p`), the formula as nodes (see the module docstring): every operand has the
    parameter's shape and dtype."""
    shape = p.shape
    pn, gn, mn, vn = (Nodes(t.uop, shape) for t in (p, g, m, v))
    if weight_decay and not decoupled:
        gn = gn + weight_decay * pn
    m_new = b1 * mn + (1 - b1) * gn
    v_new = b2 * vn + (1 - b2) * (gn * gn)
    update = (m_new / Nodes.of(c1, shape)) / ((v_new / Nodes.of(c2, shape)).sqrt() + eps)
    lrn = Nodes.of(lr, shape)
    p_new = pn * (1 - lrn * weight_decay) - lrn * update if weight_decay and decoupled else pn - lrn * update
    return p._wrap(p_new.u), p._wrap(m_new.u), p._wrap(v_new.u)


def _adam_one(p: Tensor, g: Tensor, m: Tensor, v: Tensor, c1: Tensor, c2: Tensor, lr: Tensor, b1: float, b2: float,
              eps: float, weight_decay: float, decoupled: bool, which: int) -> Tensor:
    """Output `which` (0: the parameter, 1: m, 2: v) of `_adam`: the formula of one of an update's three nodes."""
    return _adam(p, g, m, v, c1, c2, lr, b1, b2, eps, weight_decay, decoupled)[which]


class AdamW(Adam):
    """torch's AdamW: weight decay applied to the parameter directly (p *= 1 - lr * weight_decay)."""

    decoupled = True

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr, betas, eps, weight_decay)

