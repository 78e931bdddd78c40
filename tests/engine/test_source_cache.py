"""The rendered-source cache: a kernel generated once is read back (in this process or a new one) instead of
generated again, equal to what generation gives, and any setting, renderer or code change misses."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tolk_core import config
from tolk_core.engine import source_cache
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device


@pytest.fixture
def generations(monkeypatch):
    """Counts real generations behind the cache."""
    calls: list[object] = []
    real = source_cache.generate

    def counted(ast, renderer):
        calls.append(ast)
        return real(ast, renderer)
    monkeypatch.setattr(source_cache, "generate", counted)
    return calls


def _asts(device: str):
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    linear, _, _ = schedule(target_for(device), [((a * 2).relu().sum(1) + 1).uop])
    return [call.src[0] for call in linear.src]


def test_read_back_equals_generation(device, tmp_path, generations):
    renderer = Device[device].renderer
    with config.override(CACHE_DIR=str(tmp_path)):
        (ast,) = _asts(device)
        first = source_cache.generate_cached(ast, renderer)
        again = source_cache.generate_cached(ast, renderer)
        assert len(generations) == 1 and again == first
        assert list((tmp_path / "source").rglob("*.json"))
        with config.override(NOOPT=True):  # a setting the optimizer reads: another key
            noopt = source_cache.generate_cached(ast, renderer)
        assert len(generations) == 2 and noopt.source != first.source
        with pytest.MonkeyPatch.context() as mp:  # a limit set on the renderer's class: another key
            mp.setattr(type(renderer), "local_max", renderer.local_max + 1)
            source_cache.generate_cached(ast, renderer)
        assert len(generations) == 3
    with config.override(CACHE_DIR=str(tmp_path), DISABLE_COMPILER_CACHE=True):
        assert source_cache.generate_cached(ast, renderer) == first and len(generations) == 4


def test_symbolic_launch_sizes_are_not_stored(device, tmp_path, generations):
    from tolk_core.ir.uop import UOp
    n = UOp.variable("n", 1, 64).bind(5)
    a = Tensor(np.arange(64, dtype=np.float32), device=device)[:n]
    with config.override(CACHE_DIR=str(tmp_path)):
        linear, _, _ = schedule(target_for(device), [(a * 3).uop])
        renderer = Device[device].renderer
        for call in linear.src:
            source_cache.generate_cached(call.src[0], renderer)
            source_cache.generate_cached(call.src[0], renderer)
    sizes = [source_cache.generate(c.src[0], renderer).global_size for c in linear.src]
    symbolic = [g for g in sizes if not all(isinstance(x, int) for x in g)]
    stored = list((tmp_path / "source").rglob("*.json")) if (tmp_path / "source").exists() else []
    # CPU kernels loop over a symbolic size themselves (launch size 1); a GPU grid is the symbolic size
    assert bool(symbolic) == renderer.has_local and len(stored) == len(linear.src) - len(symbolic)


def test_a_new_process_generates_nothing(device, tmp_path):
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from tolk_core.engine import source_cache
        from tolk_core.frontend.tensor import Tensor
        calls = []
        real = source_cache.generate
        source_cache.generate = lambda ast, r: calls.append(1) or real(ast, r)
        x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
        dev = sys.argv[1]
        got = (Tensor(x, device=dev).exp() @ Tensor(x, device=dev)).sum(0).numpy()
        assert np.allclose(got, (np.exp(x) @ x).sum(0), rtol=1e-5, atol=1e-5), got
        print(len(calls))
    """)
    env = {**os.environ, "TOLK_CACHE_DIR": str(tmp_path)}
    # OpenCL's renderer holds sets (its extensions) whose order differs per process: the key must not
    runs = [subprocess.run([sys.executable, "-c", script, device], env=env, capture_output=True, text=True)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    cold, warm = (int(r.stdout.split()[-1]) for r in runs)
    assert cold >= 1 and warm == 0
