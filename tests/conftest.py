"""Shared fixtures. Nothing here is autouse: tests that touch the registry or configuration ask for them."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tolk_core.counters import GlobalCounters

FIXTURE_SITE = Path(__file__).parent / "fixtures" / "site"
TOLK_ENV = ("TOLK_DEVICE", "TOLK_PLUGINS", "TOLK_DISABLE_PLUGINS", "TOLK_CC", "TOLK_CFLAGS", "TOLK_NO_CONFIG",
            "TOLK_PROBE_TIMEOUT", "TOLK_CUDA_ARCH", "DEBUG", "JIT", "JIT_BATCH_SIZE")


@pytest.fixture
def tolk_env(tmp_path, monkeypatch):
    """A clean configuration world: no TOLK_* variables, an empty user config dir, cwd in an empty project dir,
    and a fresh registry (rebuilt from the installed entry points on first use). Yields the project dir."""
    from tolk_core import config, plugins
    for var in TOLK_ENV:
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "xdg").mkdir()
    (tmp_path / "project").mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path / "project")
    plugins.reset()
    config.reset()
    yield tmp_path / "project"
    plugins.reset()
    config.reset()


@pytest.fixture
def fixture_plugins(tolk_env, monkeypatch):
    """The third-party plugin distributions under tests/fixtures/site on sys.path (with their dist-info), so
    their entry points are seen; also exported in PYTHONPATH for subprocesses."""
    monkeypatch.syspath_prepend(str(FIXTURE_SITE))
    paths = [str(FIXTURE_SITE), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    yield tolk_env
    for mod in [m for m in sys.modules if m.startswith("tolk_fixture_")]:
        del sys.modules[mod]


def has_opencl() -> bool:
    from tolk_opencl.plugin import probe
    return probe().ok


# ---- every available compiled device, and a kernel counter (used by the numerical tests)
COMPILED_DEVICES = ("CPU", "OPENCL")


def _available(name: str) -> tuple[bool, str]:
    from tolk_core.plugins import Device
    try:
        Device[name]
    except Exception as e:  # noqa: BLE001 - the reason is the skip message
        return False, f"{name} unavailable here: {e}"
    return True, ""


@pytest.fixture(params=COMPILED_DEVICES)
def device(request) -> str:
    ok, why = _available(request.param)
    if not ok:
        pytest.skip(why)
    return request.param


@pytest.fixture
def kernels():
    """Counts kernels launched inside a block: `with kernels() as k: ...; k.count`."""
    class Counter:
        def __enter__(self):
            self.start = GlobalCounters.kernels_launched
            return self

        def __exit__(self, *exc):
            self.count = GlobalCounters.kernels_launched - self.start
    return Counter
