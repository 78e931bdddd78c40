"""The `tolk` CLI: devices (table, --json, --check), config, doctor; fixtures from third-party distributions."""
from __future__ import annotations

import json
import subprocess
import sys


def tolk(*args, env=None):
    import os
    proc = subprocess.run([sys.executable, "-m", "tolk_core", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def row(out, name):
    return next(line for line in out.splitlines() if line[3:].split(" ")[0] == name)


def test_devices_table_and_check(tolk_env):
    rc, out, err = tolk("devices", "--check")
    assert rc == 0, err
    assert "NAME" in out and "PROVIDER" in out and "GRAPH" in out and "REASON" in out
    cpu = row(out, "CPU")
    assert cpu.startswith("*") and "tolk-cpu 0.1.0" in cpu and "available" in cpu and "PASS" in cpu
    assert "default: CPU (from plugin priority (CPU=10))" in out
    cuda = row(out, "CUDA")
    assert "tolk-cuda" in cuda and ("available" in cuda or "unavailable" in cuda)


def test_devices_json(tolk_env):
    rc, out, _ = tolk("devices", "--json", env={"TOLK_DEVICE": "CPU"})
    data = json.loads(out)
    assert rc == 0 and data["default"] == {"device": "CPU", "origin": "environment TOLK_DEVICE", "notes": []}
    by = {b["name"]: b for b in data["backends"]}
    assert by["CPU"]["default"] and by["CPU"]["renderer"] == "C" and by["CPU"]["graph"] is True  # CPUGraph
    assert by["CUDA"]["renderer_ref"] == "tolk_cuda.renderer:CUDARenderer"


def test_devices_shows_fixture_plugins(fixture_plugins):
    rc, out, _ = tolk("devices", "--check")
    assert rc == 1  # FIXTURE passes its self-test but declares no renderer: --check fails it, naming the contract
    fixture = row(out, "FIXTURE")
    assert "FAIL: check_generated_kernel" in fixture and "contract tolk_renderers broken" in fixture
    assert "tolk-fixture-device 0.1.0" in fixture and "PASS" in row(out, "CPU")
    assert "yes (tolk-fixture-graph 0.2.0)" in row(out, "CPU")
    assert "incompatible" in row(out, "FUTURE")
    assert out.count("conflict") >= 2
    assert "broken" in row(out, "(fixture_broken)") and "libfoo.so.3" in row(out, "(fixture_broken)")
    rc, out, _ = tolk("devices", "--json")
    plugins = {p["dist"]: p for p in json.loads(out)["plugins"]}
    broken = plugins["tolk-fixture-broken"]
    assert broken["state"] == "broken" and "Traceback" in broken["traceback"]


def test_devices_reports_a_bad_device_demand(tolk_env):
    rc, out, _ = tolk("devices", env={"TOLK_DEVICE": "CDU"})
    assert rc == 0 and "default: none (unknown device 'CDU'; did you mean 'CPU'" in out


def test_config_shows_values_and_sources(tolk_env):
    (tolk_env / "tolk.toml").write_text("jit = 0\n")
    rc, out, _ = tolk("config", env={"DEBUG": "2"})
    assert rc == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert lines["DEBUG"].split()[1:] == ["2", "environment", "DEBUG"]
    assert "project file" in lines["JIT"] and "tolk.toml [jit]" in lines["JIT"]
    assert lines["CC"].split()[1:] == ["'cc'", "default"]


def test_config_error_is_one_clear_line(tolk_env):
    (tolk_env / "tolk.toml").write_text("colour = 1\n")
    rc, _, err = tolk("config")
    assert rc == 2 and err.startswith("tolk: error: project file") and "colour" in err and "Traceback" not in err


def test_doctor(tolk_env):
    rc, out, _ = tolk("doctor")
    assert rc == 0
    for section in ("## tolk doctor", "## devices", "## config", "## environment", "pluggy", "CUDA_VISIBLE_DEVICES"):
        assert section in out
