"""JIT behaviours that once gave silent wrong answers, each against an eager or numpy reference on every
compiled device: random draws on replay, calls from several threads, NumPy arguments mutated in place, and
Tensors the function reads from its closure (docs/jit.md)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tolk_core
from tolk_core.errors import JitError
from tolk_core.frontend.tensor import Tensor


def test_random_draws_advance_on_every_replay_as_eager_calls_do(device) -> None:
    """Each replay draws new numbers, and the sequence is the eager one for the same seed."""
    @tolk_core.jit
    def noisy(x: Tensor) -> Tensor:
        return x + Tensor.rand(3, 4, device=device) + Tensor.randn(3, 4, device=device)

    x = Tensor(np.zeros((3, 4), np.float32), device=device)
    Tensor.manual_seed(11)
    jitted = [noisy(x).numpy() for _ in range(5)]
    Tensor.manual_seed(11)
    eager = [(x + Tensor.rand(3, 4, device=device) + Tensor.randn(3, 4, device=device)).numpy() for _ in range(5)]
    assert len({a.tobytes() for a in jitted}) == 5
    for got, want in zip(jitted, eager, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_calls_from_several_threads_never_return_another_calls_result(device) -> None:
    """Calls take turns: a result read right after its call is that call's (or, if another thread's call
    overwrote it first, reading it raises JitError); never another call's values."""
    @tolk_core.jit
    def triple(a: Tensor) -> Tensor:
        return (a * 3).contiguous()

    wrong: list[tuple[int, int]] = []
    right = [0]

    def worker(k: int) -> None:
        for i in range(15):
            v = float(k * 100 + i)
            try:
                got = triple(Tensor(np.full(8, v, np.float32), device=device)).numpy()
            except JitError:
                continue  # a later call overwrote this call's output: named, not silent
            if np.array_equal(got, np.full(8, 3 * v, np.float32)):
                right[0] += 1
            else:
                wrong.append((k, i))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    assert right[0] > 0


def test_numpy_argument_is_read_afresh_on_every_call(device) -> None:
    """A NumPy array argument uploaded inside the function is uploaded again on every replay: mutating it in
    place, or passing another array of its shape and dtype, changes the result as it would eagerly."""
    @tolk_core.jit
    def doubled(a: np.ndarray) -> Tensor:
        return (Tensor(a, device=device) * 2).contiguous()

    arr = np.arange(6, dtype=np.float32)
    for i in range(4):
        arr[0] = 10.0 * i
        np.testing.assert_array_equal(doubled(arr).numpy(), arr * 2)
    other = np.full(6, -1.5, np.float32)
    np.testing.assert_array_equal(doubled(other).numpy(), other * 2)
    with pytest.raises(JitError, match="NumPy array of shape"):
        doubled(np.zeros(3, np.float32))


_GLOBAL_WEIGHT = None


def test_closure_or_global_tensor_rebound_after_capture_raises(device) -> None:
    """A Tensor read from the closure or a global: updated in place (assign) the replay sees it; rebound to
    another Tensor the replay would read the old buffer, so the call raises JitError naming it."""
    global _GLOBAL_WEIGHT
    w = Tensor(np.ones(4, np.float32), device=device).realize()
    _GLOBAL_WEIGHT = Tensor(np.full(4, 2.0, np.float32), device=device).realize()

    @tolk_core.jit
    def scaled(a: Tensor) -> Tensor:
        return a * w * _GLOBAL_WEIGHT

    x = Tensor(np.arange(4, dtype=np.float32), device=device)
    for _ in range(3):
        np.testing.assert_array_equal(scaled(x).numpy(), np.arange(4) * 2.0)
    w.assign(Tensor(np.full(4, 5.0, np.float32), device=device))
    np.testing.assert_array_equal(scaled(x).numpy(), np.arange(4) * 10.0)
    captured, _GLOBAL_WEIGHT = _GLOBAL_WEIGHT, Tensor(np.full(4, 3.0, np.float32), device=device)
    with pytest.raises(JitError, match="'_GLOBAL_WEIGHT'.*rebound since capture"):
        scaled(x)
    _GLOBAL_WEIGHT = captured
    np.testing.assert_array_equal(scaled(x).numpy(), np.arange(4) * 10.0)
    w = Tensor(np.zeros(4, np.float32), device=device)
    with pytest.raises(JitError, match="'w'.*rebound since capture"):
        scaled(x)
    _GLOBAL_WEIGHT = None
