"""The conformance report's default place: Tolk's cache directory, never the working directory
(docs/plugins.md, `--tolk-report`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def test_default_report_goes_to_the_cache_directory(tmp_path):
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLK_")}
    env["TOLK_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tolk_core.testing.plugin", "--pyargs",
                           "tolk_core.testing", "--tolk-device", "PYTHON", "-m", "registration", "-q",
                           "-p", "no:cacheprovider"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    report = cache / "conformance" / "report.json"
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"tolk conformance report: {report}" in proc.stdout
    assert list(work.iterdir()) == []
    data = json.loads(report.read_text())
    assert data["PYTHON"]["summary"].startswith("tolk conformance PYTHON: ") and data["PYTHON"]["tests"]
