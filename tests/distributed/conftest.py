"""Launching examples/distributed/train_digits.py (and small scripts) as jobs: `tolk launch` in a subprocess,
with MPI where tolk-mpi's probe finds it (else those tests skip with its reason; CI=true fails instead,
tests/conftest.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "distributed" / "train_digits.py"
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpi_or_skip() -> None:
    from tolk_mpi import plugin
    if not (a := plugin.probe()).ok:
        pytest.skip(f"MPI is unavailable here: {a.reason} (make mpi installs it)")


def launch(args: list[str], env: dict[str, str] | None = None, timeout: float = 240.0,
           ) -> subprocess.CompletedProcess[str]:
    """`tolk launch ARGS` in a subprocess; its output captured."""
    return subprocess.run([sys.executable, "-m", "tolk_core.cli", "launch", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, cwd=ROOT)


def losses(path: Path) -> np.ndarray:
    return np.array(json.loads(path.read_text())["losses"])


@pytest.fixture(scope="session")
def one_process(tmp_path_factory) -> np.ndarray:
    """The loss curve of the digits MLP trained in one process with no device tuple (50 steps): the reference."""
    out = tmp_path_factory.mktemp("single") / "losses.json"
    subprocess.run([sys.executable, str(TRAIN), "--single", "--out", str(out)], check=True, timeout=240, cwd=ROOT,
                   capture_output=True)
    curve = losses(out)
    assert curve[-1] < curve[0] * 0.8  # it trains
    return curve
