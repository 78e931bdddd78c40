"""The public C-compile helper C-based plugins share: C source -> shared object bytes -> ctypes library."""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
from typing import TYPE_CHECKING

from tolk_core import config
from tolk_core.errors import CompileError, CompileTimeoutError

if TYPE_CHECKING:
    import subprocess

_ALWAYS = ("-shared", "-fPIC")


def compile_c(src: str, cc: str, flags: list[str]) -> bytes:
    """Compile C `src` with compiler `cc` and `flags` (``-shared -fPIC`` added when missing) into a shared
    object, returned as bytes. Works in a private temporary directory. Raises CompileError carrying the
    source and the compiler's output when the compiler is missing, fails, or exits 0 without writing the
    shared object (a CC that is not a C compiler)."""
    if shutil.which(cc) is None:
        raise CompileError(f"C compiler {cc!r} not found; install gcc or clang, or set CC in the tolk config "
                           f"(TOLK_CC)", src)
    import tempfile  # deferred: a process whose kernels all come from the cache never needs it

    args = [cc, *flags, *(f for f in _ALWAYS if f not in flags)]
    with tempfile.TemporaryDirectory(prefix="tolk-cc-") as d:
        c_path, so_path = os.path.join(d, "kernel.c"), os.path.join(d, "kernel.so")
        with open(c_path, "w") as f:
            f.write(src)
        proc = run_compiler([*args, "-o", so_path, c_path, "-lm"], src)
        if proc.returncode != 0:
            raise CompileError(f"{cc} failed (exit {proc.returncode}): {' '.join(args)}", src,
                               proc.stderr + proc.stdout)
        if not os.path.exists(so_path):
            raise CompileError(f"{cc} exited 0 but wrote no shared object ({' '.join(args)} -o kernel.so): is {cc!r} "
                               "a C compiler? Set CC in the tolk config (TOLK_CC) to gcc or clang", src,
                               proc.stderr + proc.stdout)
        if proc.stderr:  # warnings of a compile that succeeded, on the descriptor the compiler would have used:
            os.write(2, proc.stderr.encode())  # what runtime/quiet.py holds back unless DEBUG>=2
        with open(so_path, "rb") as so:
            return so.read()


def run_compiler(argv: list[str], src: str = "") -> subprocess.CompletedProcess[str]:
    """Run compiler command `argv` to completion, its output captured as text, within config COMPILE_TIMEOUT
    seconds. Past the limit the compiler and every process it started (its own session) are killed and
    CompileTimeoutError is raised, carrying `src`, naming the command and saying how to raise the limit."""
    import subprocess  # noqa: I001 - deferred with the compiles it serves

    limit = config.get("COMPILE_TIMEOUT")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit if limit > 0 else None)
    except BaseException as e:  # the limit, or an interrupt: the compiler must not outlive the call
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the driver's cc1/as/ld too, not only the driver
        proc.communicate()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        raise CompileTimeoutError(f"{argv[0]} did not finish within COMPILE_TIMEOUT={limit:g} s and was stopped "
                                  f"({' '.join(argv)}); raise the limit with TOLK_COMPILE_TIMEOUT=<seconds> (or "
                                  "COMPILE_TIMEOUT in the tolk config; 0 means none), or split big kernels with a "
                                  "smaller KERNEL_MAX_OPS", src) from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


_loaded: dict[str, ctypes.CDLL] = {}


def load_shared(lib: bytes) -> ctypes.CDLL:
    """Load shared-object bytes with ctypes, once per distinct binary in the process (later calls with the same
    bytes return the same library). The bytes go to a file named by their digest and the process id in the
    temporary directory, removed once loaded (a name of its own per binary: the loader treats a name it has
    loaded before as the same library)."""
    key = hashlib.sha256(lib).hexdigest()
    if (dll := _loaded.get(key)) is not None:
        return dll
    path = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"tolk-{os.getpid()}-{key[:32]}.so")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        dll = _loaded[key] = ctypes.CDLL(path)
        return dll
    finally:
        os.unlink(path)
