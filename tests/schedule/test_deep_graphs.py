"""Deep and wide graphs: every pass over a graph (prepare, placements, rangeify's lowering, codegen, autograd,
rewriting, printing) walks it iteratively, and the kernel budget (KERNEL_MAX_OPS / KERNEL_MAX_BUFFERS,
docs/placements.md) splits what would be one huge kernel into several, in time linear in the graph.

Each case builds a graph of 100,000 nodes on CPU (a chain, a left fold of distinct tensors, a stack, a wide sum
of a stack, a deep backward), realizes it within a liveness limit (pytest-timeout), checks the values against
numpy or a closed form, and checks that the budget split the work into more than one kernel (launches counted by
the `kernels` fixture). On this kind of machine each CPU case takes 20-55 s with another process loading its two
cores; the cost per node is what the limit guards, so a pass that turned quadratic again fails here
by time. The passes are the same on every device: OPENCL runs the chain and the backward (fewer nodes, since
PoCL takes longer per kernel), for its compiler's share of a split graph; the other cases run on CPU only.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.helpers import close
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp

LIVENESS_S = 60
NODES = 100_000


def _count(device: str, cpu: int, other: int) -> int:
    """The case's size: `cpu` tensors or steps on CPU (100,000 nodes), `other` elsewhere."""
    return cpu if device == "CPU" else other


@pytest.mark.timeout(LIVENESS_S)
def test_a_chain_of_100k_adds(device: str, kernels) -> None:
    x0 = np.arange(4, dtype=np.float32)
    x = Tensor(x0, device=device)
    for _ in range(100_000):
        x = x + 1
    assert len(x.uop.toposort()) > 100_000
    with kernels() as k:
        got = x.numpy()
    assert k.count > 1  # KERNEL_MAX_OPS split the chain
    np.testing.assert_array_equal(got, x0 + 100_000)  # every partial sum is an exact float32 integer


@pytest.mark.timeout(LIVENESS_S)
def test_a_left_fold_of_many_distinct_tensors(kernels) -> None:
    device = "CPU"  # on CPU only (module docstring)
    n = 34_000
    parts = [np.full(4, i % 97, np.float32) + np.arange(4, dtype=np.float32) for i in range(n)]
    ts = [Tensor(p, device=device) for p in parts]
    s = ts[0]
    for t in ts[1:]:
        s = s + t
    assert len(s.uop.toposort()) >= NODES
    with kernels() as k:
        got = s.numpy()
    assert k.count > 1  # KERNEL_MAX_BUFFERS split the fold
    np.testing.assert_array_equal(got, np.sum(parts, axis=0))  # integer sums below 2**24: exact in any order


@pytest.mark.timeout(LIVENESS_S)
def test_a_stack_of_many_tensors(kernels) -> None:
    device = "CPU"  # on CPU only (module docstring)
    n = 17_000
    parts = [np.arange(3, dtype=np.float32) * 0.5 + i for i in range(n)]
    stacked = Tensor.stack(*[Tensor(p, device=device) for p in parts])
    assert len(stacked.uop.toposort()) >= NODES - 10
    with kernels() as k:
        got = stacked.numpy()
    assert k.count > 1
    np.testing.assert_array_equal(got, np.stack(parts))


@pytest.mark.timeout(LIVENESS_S)
def test_a_wide_sum_of_many_tensors(kernels) -> None:
    device = "CPU"  # on CPU only (module docstring)
    n = 17_000
    parts = [np.arange(3, dtype=np.float32) + i % 101 for i in range(n)]
    total = Tensor.stack(*[Tensor(p, device=device) for p in parts]).sum(0)
    assert len(total.uop.toposort()) >= NODES
    with kernels() as k:
        got = total.numpy()
    assert k.count > 1
    np.testing.assert_array_equal(got, np.sum(parts, axis=0))  # integer sums below 2**24: exact in any order


@pytest.mark.timeout(LIVENESS_S)
def test_a_deep_backward(device: str, kernels) -> None:
    # y <- c*y + x, n times, from y = x: y_n = (c**n + (1 - c**n) / (1 - c)) * x, so that factor is the gradient
    n, c = _count(device, 50_000, 20_000), 0.9999
    x = Tensor(np.full(4, 0.5, np.float32), device=device).requires_grad_()
    y = x
    for _ in range(n):
        y = y * c + x
    y.sum().backward()
    assert x.grad is not None and len(x.grad.uop.toposort()) > 2 * n
    with kernels() as k:
        got = x.grad.numpy()
    assert k.count > 1
    close(got, np.full(4, c ** n + (1 - c ** n) / (1 - c)), rtol=1e-3, atol=0)


@pytest.mark.timeout(2 * LIVENESS_S)
def test_a_chain_of_tanh_and_its_backward() -> None:
    # sixty composite steps: each tanh is a few dozen ops, and their gradients read the forward values. The time
    # goes to compiling its distinct kernels of ~2,000 lines each (20-30 s with a cold kernel cache on this kind
    # of machine, alone; a hundred steps took 47 s): the limit is the compiler's, twice the graph passes' one
    n = 60
    x0 = np.linspace(-1, 1, 4, dtype=np.float32)
    x = Tensor(x0, device="CPU").requires_grad_()
    y = x
    for _ in range(n):
        y = (y * 1.001).tanh()
    y.sum().backward()
    assert x.grad is not None
    want, grad, vals = x0.astype(np.float64), np.ones(4), []
    for _ in range(n):
        vals.append(want)
        want = np.tanh(want * 1.001)
    for v in reversed(vals):
        grad = grad * 1.001 * (1 - np.tanh(v * 1.001) ** 2)
    close(y.numpy(), want, rtol=1e-3, atol=1e-5)
    close(x.grad.numpy(), grad, rtol=1e-2, atol=1e-7)


def test_printing_and_rewriting_a_deep_graph_does_not_recurse() -> None:
    x = UOp.variable("x", 0, 10)
    e = x
    for i in range(20_000):
        e = e + (i % 3 + 1)  # int adds of 1, 2, 3: the simplifier folds the constants into one
    assert e.render().count("+") == 20_000
    assert repr(e).count("\n") == len(e.toposort()) - 1
    assert e.simplify().op is Op.ADD and len(e.simplify().toposort()) == 3
    assert e.substitute({x: UOp.const(x.dtype, 1)}).simplify().arg == 1 + sum(i % 3 + 1 for i in range(20_000))
