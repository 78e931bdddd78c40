"""Autograd semantics with hand-computed values: ties, detach, contiguous_backward, accumulation, seeds, no_grad,
laziness and fusion of gradients, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.frontend.autograd import GradientError, no_grad
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


def _t(values, device="CPU") -> Tensor:
    return Tensor(np.array(values, np.float32), device=device).requires_grad_()


def test_ties_split_evenly(device) -> None:
    x, y = _t([1.0, 2.0, 3.0], device), _t([1.0, 0.0, 5.0], device)
    r = _t([[1.0, 3.0, 3.0, 2.0], [4.0, 4.0, 4.0, 0.0]], device)
    m = _t([[2.0, -1.0, -1.0]], device)
    z = _t([0.0, -1.0, 2.0], device)
    x.maximum(y).sum().backward()
    r.max(axis=1).sum().backward()
    m.min().backward()
    z.relu().sum().backward()  # relu's gradient is torch's, not the tie rule's: 0 at exactly 0
    Tensor.realize(x.grad, y.grad, r.grad, m.grad, z.grad)
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(y.grad.numpy(), [0.5, 0.0, 1.0])
    np.testing.assert_allclose(r.grad.numpy(), [[0, 0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3, 0]], rtol=1e-6)
    np.testing.assert_array_equal(m.grad.numpy(), [[0, 0.5, 0.5]])
    np.testing.assert_array_equal(z.grad.numpy(), [0.0, 0.0, 1.0])


def test_detach_stops_gradients() -> None:
    a, b = _t([1.0, -2.0, 3.0]), _t([4.0, 5.0, 6.0])
    (a * a.detach() + b.detach() * 3).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, -2.0, 3.0])  # d/da of a * const(a) is const(a)
    assert b.grad is None


def test_contiguous_backward_realizes_the_gradient_there() -> None:
    x = _t([[1.0, 2.0], [3.0, 4.0]])
    (x * x).contiguous_backward().exp().sum().backward()
    assert Op.CONTIGUOUS in {u.op for u in x.grad.uop.toposort()}
    xn = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xn * xn) * 2 * xn, rtol=1e-5)


def test_gradients_accumulate_until_cleared() -> None:
    x = _t([1.0, 2.0])
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 7.0])
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_seed_gradient_weights_a_non_scalar_root() -> None:
    x = _t([1.0, 2.0, 3.0])
    (x * x).backward(Tensor(np.array([1.0, 10.0, 100.0], np.float32)))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 40.0, 600.0])


def test_gradients_are_lazy_and_fuse(kernels) -> None:
    x = _t(np.linspace(-1, 1, 16).reshape(4, 4))
    ((x * 2).exp() * x).sum().backward()
    assert x.grad.uop.op not in (Op.BUFFER, Op.RESHAPE), "backward() computed the gradient eagerly"
    with kernels() as k:
        got = x.grad.numpy()
    assert k.count == 1  # elementwise forward and backward: one kernel
    xn = np.linspace(-1, 1, 16).reshape(4, 4)
    np.testing.assert_allclose(got, np.exp(2 * xn) * (2 * xn + 1), rtol=1e-5)


def test_marking_a_lazy_tensor_realizes_it() -> None:
    a = Tensor.ones(3) * 2
    b = Tensor.ones(3) * 2  # the same graph as a: without storage they could not be told apart
    a.requires_grad = True
    (a * 5).sum().backward()
    assert b.grad is None and not b.requires_grad
    np.testing.assert_array_equal(a.grad.numpy(), [5.0, 5.0, 5.0])


def test_no_grad() -> None:
    x = _t([1.0])
    with no_grad():
        y = Tensor(np.ones(2, np.float32)).requires_grad_()
        assert not y.requires_grad
        with pytest.raises(GradientError, match="no_grad"):
            (x * 2).sum().backward()
    (x * 2).sum().backward()
    assert x.grad is not None


def test_errors_name_the_problem() -> None:
    x = _t([1.0, 2.0])
    with pytest.raises(GradientError, match=r"shape \(2,\) needs a gradient"):
        (x * 2).backward()
    with pytest.raises(GradientError, match="nothing this tensor depends on requires grad"):
        Tensor(np.ones(2, np.float32)).sum().backward()
    with pytest.raises(GradientError, match="only float tensors"):
        Tensor(np.array([1, 2], np.int32)).requires_grad = True
    with pytest.raises(GradientError, match=r"gradient of shape \(3,\)"):
        (x * 2).backward(Tensor(np.ones(3, np.float32)))
    prod = Tensor(UOp(Op.REDUCE_AXIS, dtypes.float32, (x.uop,), (Op.MUL, (0,))), x.device)
    with pytest.raises(GradientError, match="MUL reduction"):
        prod.sum().backward()


def test_gradient_nodes_record_the_shapes_their_ops_give() -> None:
    """Autograd records each node's shape as it builds it (no walk over the backward graph later): every recorded
    shape equals the one the node's op gives from its sources' shapes, for a graph using every rule."""
    from tolk_core.ir.uop import _compute_shape
    x, w = _t(np.linspace(-2, 2, 24).reshape(2, 3, 4)), _t(np.linspace(0.5, 1.5, 4))
    img = _t(np.linspace(-1, 1, 2 * 3 * 6 * 6).reshape(2, 3, 6, 6))
    k = _t(np.linspace(-1, 1, 4 * 3 * 3 * 3).reshape(4, 3, 3, 3))
    y = (x * w - x / (w + 3) + (-x).exp2() + (x * x + 1).log2() + x.sin() * x.cos() + (x * x + 1).sqrt()
         + (x + 5).reciprocal() + x.trunc() + x % 1.5 + x.maximum(w) + (x > 0).where(x, w))
    y = y.permute(2, 0, 1).reshape(4, 6).pad(((1, 0), (0, 2))).shrink(((0, 4), (1, 7))).flip(1)
    y = y.cast(dtypes.float64).cast(dtypes.float32).contiguous().contiguous_backward()
    z = y.max(axis=1).sum() + y.softmax(-1).sum() + y.sum(0).expand(3, 6).sum()
    z = z + img.conv2d(k, padding=1).square().sum()
    z.backward()
    checked = 0
    for t in (x, w, img, k):
        assert t.grad is not None
        for u in t.grad.uop.toposort():
            if u.op is Op.BUFFER or u.op is Op.UNIQUE or u.op is Op.DEVICE:
                continue
            for s in u.src:
                s.shape  # noqa: B018  (sources first: _compute_shape reads their shapes)
            assert u.shape == _compute_shape(u), (u.op, u.shape, _compute_shape(u))
            checked += 1
    assert checked > 100
