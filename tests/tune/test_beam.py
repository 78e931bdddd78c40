"""BEAM on the CPU device: a kernel's first launch searches its plan on its real buffers and stores the result;
the values stay numpy's (an in-place update applied once); a second process plans from the stored result with
no search; a change of the compiler identity searches again."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from tests.conformance.helpers import REPO
from tolk_core import Tensor, config
from tolk_core.counters import GlobalCounters
from tolk_core.tune import cache

SCRIPT = textwrap.dedent("""
    import json, numpy as np
    from tolk_core import Tensor
    from tolk_core.counters import GlobalCounters
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((96, 80)).astype(np.float32), rng.standard_normal((80, 112)).astype(np.float32)
    got = (Tensor(a) @ Tensor(b)).numpy()
    print(json.dumps({"err": float(np.abs(got - a.astype(np.float64) @ b).max()),
                      "searches": GlobalCounters.tune_searches, "hits": GlobalCounters.tune_cache_hits}))
""")


def _run(cache_dir, **env):
    path = os.pathsep.join([str(REPO), *(str(REPO / "plugins" / p) for p in ("tolk_cpu", "tolk_opencl", "tolk_cuda"))])
    full = {**os.environ, "PYTHONPATH": path, "TOLK_CACHE_DIR": str(cache_dir), "TOLK_DEVICE": "CPU",
            "TOLK_BEAM": "2", "TOLK_TUNE_KERNEL_SECONDS": "20", **env}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_reuses_the_tuning_and_a_new_compiler_searches_again(tmp_path):
    first = _run(tmp_path)
    assert first["searches"] >= 1 and first["err"] < 1e-3
    with config.override(CACHE_DIR=str(tmp_path)):
        listed = cache.entries()
    assert listed and all(e.device == "CPU" and e.gain >= 1.0 for _, e in listed)
    second = _run(tmp_path)
    assert second["searches"] == 0 and second["hits"] >= 1 and second["err"] < 1e-3
    other = _run(tmp_path, TOLK_CFLAGS="-O2 -march=native -fno-math-errno -DTOLK_TUNE_TEST=1")
    assert other["searches"] >= 1 and other["err"] < 1e-3


def test_an_in_place_update_is_applied_once_under_the_search(tmp_path):
    rng = np.random.default_rng(1)
    p0, g = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    with config.override(CACHE_DIR=str(tmp_path), BEAM=2, TUNE_KERNEL_SECONDS=20.0):
        p, gt = Tensor(p0).realize(), Tensor(g).realize()
        before = GlobalCounters.tune_searches
        p.assign(p - 0.5 * gt)
        searched = GlobalCounters.tune_searches - before
        got = p.numpy()
    assert searched >= 1
    np.testing.assert_allclose(got, p0 - 0.5 * g, rtol=1e-6, atol=1e-6)


def test_tolk_tune_runs_a_script_tuned_and_show_lists_it(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    path = os.pathsep.join([str(REPO), *(str(REPO / "plugins" / p) for p in ("tolk_cpu", "tolk_opencl", "tolk_cuda"))])
    env = {**os.environ, "PYTHONPATH": path, "TOLK_CACHE_DIR": str(tmp_path / "cache"), "TOLK_DEVICE": "CPU",
           "TOLK_TUNE_KERNEL_SECONDS": "20"}
    env.pop("TOLK_BEAM", None)
    cli = [sys.executable, "-m", "tolk_core"]
    empty = subprocess.run([*cli, "tune", "--show"], env=env, capture_output=True, text=True, timeout=120)
    assert empty.returncode == 0 and "nothing tuned yet" in empty.stdout
    ran = subprocess.run([*cli, "tune", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["searches"] >= 1 and result["err"] < 1e-3
    shown = subprocess.run([*cli, "tune", "--show"], env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "r_" in shown.stdout and "CPU" in shown.stdout
