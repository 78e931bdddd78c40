"""browser: headless Chromium (Debian's `chromium`, installed by `make viz`) on a local page: its DOM after
load, and screenshots. Each call is one browser process with a fresh profile directory, no sandbox (CI runs as
root) and no GPU; nothing but the file itself is loaded (the page is self-contained)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find() -> str | None:
    """The Chromium executable on PATH, or None."""
    return next((p for n in _NAMES if (p := shutil.which(n)) is not None), None)


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    exe = find()
    if exe is None:
        raise FileNotFoundError("headless Chromium is not installed: apt-get install chromium (or make viz)")
    with tempfile.TemporaryDirectory(prefix="tolk-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
               "--hide-scrollbars", f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": "disabled:"})


def url(path: str | os.PathLike[str], fragment: str = "") -> str:
    """The file:// URL of `path`, with `#fragment` when given (a view of the page: docs/viz.md)."""
    return Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")


def dump_dom(page_url: str, timeout: float = 60) -> str:
    """The DOM of `page_url` after load, serialized (`--dump-dom`)."""
    proc = _run(["--dump-dom", page_url], timeout)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError(f"chromium --dump-dom {page_url} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def screenshot(page_url: str, png: str | os.PathLike[str], size: tuple[int, int] = (1280, 900),
               timeout: float = 60) -> Path:
    """A PNG of the window (`size`) showing `page_url`, written to `png` (its folder created)."""
    out = Path(png).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = _run([f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", page_url], timeout)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"chromium --screenshot {page_url} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return out
