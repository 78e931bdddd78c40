"""The compile progress line (docs/configuration.md, "Progress"): drawn on a terminal once a compile has run
PROGRESS_SECONDS, never into a pipe, off with PROGRESS_SECONDS=0."""
from __future__ import annotations

import os
import pty
import subprocess
import sys

# a cold compile of a few kernels (a fresh cache): far longer than the 1 ms threshold the tests set
_PROGRAM = """
import numpy as np
from tolk_core import Tensor
x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
print("result", float(((x * 2).sum(axis=1).reshape(8, 1) + x.max(axis=0)).softmax(axis=1).sum().item()))
"""


def _env(tmp_path, seconds: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLK_") and k != "DEBUG"}
    env.update(TOLK_CACHE_DIR=str(tmp_path / "cache"), TOLK_DEVICE="CPU", TOLK_NO_CONFIG="1",
               TOLK_PROGRESS_SECONDS=seconds)
    return env


def _in_pty(tmp_path, seconds: str) -> str:
    """The program's stdout and stderr as a terminal shows them (both on one pseudo-terminal)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", _PROGRAM], stdin=slave, stdout=slave, stderr=slave,
                            env=_env(tmp_path, seconds), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0, b"".join(chunks)
    return b"".join(chunks).decode()


def test_progress_line_on_a_terminal(tmp_path):
    out = _in_pty(tmp_path, "0.001")
    assert "result 8.0" in out  # 8 softmax rows, each summing to 1
    drawn = [part for part in out.replace("\r\n", "\n").split("\r") if "kernels rendered" in part]
    assert drawn, out
    assert "tolk: compiling for CPU: " in drawn[0] and " s" in drawn[0]
    assert "\x1b[K" in out  # redrawn in place, the old line erased
    summary = [line for line in out.splitlines() if line.lstrip("\r\x1b[K").startswith("tolk: compiled ")]
    assert len(summary) == 1 and summary[0].endswith(" s"), out


def test_no_progress_when_piped(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True,
                          env=_env(tmp_path, "0.001"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "result 8.0\n" and proc.stderr == ""


def test_progress_off_with_the_setting(tmp_path):
    out = _in_pty(tmp_path, "0")
    assert out.replace("\r\n", "\n") == "result 8.0\n"
