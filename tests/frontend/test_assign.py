"""Assignment into views: __setitem__ and assign write through slices and reshapes, in place."""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.helpers import close
from tolk_core.errors import BroadcastStoreError, TolkError
from tolk_core.frontend.tensor import Tensor


def _pair(device: str, shape=(6, 8), dtype=np.float32):
    base = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    return base.copy(), Tensor(base, device=device).realize()


CASES = {
    "slice_rows": (lambda t, v: t.__setitem__(slice(1, 3), v), lambda a, v: a.__setitem__(slice(1, 3), v), (2, 8)),
    "int_row": (lambda t, v: t.__setitem__(4, v), lambda a, v: a.__setitem__(4, v), (8,)),
    "strided": (lambda t, v: t.__setitem__((slice(None, None, 2), slice(1, None, 3)), v),
                lambda a, v: a.__setitem__((slice(None, None, 2), slice(1, None, 3)), v), (3, 3)),
    "negative_step": (lambda t, v: t.__setitem__((slice(None), slice(None, None, -1)), v),
                      lambda a, v: a.__setitem__((slice(None), slice(None, None, -1)), v), (6, 8)),
    "column_broadcast_value": (lambda t, v: t.__setitem__((slice(None), 2), v), lambda a, v: a.__setitem__(
        (slice(None), 2), v), (1,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_setitem_matches_numpy(device, name) -> None:
    set_t, set_np, vshape = CASES[name]
    a, t = _pair(device)
    v = np.random.default_rng(len(name)).uniform(-5, 5, size=vshape).astype(np.float32)
    set_t(t, Tensor(v, device=device))
    set_np(a, v)
    close(t.numpy(), a)


def test_setitem_through_reshape(device) -> None:
    a, t = _pair(device)
    t.reshape(4, 12)[1:3, ::5] = 100.0
    a.reshape(4, 12)[1:3, ::5] = 100.0
    close(t.numpy(), a)


def test_views_share_storage(device) -> None:
    a, t = _pair(device)
    view = t.reshape(48)
    t[0] = -1.0
    a[0] = -1.0
    close(view.numpy(), a.reshape(48))


def test_assign_self_plus_one_and_fresh_expressions(device) -> None:
    a, t = _pair(device)
    doubled_before = (t * 2).numpy()
    t.assign(t + 1)
    close(doubled_before, a * 2)
    close((t * 2).numpy(), (a + 1) * 2)  # the same expression built again sees the new values


@pytest.mark.parametrize("hazard", ["transpose", "flip", "shift"])
def test_store_hazards(device, hazard) -> None:
    a, t = _pair(device, shape=(7, 7))
    if hazard == "transpose":
        t.assign(t.T + 1)
        a[...] = a.T + 1
    elif hazard == "flip":
        t.assign(t.flip(0))
        a[...] = np.flip(a, 0).copy()
    else:
        t[1:].assign(t[:-1])
        a[1:] = a[:-1].copy()
    close(t.numpy(), a)


def test_assign_into_lazy_tensor_realizes_it(device) -> None:
    t = Tensor(np.ones((3, 3), np.float32), device=device) * 3
    t[0, 0] = 7.0
    want = np.full((3, 3), 3, np.float32)
    want[0, 0] = 7
    close(t.numpy(), want)


def test_assign_into_broadcast_is_refused(device) -> None:
    t = Tensor(np.ones((1, 5), np.float32), device=device).realize()
    with pytest.raises(BroadcastStoreError, match=r"cannot store into a broadcast: EXPAND \(1, 5\) -> \(4, 5\)") as e:
        t.expand(4, 5)[...] = Tensor(np.zeros((4, 5), np.float32), device=device)
    assert isinstance(e.value, TolkError) and isinstance(e.value, ValueError)


def test_expand_adding_axes_of_one_is_accepted(device) -> None:
    t = Tensor(np.ones((5,), np.float32), device=device).realize()
    t.reshape(1, 5).expand(1, 5)[...] = 2.0
    close(t.numpy(), np.full(5, 2, np.float32))


def test_write_through_a_bitcast(device) -> None:
    a = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    t = Tensor(a.copy(), device=device).realize()
    t.bitcast("int32")[1] = Tensor(np.array([1, -1, 0x7F800000, 0x3F800000], np.int32), device=device)
    a.view(np.int32)[1] = [1, -1, 0x7F800000, 0x3F800000]
    np.testing.assert_array_equal(t.numpy().view(np.int32), a.view(np.int32))  # bits, NaN included


def test_assigns_into_a_fresh_tensor_keep_its_graph_small(device) -> None:
    t = Tensor.zeros(4, device=device)
    sizes = []
    for _ in range(50):
        t.assign(t * 2 + 1)
        sizes.append(len(t.uop.toposort()))
    assert max(sizes) == min(sizes) <= 4  # storage viewed as is: the graph does not grow with the assigns
    close(t.numpy(), np.full(4, 2.0 ** 50 - 1, np.float32))


def test_assigning_a_tensor_to_a_lazy_one_does_not_alias_it(device) -> None:
    src = Tensor(np.ones(3, np.float32), device=device)
    t = Tensor.zeros(3, device=device)
    t.assign(src)
    t[0] = 5.0
    close(src.numpy(), np.ones(3, np.float32))
    close(t.numpy(), np.array([5, 1, 1], np.float32))
