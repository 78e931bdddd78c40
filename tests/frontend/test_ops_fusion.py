"""The new ops fuse as their docstrings say: gather, einsum contractions, pad modes and repeat are one kernel
each; a scatter is two (the last writer's number, then its value); a sort two (ranks, then the selects)."""
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
