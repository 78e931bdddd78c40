"""allreduce(x, out=): the result is written into the caller's array and that array returned, on every rank,
equal to numpy's fold of every rank's input; in place (out is x), an out that partly overlaps x, a strided out,
and an out that can never hold the result (an error on every rank, before any data moves). Two ranks of the TCP
reference run as threads of this process; the tier checks the same for every provider across processes."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tolk_core.collectives.group import reduce_arrays
from tolk_core.collectives.tcp import TcpGroup, _accept, _connect
from tolk_core.errors import ArgumentTypeError, CollectiveError, ShapeError

pytestmark = pytest.mark.timeout(60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _both(fn: Callable[[TcpGroup], Any]) -> list[Any]:
    """fn(group) on rank 0 and rank 1 of a fresh 2-rank TCP group (threads); each rank's return value or the
    exception it raised."""
    port, deadline = _free_port(), time.monotonic() + 20
    results: list[Any] = [None, None]

    def rank(r: int) -> None:
        try:
            socks = _accept("127.0.0.1", port, 2, deadline) if r == 0 else _connect("127.0.0.1", port, 1, 2, deadline)
            with TcpGroup(r, 2, 10.0, socks) as g:
                results[r] = fn(g)
        except Exception as e:  # noqa: BLE001  # the test looks at what each rank raised
            results[r] = e
    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def _inputs(dtype: str, shape: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    if dtype == "bool":
        return [rng.random(shape) < 0.5 for _ in range(2)]
    return [rng.integers(-50, 50, size=shape).astype(dtype) for _ in range(2)]


@pytest.mark.parametrize("dtype, shape", [("float32", (5001,)), ("int64", (3, 7)), ("bool", (64,)),
                                          ("float64", ()), ("int32", (0, 4)), ("uint8", (1 << 20,))])
def test_out_holds_numpy_sum_and_is_the_given_array(dtype, shape):
    xs = _inputs(dtype, shape)
    want = reduce_arrays(xs, "sum")

    def call(g: TcpGroup) -> tuple[bool, np.ndarray, np.ndarray]:
        x = xs[g.rank].copy()
        out = np.zeros(shape, dtype)
        got = g.allreduce(x, "sum", out=out)
        return got is out, out, x
    for r, (same, out, x) in enumerate(_both(call)):
        assert same
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(x, xs[r])  # the input is left as it was
    if shape == (3, 7):  # against numpy itself, not only the reference fold
        np.testing.assert_array_equal(want, xs[0] + xs[1])


@pytest.mark.parametrize("how", ["inplace", "overlap", "strided"])
def test_out_in_place_overlapping_or_strided(how):
    xs = [np.arange(4000, dtype=np.float32) * (r + 1) for r in range(2)]
    want = xs[0] + xs[1]

    def call(g: TcpGroup) -> tuple[bool, np.ndarray]:
        if how == "inplace":
            x = out = xs[g.rank].copy()
        elif how == "overlap":  # out starts one element before x in the same memory
            store = np.empty(4001, np.float32)
            x, out = store[1:], store[:-1]
            x[...] = xs[g.rank]
        else:
            x, out = xs[g.rank].copy(), np.zeros((4000, 2), np.float32)[:, 0]
        got = g.allreduce(x, "sum", out=out)
        return got is out, np.array(out)
    for same, out in _both(call):
        assert same
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("bad, error", [(np.zeros(5, np.float32), ShapeError), (np.zeros(4, np.float64), ShapeError),
                                        ([0.0] * 4, ShapeError), ("ro", ArgumentTypeError)])
def test_an_out_that_cannot_hold_the_result_fails_every_rank(bad, error):
    if isinstance(bad, str):
        bad = np.zeros(4, np.float32)
        bad.flags.writeable = False

    def call(g: TcpGroup) -> np.ndarray:
        x = np.ones(4, np.float32)
        return g.allreduce(x, "sum", out=bad if g.rank == 1 else np.empty(4, np.float32))
    r0, r1 = _both(call)
    assert isinstance(r1, error) and "out" in str(r1)
    assert isinstance(r0, CollectiveError) and "rank 1" in str(r0) and "out" in str(r0)
