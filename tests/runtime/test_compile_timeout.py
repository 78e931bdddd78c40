"""COMPILE_TIMEOUT: a C compiler that never returns makes the first realize fail with CompileTimeoutError (naming
the kernel, the limit and how to raise it) instead of hanging; the compiler and its children are stopped.

The fake compilers are shell scripts that sleep; pytest-timeout is the liveness check (without the limit the
realize would wait for the sleep).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from tolk_core import config
from tolk_core.errors import CompileError, CompileTimeoutError
from tolk_core.frontend.tensor import Tensor
from tolk_core.render.ccompile import run_compiler

pytestmark = pytest.mark.timeout(60)

# answers the identity queries (--version, -###, the predefined macros -dM) at once and hangs on the compile
# itself, like a compiler that loops on one kernel; records its process id so the test can check it was stopped
_HANGS_ON_COMPILE = """#!/bin/sh
case "$*" in *--version*|*-###*|*-dM*) exec cc "$@" ;; esac
echo $$ > "{pidfile}"
exec sleep 1000
"""


def _fake_cc(tmp_path, text: str) -> str:
    path = tmp_path / "fake-cc"
    path.write_text(text.format(pidfile=tmp_path / "pid"))
    path.chmod(0o755)
    return str(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a killed child not yet reaped by anyone is a zombie: stopped all the same
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("hangs", ["compile", "identity"])
def test_a_hanging_c_compiler_fails_the_first_realize_in_time(tolk_env, tmp_path, hangs):
    cc = _fake_cc(tmp_path, _HANGS_ON_COMPILE if hangs == "compile" else "#!/bin/sh\nexec sleep 1000\n")
    a = np.arange(6, dtype=np.float32)
    # tolk_env gives a fresh registry: the CPU device opened here reads this CC
    with config.override(CC=cc, COMPILE_TIMEOUT=1.0, CACHE_DIR=str(tmp_path / "cache")):
        start = time.monotonic()
        with pytest.raises(CompileTimeoutError) as e:
            (Tensor(a, device="CPU") * 7 + 1).numpy()
        took = time.monotonic() - start
    msg = str(e.value)
    assert isinstance(e.value, CompileError) and took < 20
    assert "COMPILE_TIMEOUT=1 s" in msg and "TOLK_COMPILE_TIMEOUT" in msg and cc in msg
    assert "kernel(s) E_" in msg and "for CPU" in msg
    if hangs == "compile":
        assert e.value.source  # the module that did not compile travels with the error
        assert not _alive(int((tmp_path / "pid").read_text()))


def test_run_compiler_kills_the_whole_process_group(tmp_path):
    # the script starts a grandchild (as a compiler driver starts cc1) and waits for it
    script = tmp_path / "driver"
    script.write_text(f"#!/bin/sh\nsleep 1000 &\necho $! > {tmp_path / 'pid'}\nwait\n")
    script.chmod(0o755)
    with config.override(COMPILE_TIMEOUT=0.5), pytest.raises(CompileTimeoutError, match="COMPILE_TIMEOUT=0.5 s"):
        run_compiler([str(script)], "src")
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5  # SIGKILL is delivered at once, but the process dies when next scheduled
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(pid)


def test_no_limit_and_a_fast_compiler_are_unaffected(tmp_path):
    with config.override(COMPILE_TIMEOUT=0):
        proc = run_compiler(["sh", "-c", "sleep 0.2; echo out; echo err >&2; exit 3"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")
