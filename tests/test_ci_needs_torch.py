"""Under CI=true a missing torch (or models extra, or MPI) fails the run at session start (tests/conftest.py)
instead of letting every comparison that needs it skip."""
from __future__ import annotations

import importlib.util

import pytest

from tests import conftest


def _hide(monkeypatch, module: str = "torch") -> None:
    """`module` looks uninstalled to the session start's check."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))


def test_ci_without_torch_fails_the_run(monkeypatch) -> None:
    _hide(monkeypatch)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.UsageError, match="torch is not installed"):
        conftest.pytest_sessionstart(None)


def test_without_ci_a_missing_torch_only_skips(monkeypatch) -> None:
    _hide(monkeypatch)
    monkeypatch.delenv("CI", raising=False)
    assert conftest.pytest_sessionstart(None) is None


def test_ci_without_the_models_extra_fails_the_run(monkeypatch) -> None:
    _hide(monkeypatch, "onnxruntime")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.UsageError, match="onnxruntime not installed"):
        conftest.pytest_sessionstart(None)


def test_ci_without_mpi_fails_the_run(monkeypatch) -> None:
    _hide(monkeypatch, "mpi4py")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.UsageError, match="MPI is unavailable \\(mpi4py is not installed\\)"):
        conftest.pytest_sessionstart(None)
    monkeypatch.delenv("CI")
    assert conftest.pytest_sessionstart(None) is None  # without CI the mpiexec tests only skip
