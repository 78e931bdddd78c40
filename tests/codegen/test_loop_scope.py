"""A value computed inside a loop is out of scope after it: when a kernel has two loops over the same range (a
register tile's scalar and vector parts each reduce over it), the second loop computes its own copy
(codegen/linearize.py `close`). Seen as a C compile error (`v4 undeclared`) in an average pool with uneven
padding whose 32-wide rows were tiled in 8-lane vectors (AVX2); the tile width is forced here, so the test does
not depend on the machine's vectors."""
from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = """
import numpy as np
from tolk_core.frontend.tensor import Tensor
x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
pad = ((0, 0), (0, 0), (0, 1), (0, 1))  # uneven: one more row and column after
t = Tensor(x, device="CPU")
ones = Tensor.ones(1, 1, 32, 32, device="CPU").pad(pad)
got = (t.pad(pad).avg_pool2d(2, stride=1) / ones.avg_pool2d(2, stride=1)).numpy()
xp, op = np.pad(x, pad), np.pad(np.ones((1, 1, 32, 32), np.float32), pad)
win = lambda a: sum(a[..., i:i + 32, j:j + 32] for i in (0, 1) for j in (0, 1))
np.testing.assert_allclose(got, win(xp) / win(op), rtol=1e-6)
print("ok")
"""


def test_two_loops_over_one_range_each_compute_their_values(tmp_path):
    for vector_bytes in ("32", "16"):
        env = {**os.environ, "TOLK_CPU_VECTOR_BYTES": vector_bytes, "TOLK_CACHE_DIR": str(tmp_path)}
        p = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=240)
        assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]
