"""The GPU check without a GPU (docs/gpu.md): the bundle's size check, pycuda's parallel build, and
`scripts/gpu_check.sh --dry-run` end to end, against a fake `nvidia-smi` and `nvcc` on PATH and a bundle of stub
packages (a stub pycuda sdist whose configure.py records how it was called, and stub dependency wheels).

The dry run installs Tolk from this working tree into a scratch folder, as the device machine does, so it needs
pip and setuptools in this interpreter; nothing is downloaded."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "gpu_check.sh"
SIZE = ROOT / "scripts" / "gpu_bundle_size.sh"

needs_setuptools = pytest.mark.skipif(importlib.util.find_spec("setuptools") is None or
                                      importlib.util.find_spec("pip") is None,
                                      reason="the dry run builds Tolk's wheels: needs pip and setuptools here")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")


# ---------------------------------------------------------------------------------------------- bundle size
def _folder(path: Path, sizes: list[int]) -> Path:
    (path / "sub").mkdir(parents=True)
    for i, n in enumerate(sizes):
        (path / ("sub" if i % 2 else "") / f"f{i}.bin").write_bytes(b"x" * n)
    return path


def test_bundle_size_check_fails_above_the_limit(tmp_path) -> None:
    mib = 1 << 20
    small = _folder(tmp_path / "small", [mib // 2, mib // 4])  # 0.75 MiB in two folders
    big = _folder(tmp_path / "big", [mib, mib // 2])  # 1.5 MiB
    ok = subprocess.run(["sh", str(SIZE), str(small), "1"], capture_output=True, text=True)
    assert ok.returncode == 0 and "2 files, 0.75 MiB (limit 1 MiB)" in ok.stdout
    over = subprocess.run(["sh", str(SIZE), str(big), "1"], capture_output=True, text=True)
    assert over.returncode == 1 and "1.50 MiB: over the 1 MiB limit" in over.stdout
    missing = subprocess.run(["sh", str(SIZE), str(tmp_path / "nope"), "1"], capture_output=True, text=True)
    assert missing.returncode == 1 and "does not exist" in missing.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_gpu_bundle_size_applies_the_limit(tmp_path) -> None:
    big = _folder(tmp_path / "big", [3 << 20])
    run = lambda mib: subprocess.run(["make", "-s", "-C", str(ROOT), "gpu-bundle-size", f"GPU_BUNDLE={big}",
                                      f"GPU_BUNDLE_MAX_MIB={mib}"], capture_output=True, text=True)
    assert run(2).returncode != 0 and "over the 2 MiB limit" in run(2).stdout
    assert run(4).returncode == 0


# ---------------------------------------------------------------------------------------------- pycuda's build
PARALLEL = """import ctypes, os, sys
sys.path.insert(0, sys.argv[1])
import gpu_build_pycuda
gpu_build_pycuda.parallel_compile(3)
from distutils import ccompiler
srcs = []
for i in range(5):
    srcs.append(os.path.join(sys.argv[2], "s%d.c" % i))
    with open(srcs[-1], "w") as f:
        f.write("int f%d(int x) { return x * %d; }\\n" % (i, i + 2))
cc = ccompiler.new_compiler()
objs = cc.compile(srcs, output_dir=os.path.join(sys.argv[2], "obj"), extra_postargs=["-fPIC"])
cc.link_shared_object(objs, os.path.join(sys.argv[2], "libs.so"))
lib = ctypes.CDLL(os.path.join(sys.argv[2], "libs.so"))
print(cc.compile.__qualname__, len(objs), [getattr(lib, "f%d" % i)(10) for i in range(5)])
"""


@needs_cc
@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="setuptools not installed")
def test_parallel_compile_builds_every_source(tmp_path) -> None:
    """distutils with the patched CCompiler.compile (several sources at a time; a fresh interpreter, as the
    builder runs) compiles every source into a working object."""
    proc = subprocess.run([sys.executable, "-c", PARALLEL, str(ROOT / "scripts"), str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-7:] == ["parallel_compile.<locals>.compile", "5", "[20,", "30,", "40,", "50,", "60]"]


# ---------------------------------------------------------------------------------------------- the dry run
def _wheel(folder: Path, name: str, version: str) -> None:
    """A minimal pure wheel holding package `name` (its __init__ names the stub)."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"STUB = {name!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{dist}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for f, text in files.items():
            z.writestr(f, text)


CONFIGURE = """import json, os, sys
with open("siteconf.py", "w") as f:
    f.write("ARGS = %r\\n" % sys.argv[1:])
with open(os.environ["STUB_CONFIGURE_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def _sdist(folder: Path, version: str) -> None:
    """A stub pycuda sdist: setuptools project, configure.py that records its arguments."""
    top = f"pycuda-{version}"
    files = {"setup.py": f"from setuptools import setup\nsetup(name='pycuda', version='{version}', "
                         "packages=['pycuda'])\n",
             "pyproject.toml": "[build-system]\nrequires = ['setuptools']\n",
             "configure.py": CONFIGURE,
             "pycuda/__init__.py": f"VERSION_TEXT = '{version}'\n"}
    with tarfile.open(folder / f"{top}.tar.gz", "w:gz") as tf:
        for f, text in files.items():
            info = tarfile.TarInfo(f"{top}/{f}")
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))


FAKE_SMI = """#!/bin/sh
if [ "$#" -gt 0 ]; then echo "NVIDIA H200, 580.159.03, 9.0, 143771 MiB"; exit 0; fi
echo "| NVIDIA-SMI 580.159.03             Driver Version: 580.159.03     CUDA Version: 13.0     |"
"""
FAKE_NVCC = """#!/bin/sh
echo "Cuda compilation tools, release 13.0, V13.0.88"
"""


@pytest.fixture
def world(tmp_path) -> dict:
    """A bundle of stubs, a fake driver and toolkit on PATH, and the check's folders, all under tmp_path."""
    bundle, fake = tmp_path / "bundle", tmp_path / "bin"
    bundle.mkdir()
    fake.mkdir()
    for name in ("pytools", "platformdirs", "mako"):
        _wheel(bundle, name, "1.0")
    _sdist(bundle, "9.9")
    for tool, text in (("nvidia-smi", FAKE_SMI), ("nvcc", FAKE_NVCC)):
        (fake / tool).write_text(text)
        (fake / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "GPU_BUNDLE": str(bundle), "GPU_PYTHON": sys.executable, "GPU_SITE": str(tmp_path / "site"),
           "GPU_WORK": str(tmp_path / "work"), "STUB_CONFIGURE_LOG": str(tmp_path / "configure.log"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "tolk_cuda")])}
    return {"tmp": tmp_path, "bundle": bundle, "env": env, "out": tmp_path / "out", "site": tmp_path / "site"}


def _dry_run(world: dict) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(["bash", str(CHECK), "--dry-run"], env=world["env"], capture_output=True, text=True,
                          timeout=600)
    return proc, json.loads((world["out"] / "summary.json").read_text())


def _configure_calls(world: dict) -> list[list[str]]:
    log = world["tmp"] / "configure.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@needs_setuptools
def test_dry_run_installs_everything_reports_and_stops_before_cuda(world) -> None:
    proc, s = _dry_run(world)
    assert proc.returncode == 0, proc.stdout[-3000:]
    out, site = world["out"], world["site"]
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.log", "pycuda-9.9-py3-none-any.whl", "summary.json"]
    assert (out / "gpu-check.log").read_text() == proc.stdout  # the log is the whole output
    # pycuda built from its sdist with cuRAND off, then installed with its dependencies and Tolk
    (calls,) = _configure_calls(world)
    assert "--no-cuda-enable-curand" in calls and any(a.startswith("--cuda-root=") for a in calls)
    for pkg in ("pycuda", "pytools", "platformdirs", "mako", "tolk_core", "tolk_cpu", "tolk_opencl", "tolk_cuda"):
        assert (site / pkg / "__init__.py").exists(), pkg
    eps = "".join(p.read_text() for p in site.glob("tolk_cuda-*.dist-info/entry_points.txt"))
    assert "[tolk.backends]" in eps and "tolk_cuda.plugin" in eps  # the registry finds the plugin there
    # what the summary says: the fake driver's versions, every install step, no CUDA phase, a dry-run pass
    tc = s["toolchain"]
    assert (tc["driver"], tc["driver_cuda"], tc["nvcc"]) == ("580.159.03", "13.0", "13.0")
    assert tc["gpu"] == "NVIDIA H200, 580.159.03, 9.0, 143771 MiB"
    assert list(s["phases"]) == ["toolchain", "install"] and "device" not in s
    steps = s["phases"]["install"]["steps"]
    assert list(steps) == ["deps", "pycuda", "tolk", "imports"] and all(v["status"] == "ok" for v in steps.values())
    assert steps["pycuda"]["note"] == "built pycuda-9.9-py3-none-any.whl from pycuda-9.9.tar.gz"
    assert s["dry_run"] and s["verdict"]["pass"] and s["verdict"]["mode"].startswith("dry run")
    assert "dry run: stopping before the first CUDA call" in proc.stdout and "gpu check: PASS" in proc.stdout

    # a rerun with the returned wheel copied into the bundle installs it instead of building again
    shutil.copy(out / "pycuda-9.9-py3-none-any.whl", world["bundle"])
    proc, s = _dry_run(world)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert len(_configure_calls(world)) == 1  # configure.py did not run again
    assert s["phases"]["install"]["steps"]["pycuda"]["note"] == "reused pycuda-9.9-py3-none-any.whl"
    assert (out / "pycuda-9.9-py3-none-any.whl").exists() and (world["site"] / "pycuda" / "__init__.py").exists()


def test_dry_run_without_pycuda_fails_and_says_why(world) -> None:
    for p in world["bundle"].glob("pycuda-*"):
        p.unlink()
    proc, s = _dry_run(world)
    assert proc.returncode == 1
    steps = s["phases"]["install"]["steps"]
    assert list(steps) == ["deps", "pycuda"]  # Tolk's install never started
    assert steps["pycuda"]["status"] == "failed" and "no pycuda sdist or wheel" in steps["pycuda"]["note"]
    assert not s["verdict"]["pass"] and "gpu check: FAIL" in proc.stdout
    assert not list(world["out"].glob("*.whl"))


def test_check_rejects_unknown_arguments(world) -> None:
    proc = subprocess.run(["bash", str(CHECK), "--dryrun"], env=world["env"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr and not world["out"].exists()
