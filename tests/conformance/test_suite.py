"""The conformance suite itself: PYTHON and the worked example pass it; each broken variant of the example
fails the tier that should catch it, naming the contract; the report is JSON; the xfails file works."""
from __future__ import annotations

import json
import re

import pytest

from tests.conformance.helpers import EXAMPLE, FIXTURES, pip_install, run_suite, summary


@pytest.fixture(scope="module")
def example_site(tmp_path_factory):
    """tolk-example-device installed (pip, no deps) into a directory put on PYTHONPATH."""
    return pip_install(EXAMPLE, tmp_path_factory.mktemp("example-site"))


def test_reference_device_passes_every_tier(tmp_path):
    proc = run_suite("PYTHON", "--tolk-stress", cwd=tmp_path)
    line = summary(proc, "PYTHON")
    assert proc.returncode == 0 and " 0 failed" in line, proc.stdout[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())["PYTHON"]
    assert set(report["tiers"]) >= {"registration", "memory", "render", "runtime", "jit", "stress"}
    assert all(t["outcome"] in ("passed", "skipped") for t in report["tests"])
    assert any("does not declare capability 'graph'" in t["message"] for t in report["tests"])


def test_example_plugin_passes_every_tier(tmp_path, example_site):
    proc = run_suite("EXAMPLE", paths=(example_site,), cwd=tmp_path)
    line = summary(proc, "EXAMPLE")
    assert proc.returncode == 0 and " 0 failed" in line, proc.stdout[-3000:]
    tiers = json.loads((tmp_path / "report.json").read_text())["EXAMPLE"]["tiers"]
    assert tiers["graph"] == {"passed": 6}  # the example supplies a Graph, so the graph tier really runs


BROKEN = [  # (variant, tier that must catch it, the failing test, the contract named)
    ("copyout", "memory", "test_copyin_copyout_roundtrip", "Allocator.copyout"),
    ("graph", "graph", "test_replay_equals_sequential_launches", "Graph.__call__"),
    ("probe", "registration", "test_probe_never_raises_and_gives_a_reason", "BackendSpec.probe"),
    ("import", "registration", "test_entry_point_is_import_light", "entry point is import-light"),
    ("numpy", "registration", "test_entry_point_is_import_light", "entry point is import-light"),
]


@pytest.mark.parametrize("variant,tier,test,contract", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_variant_fails_its_tier_naming_the_contract(tmp_path, variant, tier, test, contract):
    device = f"BROKEN_{variant.upper()}"
    proc = run_suite(device, "-m", tier, paths=(FIXTURES / f"broken_{variant}", EXAMPLE), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    line = summary(proc, device)
    assert "contracts broken: " in line and contract in line.partition("contracts broken: ")[2], line
    assert f"contract {contract} broken" in proc.stdout
    failed = [t for t in json.loads((tmp_path / "report.json").read_text())[device]["tests"]
              if t["outcome"] == "failed"]
    assert failed and all(t["tier"] == tier for t in failed)
    assert any(t["test"].startswith(f"test_{tier}.py::{test}[") and t["contract"] == contract for t in failed)


def test_xfails_file_marks_strict_expected_failures(tmp_path):
    (tmp_path / "xfails.toml").write_text(
        '[xfail]\n"test_probe.py::nothing" = "matches nothing"\n'
        '"test_copyin_copyout_roundtrip[BROKEN_COPYOUT-3]" = "known: tail bytes"\n'
        '"test_zero_size_buffer[*]" = "not broken: a strict xfail that passes fails the run"\n')
    proc = run_suite("BROKEN_COPYOUT", "-m", "memory", "--tolk-xfails", str(tmp_path / "xfails.toml"),
                     paths=(FIXTURES / "broken_copyout", EXAMPLE), cwd=tmp_path)
    tests = {t["test"].split("::")[1]: t for t in
             json.loads((tmp_path / "report.json").read_text())["BROKEN_COPYOUT"]["tests"]}
    assert tests["test_copyin_copyout_roundtrip[BROKEN_COPYOUT-3]"]["outcome"] == "xfailed"
    assert tests["test_copyin_copyout_roundtrip[BROKEN_COPYOUT-1]"]["outcome"] == "failed"
    assert tests["test_zero_size_buffer[BROKEN_COPYOUT]"]["outcome"] == "failed"  # strict: XPASS(strict) fails
    assert "1 xfailed" in summary(proc, "BROKEN_COPYOUT")


def test_suite_is_inert_without_a_device(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tolk_core.testing.plugin", "--pyargs",
                           "tolk_core.testing", "-q", "-m", "registration", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "skipped" in proc.stdout and "tolk conformance" not in proc.stdout
    assert not (tmp_path / "tolk-conformance.json").exists()


def test_hanging_probe_fails_its_check_within_the_liveness_limit(tmp_path):
    """A probe that spins forever: the suite's probe check names it after PROBE_CHECK_S instead of hanging, and
    the suite ends within 30 s (the registry itself gives up after TOLK_PROBE_TIMEOUT, and the tests that
    need the device skip with that reason)."""
    import time

    from tolk_core.testing.checks import PROBE_CHECK_S
    t0 = time.perf_counter()
    # every tier but render, which compiles the example's dialect without the device (cold caches: 15 s here)
    proc = run_suite("HANG_PROBE", "-m", "not render", paths=(FIXTURES / "hang_probe", EXAMPLE), cwd=tmp_path,
                     env={"TOLK_PROBE_TIMEOUT": "2"})
    took = time.perf_counter() - t0
    assert took < 30, f"the suite took {took:.1f} s"
    line = summary(proc, "HANG_PROBE")
    assert proc.returncode == 1 and line.endswith("contracts broken: BackendSpec.probe"), line
    assert f"the probe did not return within {PROBE_CHECK_S:g} s" in proc.stdout
    assert re.search(r"'HANG_PROBE is unavailable: probe timed out after 2s \(cancelled\)': \d+", line)  # whole
