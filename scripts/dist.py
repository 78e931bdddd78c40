"""Build the wheels and sdists of tolk-core and each shipped plugin into one directory (`make dist`).

    python scripts/dist.py [OUTDIR] [--only tolk-core,tolk-cpu] [--wheel-only]

Each project is copied (its pyproject, README and package; no caches, no build output) into a temporary
directory and built there with `python -m build --no-isolation` (the `build` package, declared in the `dist`
extra): the build backend is this interpreter's setuptools, so no index is needed to build, and the working
tree gets no build/ or egg-info folders. Prints each file written; exits non-zero naming the project whose
build failed.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = {"tolk-core": ROOT, "tolk-cpu": ROOT / "plugins" / "tolk_cpu",
            "tolk-opencl": ROOT / "plugins" / "tolk_opencl", "tolk-cuda": ROOT / "plugins" / "tolk_cuda"}
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def _copy(src: Path, dest: Path) -> Path:
    """The files a distribution is built from: pyproject.toml, README.md when present, and the package folder
    the pyproject names (``tolk_core``, ``tolk_cpu``, ...)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (src / name).exists():
            shutil.copy2(src / name, dest / name)
    package = src.name if src != ROOT else "tolk_core"
    shutil.copytree(src / package, dest / package, ignore=_SKIP)
    return dest


def build(name: str, outdir: Path, wheel_only: bool = False) -> list[Path]:
    """Build project `name` into `outdir`; the files it wrote."""
    before = set(outdir.glob("*"))
    with tempfile.TemporaryDirectory(prefix="tolk-dist-") as tmp:
        src = _copy(PROJECTS[name], Path(tmp) / name)
        cmd = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(outdir.resolve()),
               *(["--wheel"] if wheel_only else []), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"dist: building {name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return sorted(set(outdir.glob("*")) - before)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/dist.py", description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "dist"))
    ap.add_argument("--only", default=",".join(PROJECTS), help="comma-separated project names")
    ap.add_argument("--wheel-only", action="store_true", help="wheels, no sdists")
    args = ap.parse_args(argv)
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for name in args.only.split(","):
        for f in build(name, outdir, args.wheel_only):
            print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
