"""Schedule-cache hits launched directly (engine/hits.py): a repeated realize or assignment queues its kernels on
new storage without building a LINEAR. Its results must equal numpy's step after step, its intermediates must
be given back, stores that read each other's targets must keep the cached verdict, and a replaced program (a
tuned plan) must be picked up."""
from __future__ import annotations

import gc

import numpy as np

import tolk_core
from tests.frontend.helpers import close
from tolk_core.counters import GlobalCounters
from tolk_core.engine import compile as engine_compile
from tolk_core.engine import hits
from tolk_core.engine import schedule as engine_schedule
from tolk_core.frontend.tensor import Tensor, assign_stages
from tolk_core.runtime import Buffer


def _step(x: Tensor, w: Tensor) -> Tensor:
    h = (x @ w).relu()  # stored: the matmul's output feeds a reduction over rows
    return (h - h.max(axis=1, keepdim=True)).exp().sum(axis=1)


def _ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    h = np.maximum(x @ w, 0)
    return np.exp(h - h.max(axis=1, keepdims=True)).sum(axis=1)


def test_repeated_realizes_launch_directly_with_numpys_values(device) -> None:
    rng = np.random.default_rng(0)
    wn = rng.standard_normal((8, 6)).astype(np.float32)
    w = Tensor(wn, device=device)
    direct = 0
    for i in range(5):
        x = rng.standard_normal((5, 8)).astype(np.float32)
        before = GlobalCounters.schedule_cache_hits
        launched = hits.launch
        calls: list[int] = []
        hits.launch = lambda d, h, _f=launched, _c=calls: _c.append(1) or _f(d, h)  # type: ignore[assignment]
        try:
            out = _step(Tensor(x, device=device), w).numpy()
        finally:
            hits.launch = launched  # type: ignore[assignment]
        close(out, _ref(x, wn), rtol=1e-5)
        if i >= 1:  # the first graph of this shape may be cached by another test already; later ones hit
            assert GlobalCounters.schedule_cache_hits == before + 1 and calls
            direct += 1
    assert direct == 4


def test_intermediates_of_direct_launches_are_given_back() -> None:
    rng = np.random.default_rng(1)
    w = Tensor(rng.standard_normal((8, 6)).astype(np.float32))
    x = Tensor(rng.standard_normal((5, 8)).astype(np.float32))

    def live_buffers() -> int:
        gc.collect()
        return sum(isinstance(o, Buffer) for o in gc.get_objects())
    for _ in range(3):
        _step(x, w).realize()
    start = live_buffers()
    for _ in range(40):
        _step(x, w).realize()
    assert live_buffers() <= start + 2  # the results of the last calls at most, not one set per call


def test_stores_reading_each_others_targets_repeat_directly() -> None:
    """An optimizer-like update: a and b each store a value reading both (the scheduler keeps every read
    before the store it reads); repeated, the cached verdict and the direct launch keep numpy's values."""
    rng = np.random.default_rng(2)
    a0, b0 = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    a, b = Tensor(a0.copy()).contiguous().realize(), Tensor(b0.copy()).contiguous().realize()
    for _ in range(4):
        assign_stages([[(a, a * 0.5 + b)], [(b, b * 0.25 - a)]])
        a0, b0 = a0 * 0.5 + b0, b0 * 0.25 - a0
    close(a.numpy(), a0, rtol=1e-5)
    close(b.numpy(), b0, rtol=1e-5)


def test_a_replaced_program_is_picked_up() -> None:
    rng = np.random.default_rng(3)
    xn, wn = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal((8, 6)).astype(np.float32)
    x, w = Tensor(xn), Tensor(wn)
    for _ in range(2):
        _step(x, w).realize()
    for e in engine_schedule._schedules.values():
        e.derived.pop("plan", None)
    _step(x, w).realize()  # works out its entry's plan again
    (entry,) = [e for e in engine_schedule._schedules.values() if "plan" in e.derived]
    device, count, _ = entry.derived["plan"]
    ast = entry.calls[0][0]
    engine_compile.use_program(device, ast, engine_compile._programs[(device, ast)])  # the same program again
    assert engine_compile.replaced() == count + 1
    out = _step(x, w).realize()  # as the calls before (`numpy()` of a lazy value marks it observable: another key)
    assert entry.derived["plan"][1] == engine_compile.replaced()  # worked out again
    close(out.numpy(), _ref(xn, wn), rtol=1e-5)


def test_a_jitted_function_still_captures_linears() -> None:
    rng = np.random.default_rng(4)
    w = Tensor(rng.standard_normal((8, 6)).astype(np.float32))
    step = tolk_core.jit(_step)
    for _ in range(4):
        x = rng.standard_normal((5, 8)).astype(np.float32)
        close(step(Tensor(x), w).numpy(), _ref(x, w.numpy()), rtol=1e-5)


def _chain(x: Tensor) -> Tensor:
    """Five kernels: each stored step is one (enough for a hit to replay through the device's Graph)."""
    a = (x * 2).contiguous()
    b = (a + 1).contiguous()
    c = (b * a).contiguous()
    d = (c - x).contiguous()
    return d.sum(axis=1)


def _chain_ref(x: np.ndarray) -> np.ndarray:
    a = x * 2
    return ((a + 1) * a - x).sum(axis=1)


def test_repeated_hits_replay_through_the_devices_graph(device) -> None:
    """From its second hit a schedule of several kernels is replayed by the device's Graph, rebound to each
    call's buffers: every call still gives numpy's values for its own input."""
    rng = np.random.default_rng(5)
    before = GlobalCounters.eager_graph_replays
    for _ in range(5):
        x = rng.standard_normal((4, 7)).astype(np.float32)
        close(_chain(Tensor(x, device=device)).numpy(), _chain_ref(x), rtol=1e-5)
    assert GlobalCounters.eager_graph_replays - before >= 3


def test_graph_replays_queued_together_each_read_their_own_buffers() -> None:
    """Two hits of one entry queued before either runs (inside `together()`, as a multi-device step queues
    them): each replay binds its own buffers when it runs, not the last ones bound."""
    from tolk_core.engine import concurrent
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(4)]
    for x in xs[:2]:
        _chain(Tensor(x)).realize()  # the entry exists and has been launched once: the next hits replay
    before = GlobalCounters.eager_graph_replays
    with concurrent.together():
        outs = [_chain(Tensor(x)).realize() for x in xs[2:]]
    assert GlobalCounters.eager_graph_replays - before == 2
    for out, x in zip(outs, xs[2:], strict=True):
        close(out.numpy(), _chain_ref(x), rtol=1e-5)


def test_intermediates_are_reused_by_the_next_hit_within_the_limit(monkeypatch) -> None:
    """A hit keeps its intermediates for its entry's next hit (the same storage, the results still numpy's),
    and all entries together keep at most SCRATCH_BYTES (the least recently hit give theirs back)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 9)).astype(np.float32)
    for _ in range(3):
        _chain(Tensor(x)).realize()
    kept = [e.derived["scratch"][1] for e in engine_schedule._schedules.values() if "scratch" in e.derived]
    handles = {id(b.handle) for bs in kept for b in bs}
    close(_chain(Tensor(x)).numpy(), _chain_ref(x), rtol=1e-5)
    again = [e.derived["scratch"][1] for e in engine_schedule._schedules.values() if "scratch" in e.derived]
    assert handles and {id(b.handle) for bs in again for b in bs} >= handles
    monkeypatch.setattr(hits, "SCRATCH_BYTES", 200)  # room for one of the shapes below at most
    for n in (4, 5, 6, 7):
        y = rng.standard_normal((2, n)).astype(np.float32)
        for _ in range(2):
            close(_chain(Tensor(y)).numpy(), _chain_ref(y), rtol=1e-5)
        assert hits._kept_bytes[0] <= 200
    assert hits._kept_bytes[0] == sum(n for _, n in hits._kept.values())


def test_threads_sharing_a_schedule_each_get_their_own_values() -> None:
    """Two threads realizing the same graph (one cache entry, one device Graph) over and over: each replay binds
    and runs its own buffers (the graph's lock), so every result is numpy's for its own input."""
    import threading
    rng = np.random.default_rng(8)
    inputs = [[rng.standard_normal((5, 11)).astype(np.float32) for _ in range(30)] for _ in range(2)]
    for x in inputs[0][:2]:
        _chain(Tensor(x)).realize()
    errors: list[BaseException] = []

    def work(xs: list[np.ndarray]) -> None:
        try:
            for x in xs:
                close(_chain(Tensor(x)).numpy(), _chain_ref(x), rtol=1e-5)
        except BaseException as e:  # re-raised in the test's thread below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(xs,)) for xs in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert hits._kept_bytes[0] == sum(n for _, n in hits._kept.values())  # the kept storage's count holds
