"""Recurrent cell steps kept as composite nodes: a GRU step one CALL (`nn.rnn.GRU_CELL`), an LSTM step two
(`LSTM_H`, `LSTM_C`, one per output), in inference and in training, where each source's gradient is one node too
(`autograd.node_slope`). prepare_rangeify expands them into the nodes the cell's formula builds (the same kernels),
and values and gradients are torch's. A cell without biases or operands of mixed dtypes keep the formula."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tolk_core
from tolk_core import Tensor, nn
from tolk_core.frontend.autograd import gradient, no_grad
from tolk_core.ir.calls import is_composite
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.ir.uop import UOp
from tolk_core.nn.rnn import GRU_CELL, LSTM_C, LSTM_H, _gru_math, _lstm_math
from tolk_core.schedule import prepare

torch = pytest.importorskip("torch", reason="torch is not installed: the references need it (pip install "
                                            "torch==2.13.0, CPU)")


def _cell(inp: int, hidden: int, seed: int = 0, bias: bool = True, kind: str = "GRUCell") -> tuple[Any, Any]:
    ours, theirs = getattr(nn, kind)(inp, hidden, bias=bias), getattr(torch.nn, kind)(inp, hidden, bias=bias)
    rng = np.random.default_rng(seed)
    state = {k: rng.standard_normal(tuple(v.shape)).astype(np.float32) * 0.5 for k, v in theirs.state_dict().items()}
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    ours.load_state_dict({k: Tensor(v) for k, v in state.items()})
    for p in ours.parameters():
        p.requires_grad_(False)  # inference: nothing requires grad
    return ours, theirs


def _expanded(u: UOp) -> UOp:
    """`u` with every composite replaced by its formula, as prepare_rangeify does (its step 2)."""
    return graph_rewrite(u, prepare.pm_calls, name="composites expanded (test)")


def _data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_one_node_per_step_and_its_expansion_is_the_formula() -> None:
    cell, _ = _cell(4, 6)
    x, h = Tensor(_data((3, 4), 1)), Tensor(_data((3, 6), 2))
    with no_grad():
        y = cell(x, h)
        by_ops = _gru_math(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    assert is_composite(y.uop) and y.uop.arg is GRU_CELL and y.shape == (3, 6) and y.dtype == x.dtype
    assert y.uop.src[:2] == (x.uop, h.uop)
    assert _expanded(y.uop) is _expanded(by_ops.uop)  # the same interned nodes


def test_same_kernels_and_values_as_the_formula() -> None:
    cell, _ = _cell(8, 16, seed=3)
    x, h = Tensor(_data((5, 8), 4)), Tensor(_data((5, 16), 5))
    with no_grad():
        y = cell(x, h)
        formula = _gru_math(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    assert is_composite(y.uop) and not is_composite(formula.uop)
    with tolk_core.profile() as whole:
        got = y.realize()
    with tolk_core.profile() as by_ops:
        want = formula.realize()
    assert sorted(r.name for r in whole.rows) == sorted(r.name for r in by_ops.rows)  # (rows come by time)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("batch,inp,hidden", [(1, 3, 5), (4, 16, 32), (7, 9, 9)])
def test_unrolled_values_are_torchs(batch, inp, hidden) -> None:
    """Steps chained through their state (a recurrent forward), an unbatched step, a missing state."""
    cell, ref = _cell(inp, hidden, seed=batch)
    xs = _data((6, batch, inp), 7)
    h, th = Tensor.zeros(batch, hidden), torch.zeros(batch, hidden)
    with no_grad(), torch.no_grad():
        for t in range(6):
            h, th = cell(Tensor(xs[t]), h), ref(torch.from_numpy(xs[t]), th)
            assert is_composite(h.uop)
        np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cell(Tensor(xs[0, 0])).numpy(), ref(torch.from_numpy(xs[0, 0])).numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_gradients_through_the_node_are_torchs() -> None:
    """Gradients asked of a graph of cell nodes (built with nothing requiring grad), for the input, the state and
    every weight; and for an input that is also the state (its whole derivative counted once)."""
    cell, ref = _cell(5, 5, seed=9)
    x, h = _data((3, 5), 10), _data((3, 5), 11)
    tx, th = Tensor(x), Tensor(h)
    with no_grad():
        y = cell(tx, cell(tx, th))
        same = cell(tx, tx)
    assert is_composite(y.uop) and is_composite(same.uop)
    leaves = [tx, th, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
    grads = gradient((y.tanh() * 2).sum().uop, Tensor.ones(()).uop, {t.uop for t in leaves})
    rx, rh = torch.tensor(x, requires_grad=True), torch.tensor(h, requires_grad=True)
    (ref(rx, ref(rx, rh)).tanh() * 2).sum().backward()
    want = [rx.grad, rh.grad, ref.weight_ih.grad, ref.weight_hh.grad, ref.bias_ih.grad, ref.bias_hh.grad]
    for t, w in zip(leaves, want, strict=True):
        np.testing.assert_allclose(Tensor(grads[t.uop]).numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
    (g,) = gradient(same.sum().uop, Tensor.ones(()).uop, {tx.uop}).values()
    rx2 = torch.tensor(x, requires_grad=True)
    ref(rx2, rx2).sum().backward()
    np.testing.assert_allclose(Tensor(g).numpy(), rx2.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_cells_without_biases_or_of_mixed_dtypes_keep_the_formula() -> None:
    cell, _ = _cell(4, 4)
    x, h = Tensor(_data((2, 4), 0)), Tensor(_data((2, 4), 1))
    cell.weight_ih.requires_grad_(True)
    assert is_composite(cell(x, h).uop)  # a gradient is expected: each source's gradient is a node too
    cell.weight_ih.requires_grad_(False)
    nobias, _ = _cell(4, 4, bias=False)
    with no_grad():
        assert is_composite(cell(x, h).uop)
        assert not is_composite(nobias(x, h).uop)
        assert not is_composite(cell(x.cast("float64"), h).uop) and not is_composite(cell(x, h.cast("float64")).uop)


def test_a_training_step_through_the_nodes_is_torchs_with_the_formulas_kernels() -> None:
    """An unrolled GRU trained: the backward pass builds one gradient node per source and step (no formula),
    the gradients of every parameter and of the input are torch's, and the kernels that compute them are the
    ones the formula's graph gives (the weights' gradients of all steps summed before one reduction), up to
    the order a kernel adds the steps' terms in (its name's hash)."""
    kind = "GRUCell"
    cell, ref = _cell(5, 6, seed=11, kind=kind)
    for p in cell.parameters():
        p.requires_grad_(True)
    xs = _data((4, 3, 5), 12)
    lstm = kind == "LSTMCell"

    def unrolled(step: Any, x: Any, zeros: Any) -> Any:
        h = c = zeros
        for t in range(4):
            h, c = step(x[t], (h, c)) if lstm else (step(x[t], h), None)
        return h
    tx = Tensor(xs).requires_grad_()
    leaves = [tx, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]

    def backward(loss: Tensor) -> tuple[dict, int]:
        """The gradients of `leaves` and how many nodes the backward pass added to the forward graph."""
        grads = gradient(loss.uop, Tensor.ones(()).uop, {t.uop for t in leaves})
        forward = set(loss.uop.toposort())
        return grads, len({u for g in grads.values() for u in g.toposort()} - forward)
    grads, added = backward((unrolled(cell, tx, Tensor.zeros(3, 6)).tanh() * 2).sum())
    # the formula's graph, built by the Tensor ops (what a cell without the node runs)
    math = (lambda x, s, *p: _lstm_math(x, *s, *p)) if lstm else _gru_math
    params = (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    f_loss = (unrolled(lambda x, s: math(x, s, *params), tx, Tensor.zeros(3, 6)).tanh() * 2).sum()
    assert not any(is_composite(u) and u.arg in (GRU_CELL, LSTM_H, LSTM_C) for u in f_loss.uop.toposort())
    f_grads, f_added = backward(f_loss)
    assert added * 2 < f_added, (added, f_added)
    rx = torch.tensor(xs, requires_grad=True)
    (unrolled(ref, rx, torch.zeros(3, 6)).tanh() * 2).sum().backward()
    want = [rx.grad, ref.weight_ih.grad, ref.weight_hh.grad, ref.bias_ih.grad, ref.bias_hh.grad]
    with tolk_core.profile() as through_nodes:
        got = [Tensor(grads[t.uop]).numpy() for t in leaves]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
    with tolk_core.profile() as by_formula:
        for t in leaves:
            Tensor(f_grads[t.uop]).numpy()
    def kinds(rows: Any) -> list[str]:
        return sorted(r.name.rsplit("_", 1)[0] for r in rows)
    assert kinds(through_nodes.rows) == kinds(by_formula.rows)


def test_an_lstm_in_training_keeps_the_formula() -> None:
    """An LSTM step's two nodes would each carry its own gradient through the step (the new cell state feeds the
    output): two backward paths and more kernels where the formula has one, so a training graph keeps it."""
    cell, _ = _cell(4, 4, kind="LSTMCell")
    cell.weight_ih.requires_grad_(True)
    h2, c2 = cell(Tensor(_data((2, 4), 0)), (Tensor(_data((2, 4), 1)), Tensor(_data((2, 4), 2))))
    assert not is_composite(h2.uop) and not is_composite(c2.uop)


def test_jitted_recurrence_matches_eager() -> None:
    cell, _ = _cell(6, 8, seed=2)

    def run(xs: Tensor) -> Tensor:
        with no_grad():
            h = Tensor.zeros(2, 8)
            for t in range(4):
                h = cell(xs[t], h)
            return h.realize()
    jitted = tolk_core.jit(run)
    for i in range(3):
        xs = _data((4, 2, 6), 20 + i)
        np.testing.assert_array_equal(jitted(Tensor(xs)).numpy(), run(Tensor(xs)).numpy())


def test_an_lstm_step_is_two_nodes_with_torchs_values_and_gradients() -> None:
    cell, ref = _cell(5, 7, seed=4, kind="LSTMCell")
    x, h, c = _data((3, 5), 1), _data((3, 7), 2), _data((3, 7), 3)
    tx, th, tc = Tensor(x), Tensor(h), Tensor(c)
    params = (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    with no_grad():
        h2, c2 = cell(tx, (th, tc))
        by_ops = _lstm_math(tx, th, tc, *params)
    assert h2.uop.arg is LSTM_H and c2.uop.arg is LSTM_C and h2.uop.src == c2.uop.src
    assert _expanded(h2.uop) is _expanded(by_ops[0].uop) and _expanded(c2.uop) is _expanded(by_ops[1].uop)
    leaves = [tx, th, tc, *params]  # the gradient graph first: realizing h2 and c2 makes them their storage
    grads = gradient((h2 * 2 + c2.tanh()).sum().uop, Tensor.ones(()).uop, {t.uop for t in leaves})
    with tolk_core.profile() as whole:
        got = [t.realize().numpy() for t in (h2, c2)]
    with tolk_core.profile() as formula:
        want = [t.realize().numpy() for t in by_ops]
    assert sorted(r.name for r in whole.rows) == sorted(r.name for r in formula.rows)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    rx, rh, rc = (torch.tensor(a, requires_grad=True) for a in (x, h, c))
    rh2, rc2 = ref(rx, (rh, rc))
    np.testing.assert_allclose(got[0], rh2.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], rc2.detach().numpy(), rtol=1e-5, atol=1e-6)
    (rh2 * 2 + rc2.tanh()).sum().backward()
    want_g = [rx.grad, rh.grad, rc.grad, ref.weight_ih.grad, ref.weight_hh.grad, ref.bias_ih.grad, ref.bias_hh.grad]
    for t, w in zip(leaves, want_g, strict=True):
        np.testing.assert_allclose(Tensor(grads[t.uop]).numpy(), w.numpy(), rtol=1e-4, atol=1e-5)


def test_an_unrolled_lstm_matches_torch_and_its_jitted_self() -> None:
    cell, ref = _cell(6, 8, seed=5, kind="LSTMCell")

    def run(xs: Tensor) -> list[Tensor]:
        with no_grad():
            h = c = Tensor.zeros(2, 8)
            for t in range(4):
                h, c = cell(xs[t], (h, c))
            return [h.realize(), c.realize()]
    jitted = tolk_core.jit(run)
    for i in range(3):
        xs = _data((4, 2, 6), 30 + i)
        eager = [t.numpy() for t in run(Tensor(xs))]
        for a, b in zip([t.numpy() for t in jitted(Tensor(xs))], eager, strict=True):
            np.testing.assert_array_equal(a, b)
    th = tc = torch.zeros(2, 8)
    with torch.no_grad():
        for t in range(4):
            th, tc = ref(torch.from_numpy(xs[t]), (th, tc))
    np.testing.assert_allclose(eager[0], th.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(eager[1], tc.numpy(), rtol=1e-5, atol=1e-6)
