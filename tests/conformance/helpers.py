"""Running the conformance suite in a subprocess, and installing plugin sources for it to find."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tolk_example_device"
FIXTURES = REPO / "tests" / "fixtures"


FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)


def fenced_blocks(markdown: str) -> list[tuple[str, dict[str, str], str]]:
    """Every fenced code block of `markdown`, in order, as (language, the `key=value` words of its info string,
    body): ```` ```python raises=ShapeError ```` gives ("python", {"raises": "ShapeError"}, body)."""
    return [(lang, dict(w.split("=", 1) for w in info.split() if "=" in w), body)
            for lang, info, body in FENCE.findall(markdown)]


def pip_install(src: Path, target: Path) -> Path:
    """Install the distribution at `src` (no dependencies) into the directory `target`; return `target`."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(src)],
                   check=True, capture_output=True, text=True, timeout=300)
    return target


def run_suite(device: str, *args: str, paths: tuple[Path, ...] = (), cwd: Path, env: dict | None = None,
              ) -> subprocess.CompletedProcess:
    """``pytest --pyargs tolk_core.testing --tolk-device DEVICE *args`` with `paths` first on PYTHONPATH."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("TOLK_")}
    e["PYTHONPATH"] = os.pathsep.join([*map(str, paths), *filter(None, [os.environ.get("PYTHONPATH")])])
    e.update(env or {})
    cmd = [sys.executable, "-m", "pytest", "-p", "tolk_core.testing.plugin", "--pyargs", "tolk_core.testing",
           "--tolk-device", device, "-q", "-p", "no:cacheprovider", "--tolk-report", str(cwd / "report.json"), *args]
    return subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True, timeout=600)


def summary(proc: subprocess.CompletedProcess, device: str) -> str:
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"tolk conformance {device}:")]
    assert lines, f"no summary line for {device}:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    return lines[0]
