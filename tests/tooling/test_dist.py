"""Installable wheels and the plugin scaffold, in a fresh virtual environment (no editable installs, nothing
from this checkout on the path): tolk-core's wheel with [conformance] and tolk-cpu's wheel install with their
dependencies from the package index, `tolk devices --check` passes, and the conformance suite runs; then a
plugin written by `tolk new-plugin NAME --graph` passes its own test (the suite's registration, memory, render,
runtime, jit and graph tiers, none of them skipped) as generated (docs/plugins.md, sections 8 and 10)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(cmd, cwd, env, timeout=600):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(bin directory, environment, work dir) of a fresh venv holding the two wheels `scripts/dist.py` built."""
    root = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("TOLK_")}
    env["TOLK_CACHE_DIR"] = os.environ.get("TOLK_CACHE_DIR") or str(root / "cache")
    run([sys.executable, REPO / "scripts" / "dist.py", root / "dist", "--only", "tolk-core,tolk-cpu", "--wheel-only"],
        REPO, {**os.environ})
    wheels = {p.name.split("-")[0]: p for p in (root / "dist").glob("*.whl")}
    assert set(wheels) == {"tolk_core", "tolk_cpu"}, wheels
    venv.create(root / "venv", with_pip=True)
    bin_ = root / "venv" / "bin"
    run([bin_ / "python", "-m", "pip", "install", "-q", f"{wheels['tolk_core']}[conformance]", wheels["tolk_cpu"]],
        root, env)
    return bin_, env, root


def test_wheels_install_and_pass_check_and_suite(fresh):
    bin_, env, root = fresh
    where = run([bin_ / "python", "-c", "import tolk_core, tolk_cpu; print(tolk_core.__file__, tolk_cpu.__file__)"],
                root, env).stdout
    assert str(REPO) not in where and "site-packages" in where  # the wheels, not this checkout
    out = run([bin_ / "tolk", "devices", "--check"], root, env).stdout
    cpu = next(line for line in out.splitlines() if " CPU " in line)
    assert "available" in cpu and "PASS" in cpu and "tolk-cpu 0.1.0" in cpu
    proc = run([bin_ / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "tolk_core.testing",
                "--tolk-device", "CPU", "-m", "registration or memory", "--tolk-report", root / "cpu.json"], root, env)
    tiers = json.loads((root / "cpu.json").read_text())["CPU"]["tiers"]
    assert "tolk conformance CPU: " in proc.stdout and " 0 failed" in proc.stdout
    assert tiers["registration"].get("passed", 0) >= 5 and tiers["memory"].get("passed", 0) >= 5


def test_scaffold_with_graph_passes_every_tier_as_generated(fresh):
    bin_, env, root = fresh
    run([bin_ / "tolk", "new-plugin", "scaf", "--graph", "--dir", root], root, env)
    dist = root / "tolk-scaf"
    assert (dist / "tolk_scaf" / "graph.py").exists() and (dist / ".github" / "workflows" / "conformance.yml").exists()
    run([bin_ / "python", "-m", "pip", "install", "-q", "--no-deps", dist], root, env)
    out = run([bin_ / "tolk", "devices", "--check"], root, env).stdout
    row = next(line for line in out.splitlines() if " SCAF " in line)
    assert "PASS" in row and "yes (tolk-scaf 0.1.0)" in row
    proc = run([bin_ / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", dist / "tests"], root, env)
    assert "1 passed" in proc.stdout  # its own test: every tier ran tests and none failed (see the template)


def test_scaffold_without_graph_declares_none(tmp_path):
    from tolk_core.scaffold import new_plugin
    files = {p.relative_to(tmp_path / "tolk-plain").as_posix() for p in new_plugin("plain", tmp_path)}
    assert "tolk_plain/graph.py" not in files and "tolk_plain/runtime.py" in files
    plugin = (tmp_path / "tolk-plain" / "tolk_plain" / "plugin.py").read_text()
    assert "tolk_graphs" not in plugin and "GraphSpec" not in plugin
    assert "'graph'" not in (tmp_path / "tolk-plain" / "tests" / "test_conformance.py").read_text()
