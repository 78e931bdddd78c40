"""The new ops fuse as their docstrings say (gather, einsum contractions, pad modes and repeat are one kernel
each; a scatter is two, the last writer's number then its value; a sort two, ranks then selects), and replay
under `tolk_core.jit`."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.frontend.tensor import Tensor

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(("name", "build", "count"), [
    ("gather", lambda x, i: x.gather(1, i), 1),
    ("scatter", lambda x, i: x.scatter(1, i, 2.0), 2),
    ("scatter_reduce", lambda x, i: x.scatter_reduce(1, i, x[:, :5], "amax"), 1),
    ("einsum", lambda x, i: Tensor.einsum("ij,kj->ik", x, x), 1),
    ("pad", lambda x, i: x.pad((2, 2, 1, 1), mode="reflect"), 1),
    ("repeat", lambda x, i: x.repeat(2, 3), 1),
    ("sort", lambda x, i: x.sort()[0], 2),
    ("topk", lambda x, i: x.topk(3)[1], 2),
])
def test_kernel_counts(device, kernels, name, build, count) -> None:
    x = Tensor(RNG.standard_normal((4, 8)).astype(np.float32), device=device).realize()
    i = Tensor(RNG.integers(0, 8, (4, 5)), device=device).realize()
    out = build(x, i)
    with kernels() as k:
        out.realize()
    assert k.count == count, f"{name}: {k.count} kernels"


def test_the_new_ops_replay_under_jit(device) -> None:
    import tolk_core

    @tolk_core.jit
    def f(x, i):
        return (x.sort()[0] + 0, x.gather(1, i) + 0, Tensor.einsum("ij,kj->ik", x, x) + 0,
                x.pad((1, 1), mode="reflect") + 0, x[[1, 0], np.array([True, False, True, False])] + 0)

    for _ in range(3):  # capture, then replays with new data
        xs = RNG.standard_normal((2, 4)).astype(np.float32)
        ii = RNG.integers(0, 4, (2, 3))
        out = f(Tensor(xs, device=device), Tensor(ii, device=device))
        np.testing.assert_array_equal(out[0].numpy(), np.sort(xs, 1))
        np.testing.assert_array_equal(out[1].numpy(), np.take_along_axis(xs, ii, 1))
        np.testing.assert_allclose(out[2].numpy(), xs @ xs.T, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out[3].numpy(), np.pad(xs, ((0, 0), (1, 1)), mode="reflect"))
        np.testing.assert_array_equal(out[4].numpy(), xs[[1, 0], [0, 2]])
