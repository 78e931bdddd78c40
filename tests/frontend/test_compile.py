"""Compile once: kernels are cached in memory and on disk; the optimization mechanisms show in the source."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tolk_core.codegen import generate
from tolk_core.counters import GlobalCounters
from tolk_core.engine.compile import compile_linear
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device


def _linear_of(t: Tensor):
    return schedule(target_for(t.device), [t.uop])[0]


def test_second_realize_compiles_nothing(device) -> None:
    x = np.random.default_rng(0).random((37, 41)).astype(np.float32)

    def program() -> np.ndarray:
        return ((Tensor(x, device=device) * 3 - 1).exp().sum(axis=0)).numpy()

    first = program()
    before = GlobalCounters.compiles + GlobalCounters.disk_cache_hits
    second = program()
    assert GlobalCounters.compiles + GlobalCounters.disk_cache_hits == before
    np.testing.assert_array_equal(first, second)


def test_second_process_reuses_disk_cache(device, tmp_path) -> None:
    script = textwrap.dedent(f"""
        import numpy as np
        from tolk_core.frontend.tensor import Tensor
        from tolk_core.counters import GlobalCounters
        x = np.arange(300, dtype=np.float32).reshape(20, 15)
        got = (Tensor(x, device="{device}") * 2 + 7).max(axis=1).numpy()
        assert np.array_equal(got, (x * 2 + 7).max(axis=1)), got
        print(GlobalCounters.compiles, GlobalCounters.disk_cache_hits)
    """)
    env = {**os.environ, "TOLK_CACHE_DIR": str(tmp_path), "POCL_CACHE_DIR": str(tmp_path / "pocl")}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    (c1, h1), (c2, h2) = (map(int, r.stdout.split()) for r in runs)
    assert (c1, h1) == (1, 0), runs[0].stdout
    assert (c2, h2) == (0, 1), runs[1].stdout


def test_cpu_mechanisms_in_source() -> None:
    a, b = (Tensor(np.ones((1024, 1024), np.float32), device="CPU") for _ in range(2))
    elementwise = generate(_linear_of((a * b + 1).relu()).src[0].src[0], Device["CPU"].renderer).source
    reduce = generate(_linear_of((a * b).sum(axis=1)).src[0].src[0], Device["CPU"].renderer).source
    assert "#pragma omp parallel for" in elementwise and "#pragma omp simd" in elementwise
    assert "#pragma omp parallel for" in reduce  # the outer loop over rows is split across threads


def test_opencl_mechanisms() -> None:
    from tests.conftest import _available
    ok, why = _available("OPENCL")
    if not ok:
        pytest.skip(why)
    a = Tensor(np.ones((4096, 512), np.float32), device="OPENCL")
    ((_, wide), (_, elementwise), (_, narrow)) = (
        compile_linear(_linear_of(t))[0] for t in ((a * 2).sum(axis=1), a * 2 + 1, a[:4].sum(axis=1)))
    for ks in (wide, elementwise):  # one work item per output, in groups
        assert ks.local_size is not None and ks.local_size[0] > 1 and "get_global_id" in ks.source
        assert ks.global_size[0] * ks.local_size[0] >= 1024
    # few outputs, a long reduction: one group per output folding in local memory
    assert narrow.global_size[0] == 4 and narrow.local_size[0] > 1
    assert "__local" in narrow.source and "barrier(CLK_LOCAL_MEM_FENCE)" in narrow.source
