"""Front-end functions kept as one node in training too (frontend/composite.py): a batch norm by batch statistics,
a cross entropy, a convolution. Each is one CALL in the forward graph and one gradient node per source in the
backward graph; values and gradients (first and second order) are torch's, and the kernels that compute them are
exactly those of the formula the node stands for. Where a node cannot be (sharded or symbolic operands, mixed
dtypes), the formula is built."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tolk_core
from tolk_core import Tensor, nn
from tolk_core.frontend.autograd import gradient
from tolk_core.frontend.nn_ops import _conv_formula
from tolk_core.ir.calls import is_composite
from tolk_core.ir.uop import UOp
from tolk_core.nn import F
from tolk_core.nn.functional import _cross_entropy
from tolk_core.nn.norm import _batch_norm
from tolk_core.schedule import placements

torch = pytest.importorskip("torch", reason="torch is not installed: the references need it (pip install "
                                            "torch==2.13.0, CPU)")


def _data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _composites(u: UOp) -> list[str]:
    return sorted(v.arg.name for v in u.toposort() if is_composite(v) and v.arg.name in _NAMES)


_NAMES = ("batch_norm", "conv", "cross_entropy", "relu", "max_pool")


def _kernels(values: list[UOp]) -> list[str]:
    """The kernels that compute `values`, each realized by itself (names: kind, shape and AST hash), in a
    lineage of their own: placement decisions an earlier compile made on shared nodes would steer these."""
    with placements.Lineage(), tolk_core.profile() as p:
        for v in values:
            Tensor(v).numpy()
    return sorted(r.name for r in p.rows)


def _check(loss: Tensor, formula_loss: Tensor, leaves: list[Tensor], want: list[Any], names: list[str],
           inner: int = 0) -> None:
    """`loss` holds the nodes `names`, `formula_loss` none (but `inner` of the formula's own: a strided convolution
    is made of convolutions); the gradients of `leaves` through the nodes are `want` (torch's), and the backward
    graph through the nodes is smaller, with the formula's kernels."""
    assert _composites(loss.uop) == names and len(_composites(formula_loss.uop)) == inner
    targets = {t.uop for t in leaves}
    grads = gradient(loss.uop, Tensor.ones(()).uop, targets)
    f_grads = gradient(formula_loss.uop, Tensor.ones(()).uop, targets)
    nodes = {u for g in grads.values() for u in g.toposort()}
    assert len(nodes) < len({u for g in f_grads.values() for u in g.toposort()})
    assert _kernels([grads[t.uop] for t in leaves]) == _kernels([f_grads[t.uop] for t in leaves])
    for t, w in zip(leaves, want, strict=True):
        np.testing.assert_allclose(Tensor(grads[t.uop]).numpy(), w, rtol=1e-4, atol=1e-5)


def _torch_grads(fn: Callable[..., Any], *arrays: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def test_a_batch_norm_in_training_is_one_node_with_torchs_gradients() -> None:
    xs, w, b = _data((4, 3, 5, 5), 0), _data((3,), 1) + 1, _data((3,), 2)
    x = Tensor(xs).requires_grad_()
    bn = nn.BatchNorm2d(3, track_running_stats=False)
    bn.load_state_dict({"weight": Tensor(w), "bias": Tensor(b)})
    for p in (bn.weight, bn.bias):
        p.requires_grad_(True)
    loss = (bn(x).tanh() * 3).sum()
    shape = (1, 3, 1, 1)
    formula = (_batch_norm(x, bn.weight.reshape(shape), bn.bias.reshape(shape), (0, 2, 3), 1e-5).tanh() * 3).sum()
    ref, want = _torch_grads(lambda a, c, d: (torch.nn.functional.batch_norm(a, None, None, c, d, training=True)
                                             .tanh() * 3).sum(), xs, w, b)
    np.testing.assert_allclose(Tensor(loss.uop).numpy(), ref, rtol=1e-4)
    _check(loss, formula, [x, bn.weight, bn.bias], want, ["batch_norm"])


def test_a_cross_entropy_is_one_node_with_torchs_gradients() -> None:
    logits, labels = _data((6, 5), 3), np.array([0, 4, 2, 2, 1, 3], np.int32)
    x, y = Tensor(logits).requires_grad_(), Tensor(labels)
    for reduction, smoothing in (("mean", 0.0), ("sum", 0.1)):
        loss = F.cross_entropy(x, y, reduction, smoothing)
        formula = _cross_entropy(x, y, reduction, smoothing)
        ref, want = _torch_grads(lambda a, r=reduction, sm=smoothing: torch.nn.functional.cross_entropy(
            a, torch.from_numpy(labels).long(), reduction=r, label_smoothing=sm), logits)
        np.testing.assert_allclose(Tensor(loss.uop).numpy(), ref, rtol=1e-5)
        _check(loss, formula, [x], want, ["cross_entropy"])


@pytest.mark.parametrize("stride,padding,groups", [(1, 1, 1), (2, 1, 1), (1, 0, 2)])
def test_a_convolution_is_one_node_with_torchs_gradients(stride: int, padding: int, groups: int) -> None:
    xs, ws = _data((2, 4, 7, 7), 4), _data((6, 4 // groups, 3, 3), 5) * 0.3
    x, w = Tensor(xs).requires_grad_(), Tensor(ws).requires_grad_()
    loss = (x.conv2d(w, stride=stride, padding=padding, groups=groups).sigmoid() * 2).sum()
    pads = ((0, 0), (0, 0), (padding, padding), (padding, padding))
    formula = (_conv_formula(x, w, groups, (stride,) * 2, (1, 1), pads).sigmoid() * 2).sum()
    ref, want = _torch_grads(lambda a, c: (torch.nn.functional.conv2d(a, c, stride=stride, padding=padding,
                                                                      groups=groups).sigmoid() * 2).sum(), xs, ws)
    np.testing.assert_allclose(Tensor(loss.uop).numpy(), ref, rtol=1e-4)
    _check(loss, formula, [x, w], want, ["conv"], inner=4 if stride == 2 else 0)


def test_second_order_gradients_through_the_nodes_are_torchs() -> None:
    """The gradient nodes differentiate by their own expansion: d/dx of sum(d loss / dx)^2 through a batch norm."""
    xs, w, b = _data((5, 2, 3, 3), 6), _data((2,), 7) + 1, _data((2,), 8)
    x = Tensor(xs).requires_grad_()
    bn = nn.BatchNorm2d(2, track_running_stats=False)
    bn.load_state_dict({"weight": Tensor(w), "bias": Tensor(b)})
    loss = bn(x).sin().sum()
    (gx,) = gradient(loss.uop, Tensor.ones(()).uop, {x.uop}).values()
    (ggx,) = gradient(Tensor(gx).square().sum().uop, Tensor.ones(()).uop, {x.uop}).values()
    tx = torch.tensor(xs, requires_grad=True)
    tl = torch.nn.functional.batch_norm(tx, None, None, torch.from_numpy(w), torch.from_numpy(b), training=True)
    (tg,) = torch.autograd.grad(tl.sin().sum(), tx, create_graph=True)
    tg.square().sum().backward()
    np.testing.assert_allclose(Tensor(ggx).numpy(), tx.grad.numpy(), rtol=2e-3, atol=1e-4)


def test_where_a_node_cannot_be_the_formula_is_built() -> None:
    """Operands of mixed dtypes (a convolution) and symbolic shapes keep the formula, with the same values."""
    xs, ws = _data((1, 2, 5, 5), 9), _data((3, 2, 3, 3), 10)
    mixed = Tensor(xs).cast("float64").conv2d(Tensor(ws))
    assert _composites(mixed.uop) == [] and mixed.dtype.name == "float64"
    np.testing.assert_allclose(mixed.numpy(), torch.nn.functional.conv2d(
        torch.from_numpy(xs).double(), torch.from_numpy(ws).double()).numpy(), rtol=1e-6)
    from tolk_core.ir.uop import Variable
    n = Variable("n", 1, 8)
    rows = Tensor(_data((8, 5), 11)).shrink(((0, n.bind(6)), None))
    ce = F.cross_entropy(rows, Tensor(np.zeros(8, np.int32)).shrink(((0, n.bind(6)),)), "sum")
    assert _composites(ce.uop) == []


def test_an_adam_update_is_three_nodes_per_parameter_expanding_into_its_formula() -> None:
    """The new parameter, m and v are one node each over the same sources; each expands into exactly the node the
    formula builds (so the update's kernels are the formula's), and two steps give torch's parameters."""
    from tolk_core.ir.pattern import graph_rewrite
    from tolk_core.nn import optim
    from tolk_core.nn.optim import _adam
    from tolk_core.schedule import prepare
    w0, g = _data((4, 3), 12), _data((4, 3), 13)
    w = Tensor(w0).requires_grad_()
    opt = optim.Adam([w], lr=0.1, weight_decay=0.01)
    w.grad = Tensor(g)
    (p_new,), (m_new, v_new) = ([v for _, v in stage] for stage in opt._update(0, w, w.grad))
    assert [u.uop.arg.name for u in (p_new, m_new, v_new)] == ["adam"] * 3
    assert p_new.uop.src == m_new.uop.src == v_new.uop.src
    formula = _adam(*(Tensor(u) for u in p_new.uop.src), 0.9, 0.999, 1e-8, 0.01, False)
    for node, want in zip((p_new, m_new, v_new), formula, strict=True):
        assert graph_rewrite(node.uop, prepare.pm_calls) is want.uop
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.Adam([tw], lr=0.1, weight_decay=0.01)
    for _ in range(2):
        w.grad, tw.grad = Tensor(g), torch.from_numpy(g)
        opt.step()
        topt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_relu_and_max_pool_in_training_are_one_node_each_with_torchs_gradients() -> None:
    from tolk_core.frontend.elementwise import _relu
    from tolk_core.frontend.nn_ops import _max_pool
    xs = _data((2, 3, 6, 6), 14)
    x = Tensor(xs).requires_grad_()
    loss = (F.max_pool2d(x.relu(), 2).sigmoid() * 2).sum()
    formula = (_max_pool(_relu(x), 2, None, 0, 1, False).sigmoid() * 2).sum()
    ref, want = _torch_grads(lambda a: (torch.nn.functional.max_pool2d(a.relu(), 2).sigmoid() * 2).sum(), xs)
    np.testing.assert_allclose(Tensor(loss.uop).numpy(), ref, rtol=1e-5)
    _check(loss, formula, [x], want, ["max_pool", "relu"])


def test_a_node_rebuilt_by_a_rewrite_knows_its_shape() -> None:
    """A rewrite rebuilds a node from its sources without a shape: the composite works it out from the formula
    (a cross entropy's is a scalar, not its first source's), also once the learnt shapes were dropped."""
    from tolk_core.frontend import composite
    from tolk_core.ir.ops import Op
    logits = Tensor(_data((4, 3), 15))
    loss = F.cross_entropy(logits, Tensor(np.array([0, 2, 1, 1], np.int32)))
    node = loss.uop
    assert is_composite(node) and node.shape == ()
    composite._results.clear()
    other = Tensor(_data((4, 3), 16)).uop
    rebuilt = UOp(Op.CALL, node.dtype, (other, *node.src[1:]), node.arg)
    assert rebuilt.shape == ()
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(_data((4, 3), 16)), torch.tensor([0, 2, 1, 1]))
    np.testing.assert_allclose(Tensor(rebuilt).numpy(), ref.numpy(), rtol=1e-5)
