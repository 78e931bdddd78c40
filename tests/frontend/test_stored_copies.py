"""A copy of stored data (`x.detach()` made a tracked leaf, `x.contiguous()` realized) is one device copy with no
schedule (engine/realize.py `_stored_copies`), with the same meaning as the kernel it replaces: new storage
holding x's values as they were, one per copy, and inside a JIT capture a kernel replays repeat."""
from __future__ import annotations

import numpy as np

import tolk_core
from tolk_core import Tensor
from tolk_core.counters import GlobalCounters


def test_a_detached_leaf_is_a_copy_with_no_kernel(device):
    data = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    x = Tensor(data, device=device)
    launched, schedules = GlobalCounters.kernels_launched, GlobalCounters.schedules
    a = x.detach().requires_grad_()
    b = x.detach().requires_grad_()
    assert GlobalCounters.kernels_launched == launched and GlobalCounters.schedules == schedules
    assert a.shape == (3, 4) and a.uop is not b.uop  # two leaves, each its own storage
    x.assign(x * 0)  # the copies hold the values as they were
    np.testing.assert_array_equal(a.numpy(), data)
    (a * a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * data)
    assert b.grad is None  # b was not used


def test_contiguous_of_storage_is_new_storage(device):
    data = np.linspace(-1, 1, 10, dtype=np.float32)
    x = Tensor(data, device=device)
    y = x.reshape(2, 5).contiguous().realize()
    x.assign(x + 1).realize()
    np.testing.assert_array_equal(y.numpy(), data.reshape(2, 5))


def test_inside_a_capture_the_copy_is_replayed():
    """The leaf a jitted function makes follows each call's input (a copy made once, at capture, would not)."""
    def step(x: Tensor) -> Tensor:
        leaf = x.detach().requires_grad_()
        (leaf * leaf).sum().backward()
        return leaf.grad
    f = tolk_core.jit(step)
    for i in range(4):
        data = np.full(5, i + 1, np.float32) * np.arange(5, dtype=np.float32)
        np.testing.assert_allclose(f(Tensor(data)).numpy(), 2 * data)


def test_a_view_that_is_not_whole_storage_is_computed():
    """A leaf of a slice reads part of the storage: a kernel computes it, the values are the slice's."""
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = Tensor(data)
    leaf = x[1:3, ::2].detach().requires_grad_()
    np.testing.assert_array_equal(leaf.numpy(), data[1:3, ::2])
    leaf.sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), np.ones((2, 3), np.float32))
