"""The entry-point cache: a warm process reads the installed plugins without importlib.metadata, and any
install, removal or upgrade of a distribution on sys.path is seen."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tolk_core.errors import CacheCorruptionWarning
from tolk_core.plugins import entry_points
from tolk_core.runtime import cache_file

GROUP = "tolk.backends"


def _dist(site, name: str, version: str, value: str) -> None:
    d = site / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (d / "entry_points.txt").write_text(f"[{GROUP}]\n{name} = {value}\n")


def _names(eps) -> set[tuple[str, str, str]]:
    return {(e.name, e.dist, e.version) for e in eps}


def test_cache_sees_installs_upgrades_and_removals(tmp_path, monkeypatch):
    monkeypatch.setenv("TOLK_CACHE_DIR", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = _names(entry_points.installed(GROUP))
    assert {"tolk-cpu", "tolk-opencl", "tolk-cuda"} <= {d for _, d, _ in before}

    _dist(site, "tolk_widget", "1.0", "tolk_widget.plugin")  # installed after the cache was written
    assert _names(entry_points.installed(GROUP)) == before | {("tolk_widget", "tolk_widget", "1.0")}
    os.rename(site / "tolk_widget-1.0.dist-info", site / "tolk_widget-1.1.dist-info")  # an upgrade
    (site / "tolk_widget-1.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: tolk_widget\n"
                                                                  "Version: 1.1\n")
    assert _names(entry_points.installed(GROUP)) == before | {("tolk_widget", "tolk_widget", "1.1")}
    for f in (site / "tolk_widget-1.1.dist-info").iterdir():
        f.unlink()
    (site / "tolk_widget-1.1.dist-info").rmdir()
    assert _names(entry_points.installed(GROUP)) == before


def test_corrupt_cache_is_read_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TOLK_CACHE_DIR", str(tmp_path))
    want = _names(entry_points.installed(GROUP))
    (cache,) = (tmp_path / "entry_points").iterdir()
    cache.write_text("{not json")
    with pytest.warns(CacheCorruptionWarning, match="entry-point table"):
        assert _names(entry_points.installed(GROUP)) == want
    assert json.loads(cache_file.read_entry(cache, "entry-point table"))  # rewritten whole


def test_warm_process_does_not_import_importlib_metadata(tmp_path):
    code = ("import sys; from tolk_core.plugins import Device; Device.check('CPU'); "
            "print('importlib.metadata' in sys.modules)")
    env = {**os.environ, "TOLK_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True", "False"]  # cold reads the metadata, warm the cache
