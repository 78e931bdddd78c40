"""The GPU check's bookkeeping: one summary file, rewritten after every step, and the final verdict.

scripts/gpu_check.sh calls this with the image's python3 (standard library only, except `toolchain` and
`device`, which import Tolk). Subcommands, each reading and rewriting ``--summary PATH``:

  init --dry-run 0|1                  start a fresh summary
  step PHASE NAME RC SECONDS [NOTE]   record one step (rc 124/137: it ran into its phase's time cap)
  toolchain                           driver (nvidia-smi), nvcc, NVRTC and the compiler Tolk picks; warns when
                                      that compiler is newer than the CUDA the driver supports (no CUDA call)
  device                              the first CUDA call: the CUDA backend's state, then Tolk's smoke kernel
                                      compiled, loaded by the driver and run
  junit KEY XML                       counts (and skipped tests, with reasons) of a pytest JUnit file
  conformance JSON                    counts of a `--tolk-report` file of the conformance suite
  bench PART_JSON BENCH_JSON          append a `python -m bench --json` (or JIT row) file's rows to BENCH_JSON
  model-rows                          print the bench rows that run a model, one a line
  verdict                             print the verdict and exit 0 (pass) or 1

A step's output goes to the log; this file keeps only what the verdict and a reader need (docs/gpu.md).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

TIMEOUT_RCS = (124, 137)
# bench rows that run a whole model rather than one operation (matched as substrings of the row names)
MODEL_ROW_MARKERS = ("model", "MLP forward", "attention head")


# ---------------------------------------------------------------------------------------------- the summary file
def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def save(path: Path, summary: dict[str, Any]) -> None:
    """Atomic rewrite: a run cut off at any moment leaves the last complete summary."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, path)


def record_step(summary: dict[str, Any], phase: str, name: str, rc: int, seconds: float, note: str = "") -> None:
    """Add step `name` to `phase`; the phase's status is the worst of its steps (timeout > failed > ok)."""
    status = "ok" if rc == 0 else "timeout" if rc in TIMEOUT_RCS else "failed"
    ph = summary.setdefault("phases", {}).setdefault(phase, {"status": "ok", "seconds": 0.0, "steps": {}})
    ph["steps"][name] = {"status": status, "rc": rc, "seconds": round(seconds, 2), **({"note": note} if note else {})}
    ph["seconds"] = round(ph["seconds"] + seconds, 2)
    rank = {"ok": 0, "failed": 1, "timeout": 2}
    ph["status"] = max((s["status"] for s in ph["steps"].values()), key=rank.__getitem__)


# ---------------------------------------------------------------------------------------------- toolchain
def parse_smi(header: str) -> dict[str, str]:
    """Driver version and the newest CUDA it supports, from plain `nvidia-smi` output."""
    drv = re.search(r"Driver Version:\s*([0-9.]+)", header)
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", header)
    return {"driver": drv.group(1) if drv else "", "driver_cuda": cuda.group(1) if cuda else ""}


def parse_nvcc(text: str) -> str:
    """`nvcc --version` -> "13.0" (its "release 13.0, V13.0.88" line), or ""."""
    m = re.search(r"release\s+([0-9]+\.[0-9]+)", text)
    return m.group(1) if m else ""


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"[0-9]+", v)[:2])


def compiler_newer_than_driver(compiler_version: str, driver_cuda: str) -> bool:
    """Whether a compiler of CUDA `compiler_version` is newer (major.minor) than what the driver supports."""
    return bool(compiler_version and driver_cuda) and version_tuple(compiler_version) > version_tuple(driver_cuda)


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"<{type(e).__name__}: {e}>"


def tolk_compiler() -> dict[str, str]:
    """NVRTC's version and the tool Tolk's CUDA compiler selects (NVRTC first, else nvcc); loads libnvrtc only."""
    try:
        from tolk_cuda.compiler import NVRTC, CUDACompiler, find_nvrtc
    except Exception as e:  # noqa: BLE001 - reported, the rest of the check still runs
        return {"error": f"tolk_cuda not importable: {type(e).__name__}: {e}"}
    path = find_nvrtc()
    out = {"nvrtc_path": path or "", "nvrtc": NVRTC(path).version if path else ""}
    out["tolk_tool"] = CUDACompiler().tool
    return out


def toolchain(summary: dict[str, Any]) -> int:
    smi = shutil.which("nvidia-smi")
    info: dict[str, Any] = {"python": sys.version.split()[0], "nvidia_smi": smi or ""}
    if smi:
        info.update(parse_smi(_run([smi])))
        info["gpu"] = _run([smi, "--query-gpu=name,driver_version,compute_cap,memory.total",
                            "--format=csv,noheader"]).strip()
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else "")
    info["nvcc"] = parse_nvcc(_run([nvcc, "--version"])) if nvcc else ""
    info.update(tolk_compiler())
    used = info.get("nvrtc") if str(info.get("tolk_tool", "")).startswith("nvrtc") else info["nvcc"]
    info["tolk_compiler_cuda"] = used or ""
    info["compiler_newer_than_driver"] = compiler_newer_than_driver(used or "", info.get("driver_cuda", ""))
    summary["toolchain"] = info
    print(f"toolchain: driver {info.get('driver') or '?'} (CUDA {info.get('driver_cuda') or '?'}), "
          f"nvcc {info['nvcc'] or 'absent'}, NVRTC {info.get('nvrtc') or 'absent'}, Tolk compiles with "
          f"{info.get('tolk_tool', '?')}; python {info['python']}")
    if info["compiler_newer_than_driver"]:
        print(f"toolchain: WARNING: Tolk's compiler is CUDA {used}, newer than the CUDA {info['driver_cuda']} this "
              "driver supports: its cubins may not load here (the device step loads one and says)")
    if not smi or not info.get("driver_cuda"):
        print("toolchain: nvidia-smi missing or unreadable: no NVIDIA driver here")
        return 1
    return 0


# ---------------------------------------------------------------------------------------------- device
def device(summary: dict[str, Any]) -> int:
    """The CUDA backend's state; when available, its smoke kernel compiled, loaded and run (the driver loads
    the compiler's cubin here: a compiler newer than the driver fails this step, and the note says so)."""
    from tolk_core.plugins import Device, get_registry
    rec = get_registry().get("CUDA")
    info: dict[str, Any] = {"state": rec.state if rec else "missing", "reason": rec.reason if rec else "",
                            "available": bool(rec and rec.state == "available")}
    summary["device"] = info
    if not info["available"]:
        print(f"device: CUDA is {info['state']}: {info['reason']}")
        return 1
    try:
        dev = Device["CUDA"]
        info["name"], info["tool"] = dev.cu_device.name(), dev.compiler.tool
        info["compute_capability"] = ".".join(map(str, dev.cu_device.compute_capability()))
        import pycuda.driver as cuda  # type: ignore[import-not-found]
        info["pycuda_built_for_cuda"] = ".".join(map(str, cuda.get_version()))
        info["driver_api_version"] = cuda.get_driver_version()  # 13000 for CUDA 13.0
        info["smoke"] = dev.self_test()
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        info["error"] = f"{type(e).__name__}: {e}"[:500]
        if summary.get("toolchain", {}).get("compiler_newer_than_driver"):
            info["error"] += (" -- Tolk's compiler is newer than the CUDA this driver supports "
                              "(see toolchain): its cubin is the likely reason")
        print(f"device: CUDA available but the smoke kernel failed: {info['error']}")
        return 1
    print(f"device: {info['name']} (sm {info['compute_capability']}), compiled with {info['tool']}: {info['smoke']}")
    return 0


# ---------------------------------------------------------------------------------------------- results
def junit(summary: dict[str, Any], key: str, path: Path) -> int:
    """Counts of a pytest JUnit XML file; every skipped test with its reason."""
    root = ET.parse(path).getroot()
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    skipped = []
    for suite in (root.iter("testsuite")):
        for k in counts:
            counts[k] += int(suite.get(k, 0))
    for case in root.iter("testcase"):
        if (sk := case.find("skipped")) is not None:
            skipped.append(f"{case.get('classname')}::{case.get('name')}: {sk.get('message', '')}"[:300])
    summary.setdefault("results", {})[key] = {**counts, "skipped_tests": skipped}
    print(f"{key}: {counts['tests']} tests, {counts['failures']} failed, {counts['errors']} errors, "
          f"{counts['skipped']} skipped")
    return 0


def conformance(summary: dict[str, Any], path: Path) -> int:
    report = json.loads(path.read_text()).get("CUDA", {"tests": [], "summary": "no CUDA entry"})
    outcomes: dict[str, int] = {}
    for t in report["tests"]:
        outcomes[t["outcome"]] = outcomes.get(t["outcome"], 0) + 1
    skipped = [f"{t['test']}: {t['message']}"[:300] for t in report["tests"] if t["outcome"] == "skipped"]
    summary.setdefault("results", {})["conformance"] = {"line": report["summary"], "outcomes": outcomes,
                                                       "skipped_tests": skipped}
    print(report["summary"])
    return 0


def bench(summary: dict[str, Any], part: Path, merged: Path) -> int:
    """Append the rows of one bench run to `merged` (bench.json: {"device", "results": [...]})."""
    data = json.loads(part.read_text())
    rows = data.get("results", [data] if "row" in data else [])
    out = json.loads(merged.read_text()) if merged.exists() else {"device": data.get("device", "CUDA"), "results": []}
    out["results"] += rows
    tmp = merged.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    os.replace(tmp, merged)
    b = summary.setdefault("results", {}).setdefault("bench", {"rows": 0, "not_ok": []})
    b["rows"] += len(rows)
    b["not_ok"] += [r["row"] for r in rows if r.get("ok") is False]
    return 0


def model_rows() -> list[str]:
    """Names of the bench rows that run a model (bench.rows, imported from the repository root)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.rows import rows
    return [r.name for r in rows("CUDA") if r.quick and any(m in r.name for m in MODEL_ROW_MARKERS)]


# ---------------------------------------------------------------------------------------------- the verdict
def _result_problems(results: dict[str, Any]) -> list[str]:
    """What the CUDA tests, the conformance suite and the bench rows say against a pass."""
    problems = []
    t = results.get("cuda_tests")
    if t is None:
        problems.append("no CUDA test results")
    else:
        if t["tests"] == 0:
            problems.append("no CUDA test ran")
        if t["failures"] or t["errors"]:
            problems.append(f"CUDA tests: {t['failures']} failed, {t['errors']} errors")
        if t["skipped"]:
            problems.append(f"{t['skipped']} CUDA test(s) skipped: " + "; ".join(t["skipped_tests"]))
    c = results.get("conformance")
    if c is None:
        problems.append("no conformance result")
    else:
        bad = {k: v for k, v in c["outcomes"].items() if k not in ("passed", "xfailed") and v}
        if bad or not c["outcomes"].get("passed"):
            problems.append(f"conformance on CUDA: {c['line']}" + (": " + "; ".join(c["skipped_tests"])
                                                                  if c["skipped_tests"] else ""))
    if (b := results.get("bench")) is None or not b["rows"]:
        problems.append("no bench row measured")
    elif b["not_ok"]:
        problems.append("bench rows differ from numpy: " + ", ".join(b["not_ok"]))
    return problems


def verdict(summary: dict[str, Any]) -> tuple[bool, list[str]]:
    """(pass, problems). A real run passes only when every step finished in time with status 0, CUDA is
    available, at least one CUDA test ran and none was skipped or failed, the conformance suite on CUDA passed
    with nothing skipped, and every bench row matched numpy. A dry run needs its toolchain and install phases."""
    dry = bool(summary.get("dry_run"))
    phases = summary.get("phases", {})
    problems = [f"phase {p} did not run" for p in ("toolchain", "install", *(() if dry else ("cuda", "bench")))
                if p not in phases]
    for p, ph in phases.items():
        for name, st in ph["steps"].items():
            if st["status"] == "timeout":
                problems.append(f"{p}/{name} ran into the phase's time cap")
            elif st["status"] != "ok":
                problems.append(f"{p}/{name} failed (rc {st['rc']})" + (f": {st['note']}" if st.get("note") else ""))
    if not dry:
        dev = summary.get("device", {})
        if not dev.get("available"):
            problems.append(f"CUDA is not available ({dev.get('state', 'not probed')}: {dev.get('reason', '')})")
        problems += _result_problems(summary.get("results", {}))
    return not problems, problems


# ---------------------------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_report.py", description=__doc__.splitlines()[0])
    ap.add_argument("--summary", type=Path, required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("init").add_argument("--dry-run", type=int, default=0)
    st = sub.add_parser("step")
    for name in ("phase", "name"):
        st.add_argument(name)
    st.add_argument("rc", type=int)
    st.add_argument("seconds", type=float)
    st.add_argument("note", nargs="?", default="")
    for name in ("toolchain", "device", "model-rows", "verdict"):
        sub.add_parser(name)
    ju = sub.add_parser("junit")
    ju.add_argument("key")
    ju.add_argument("xml", type=Path)
    sub.add_parser("conformance").add_argument("json", type=Path)
    be = sub.add_parser("bench")
    be.add_argument("part", type=Path)
    be.add_argument("merged", type=Path)
    args = ap.parse_args(argv)

    if args.cmd == "model-rows":
        print("\n".join(model_rows()))
        return 0
    summary = {"dry_run": bool(args.dry_run), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")} \
        if args.cmd == "init" else load(args.summary)
    rc = 0
    if args.cmd == "step":
        record_step(summary, args.phase, args.name, args.rc, args.seconds, args.note)
    elif args.cmd == "toolchain":
        rc = toolchain(summary)
    elif args.cmd == "device":
        rc = device(summary)
    elif args.cmd == "junit":
        rc = junit(summary, args.key, args.xml)
    elif args.cmd == "conformance":
        rc = conformance(summary, args.json)
    elif args.cmd == "bench":
        rc = bench(summary, args.part, args.merged)
    elif args.cmd == "verdict":
        ok, problems = verdict(summary)
        summary["verdict"] = {"pass": ok, "problems": problems,
                              "mode": "dry run (stopped before the first CUDA call)" if summary.get("dry_run")
                              else "full"}
        print(f"gpu check: {'PASS' if ok else 'FAIL'} ({summary['verdict']['mode']})")
        for p in problems:
            print(f"  - {p}")
        rc = 0 if ok else 1
    save(args.summary, summary)
    return rc


if __name__ == "__main__":
    sys.exit(main())
