"""docs/plugins.md's own plugin: its `file=` code blocks, extracted into a package and installed, pass the
conformance suite's registration and runtime tiers."""
from __future__ import annotations

import json

from tests.conformance.helpers import REPO, fenced_blocks, pip_install, run_suite, summary


def extract(markdown: str) -> dict[str, str]:
    """{relative path: text} of every fenced block whose info string names a file."""
    named = [(info["file"], body) for _, info, body in fenced_blocks(markdown) if "file" in info]
    files = dict(named)
    assert len(files) == len(named), "a file is given by two blocks"
    return files


def test_guide_plugin_passes_registration_and_runtime_tiers(tmp_path):
    files = extract((REPO / "docs" / "plugins.md").read_text())
    assert {"pyproject.toml", "tolk_mydev/plugin.py", "tolk_mydev/runtime.py", "tolk_mydev/renderer.py"} <= set(files)
    pkg = tmp_path / "tolk-mydev"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    site = pip_install(pkg, tmp_path / "site")
    proc = run_suite("MYDEV", "-m", "registration or runtime", paths=(site,), cwd=tmp_path)
    line = summary(proc, "MYDEV")
    assert proc.returncode == 0 and " 0 failed" in line, proc.stdout[-3000:]
    tiers = json.loads((tmp_path / "report.json").read_text())["MYDEV"]["tiers"]
    assert tiers["registration"].get("passed", 0) >= 5 and tiers["runtime"].get("passed", 0) >= 10
