"""The GPU check's bookkeeping (scripts/gpu_report.py) without a GPU: version parsing, the compiler-vs-driver
warning, the result files it reads, and the verdict's rules (docs/gpu.md)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


report = _load("gpu_report")

SMI = """Mon Nov  3 10:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159.03             Driver Version: 580.159.03     CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_driver_and_compiler_versions_are_read_off_their_tools() -> None:
    assert report.parse_smi(SMI) == {"driver": "580.159.03", "driver_cuda": "13.0"}
    assert report.parse_smi("NVIDIA-SMI has failed") == {"driver": "", "driver_cuda": ""}
    nvcc = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    assert report.parse_nvcc(nvcc) == "13.0"
    assert report.parse_nvcc("bash: nvcc: not found") == ""


@pytest.mark.parametrize(("compiler", "driver", "newer"), [
    ("13.5", "13.0", True), ("13.0", "13.0", False), ("12.8", "13.0", False), ("14.0", "13.9", True),
    ("13.10", "13.9", True),  # numeric, not textual, order
    ("", "13.0", False), ("13.5", "", False)])  # nothing known: no warning
def test_compiler_newer_than_driver(compiler, driver, newer) -> None:
    assert report.compiler_newer_than_driver(compiler, driver) is newer


# ---------------------------------------------------------------------------------------------- result files
def test_junit_counts_and_names_skipped_tests(tmp_path) -> None:
    xml = tmp_path / "t.xml"
    xml.write_text("""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
        failures="1" skipped="1" tests="3"><testcase classname="tests.plugins.test_cuda" name="test_a"/>
        <testcase classname="tests.plugins.test_cuda" name="test_b[nvcc]"><skipped type="pytest.skip"
        message="nvcc not installed"/></testcase><testcase classname="tests.render.test_cuda" name="test_c">
        <failure message="boom"/></testcase></testsuite></testsuites>""")
    s: dict = {}
    report.junit(s, "cuda_tests", xml)
    r = s["results"]["cuda_tests"]
    assert (r["tests"], r["failures"], r["errors"], r["skipped"]) == (3, 1, 0, 1)
    assert r["skipped_tests"] == ["tests.plugins.test_cuda::test_b[nvcc]: nvcc not installed"]


def test_conformance_report_counts_outcomes(tmp_path) -> None:
    path = tmp_path / "c.json"
    tests = [{"test": "test_graph.py::test_replay[CUDA]", "outcome": "passed", "message": ""},
             {"test": "test_runtime.py::test_dtype[CUDA-float64]", "outcome": "skipped", "message": "no float64"},
             {"test": "test_jit.py::test_x[CUDA]", "outcome": "passed", "message": ""}]
    path.write_text(json.dumps({"CUDA": {"summary": "tolk conformance CUDA: 2 passed, 1 skipped", "tests": tests}}))
    s: dict = {}
    report.conformance(s, path)
    c = s["results"]["conformance"]
    assert c["outcomes"] == {"passed": 2, "skipped": 1}
    assert c["skipped_tests"] == ["test_runtime.py::test_dtype[CUDA-float64]: no float64"]


def test_bench_parts_merge_into_one_file(tmp_path) -> None:
    a, b, merged = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "bench.json"
    a.write_text(json.dumps({"device": "CUDA", "results": [{"row": "matmul N=256 f32", "ok": True},
                                                           {"row": "matmul N=512 f32", "ok": False}]}))
    b.write_text(json.dumps({"device": "CUDA", "results": [{"row": "jitted MLP replay", "ok": True}]}))
    s: dict = {}
    report.bench(s, a, merged)
    report.bench(s, b, merged)
    rows = [r["row"] for r in json.loads(merged.read_text())["results"]]
    assert rows == ["matmul N=256 f32", "matmul N=512 f32", "jitted MLP replay"]
    assert s["results"]["bench"] == {"rows": 3, "not_ok": ["matmul N=512 f32"]}


def test_model_rows_are_bench_rows_that_run_a_model() -> None:
    from bench.rows import rows
    names = report.model_rows()
    assert names and set(names) <= {r.name for r in rows("CUDA")}
    assert any("MLP forward" in n for n in names) and not any(n.startswith("matmul") for n in names)


# ---------------------------------------------------------------------------------------------- the verdict
def _passing_run() -> dict:
    s: dict = {"dry_run": False}
    for phase, steps in {"toolchain": ["versions"], "install": ["deps", "pycuda", "tolk", "imports"],
                         "cuda": ["device", "tests", "conformance"], "bench": ["matmul", "elementwise", "jit"]}.items():
        for name in steps:
            report.record_step(s, phase, name, 0, 1.5)
    s["device"] = {"available": True, "state": "available", "reason": "1 CUDA device(s)"}
    s["results"] = {"cuda_tests": {"tests": 12, "failures": 0, "errors": 0, "skipped": 0, "skipped_tests": []},
                    "conformance": {"line": "tolk conformance CUDA: 60 passed", "outcomes": {"passed": 60},
                                    "skipped_tests": []},
                    "bench": {"rows": 6, "not_ok": []}}
    return s


def test_a_complete_clean_run_passes() -> None:
    assert report.verdict(_passing_run()) == (True, [])


def test_a_skipped_cuda_test_fails_the_check_and_is_named() -> None:
    s = _passing_run()
    s["results"]["cuda_tests"].update(skipped=1, skipped_tests=["tests.plugins.test_cuda::test_x[nvcc]: nvcc not "
                                                                "installed"])
    ok, problems = report.verdict(s)
    assert not ok and problems == ["1 CUDA test(s) skipped: tests.plugins.test_cuda::test_x[nvcc]: nvcc not installed"]


def test_cuda_unavailable_fails_the_check() -> None:
    s = _passing_run()
    s["device"] = {"available": False, "state": "unavailable", "reason": "pycuda not installed"}
    ok, problems = report.verdict(s)
    assert not ok and problems == ["CUDA is not available (unavailable: pycuda not installed)"]


def test_conformance_skips_and_failures_fail_the_check() -> None:
    s = _passing_run()
    s["results"]["conformance"] = {"line": "tolk conformance CUDA: 59 passed, 1 skipped", "skipped_tests": ["t: why"],
                                   "outcomes": {"passed": 59, "skipped": 1}}
    assert report.verdict(s)[1] == ["conformance on CUDA: tolk conformance CUDA: 59 passed, 1 skipped: t: why"]
    s["results"]["conformance"]["outcomes"] = {"passed": 59, "xfailed": 1}  # expected failures are declared
    assert report.verdict(s)[0]


def test_a_step_cut_off_by_its_cap_and_a_missing_phase_fail_the_check() -> None:
    s = _passing_run()
    report.record_step(s, "bench", "jit", 124, 30.0)
    del s["phases"]["cuda"]
    ok, problems = report.verdict(s)
    assert not ok and problems == ["phase cuda did not run", "bench/jit ran into the phase's time cap"]
    assert s["phases"]["bench"]["status"] == "timeout"


def test_a_dry_run_needs_only_toolchain_and_install() -> None:
    s = {"dry_run": True}
    report.record_step(s, "toolchain", "versions", 0, 0.2)
    assert report.verdict(s) == (False, ["phase install did not run"])
    report.record_step(s, "install", "pycuda", 1, 3.0, "no pycuda sdist or wheel in .gpu-bundle")
    assert report.verdict(s) == (False, ["install/pycuda failed (rc 1): no pycuda sdist or wheel in .gpu-bundle"])
    s["phases"]["install"]["steps"]["pycuda"].update(status="ok", rc=0)
    assert report.verdict(s) == (True, [])


# ---------------------------------------------------------------------------------------------- steps run here
def test_toolchain_without_nvidia_smi_fails_and_says_so(monkeypatch, capsys) -> None:
    monkeypatch.setattr(report.shutil, "which", lambda name: None)
    s: dict = {}
    assert report.toolchain(s) == 1
    assert s["toolchain"]["nvidia_smi"] == "" and not s["toolchain"]["compiler_newer_than_driver"]
    assert "no NVIDIA driver here" in capsys.readouterr().out


def test_device_step_records_why_cuda_is_unavailable(tolk_env) -> None:
    from tolk_core.plugins import get_registry
    rec = get_registry().get("CUDA")
    if rec.state == "available":
        pytest.skip("a CUDA device is present: the device step's unavailable branch cannot be reached")
    s: dict = {}
    assert report.device(s) == 1
    assert s["device"] == {"state": rec.state, "reason": rec.reason, "available": False}
    assert report.verdict({**_passing_run(), "device": s["device"]})[1] == [
        f"CUDA is not available ({rec.state}: {rec.reason})"]
