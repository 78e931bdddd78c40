"""`assign_together`: several assigns stored as one schedule where that gives the result of assigning one by one
in order, and one by one where it would not (a value reading another target's storage), checked against numpy
doing the same writes in order; and the lazy-value rules of `Tensor.assign` (a lazy value built from a target
keeps the values it was built from) holding for the stores together."""
from __future__ import annotations

import numpy as np

from tolk_core.counters import GlobalCounters
from tolk_core.frontend.tensor import Tensor, assign_together


def _data(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_independent_stores_are_one_schedule_and_equal_numpy(device) -> None:
    a, b, g = _data(0, (5, 3), (4,), (5, 3))
    ta, tb, tg = (Tensor(x, device=device).realize() for x in (a, b, g))
    before = GlobalCounters.schedules
    # each value reads its own target (and storage no store writes), never the other target
    assign_together([(ta, ta * 0.5 + tg), (tb, tb - 1.0)])
    assert GlobalCounters.schedules - before == 1
    np.testing.assert_allclose(ta.numpy(), a * np.float32(0.5) + g, rtol=1e-6)
    np.testing.assert_allclose(tb.numpy(), b - np.float32(1.0), rtol=1e-6)


def test_a_value_reading_another_target_is_stored_in_order(device) -> None:
    a, b = _data(1, (6,), (6,))
    ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    before = GlobalCounters.schedules
    # b's value reads a's storage: one by one, a's store first, so b's value reads a before the store
    # (it was built from it: a lazy value keeps the values it was built from)
    assign_together([(ta, ta + 1.0), (tb, ta * 2.0)])
    assert GlobalCounters.schedules - before >= 2
    np.testing.assert_allclose(ta.numpy(), a + np.float32(1.0), rtol=1e-6)
    np.testing.assert_allclose(tb.numpy(), a * np.float32(2.0), rtol=1e-6)


def test_lazy_readers_of_the_targets_keep_their_values(device) -> None:
    a, b = _data(2, (3, 4), (3, 4))
    ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    reader = ta * tb  # lazy, reads both targets: computed before either store lands
    value = tb + 3.0
    assign_together([(ta, ta + 1.0), (tb, value)])
    np.testing.assert_allclose(reader.numpy(), a * b, rtol=1e-6)
    np.testing.assert_allclose(ta.numpy(), a + np.float32(1.0), rtol=1e-6)
    np.testing.assert_allclose(tb.numpy(), b + np.float32(3.0), rtol=1e-6)
    # the stored value now reads its target's new contents
    np.testing.assert_allclose(value.numpy(), b + np.float32(3.0), rtol=1e-6)


def test_scalars_and_broadcasts_are_cast_like_assign(device) -> None:
    ta = Tensor(np.zeros((2, 3), np.int32), device=device).realize()
    tb = Tensor(np.zeros((2, 3), np.float32), device=device).realize()
    assign_together([(ta, 7), (tb, Tensor(np.array([1.5, 2.5, 3.5], np.float32), device=device))])
    np.testing.assert_array_equal(ta.numpy(), np.full((2, 3), 7, np.int32))
    assert ta.numpy().dtype == np.int32
    np.testing.assert_array_equal(tb.numpy(), np.broadcast_to(np.array([1.5, 2.5, 3.5], np.float32), (2, 3)))
