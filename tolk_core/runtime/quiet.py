"""quiet: a compiler's own output, held back while Tolk compiles (docs/configuration.md, "Quiet output").

Compilers that run inside the process write their diagnostics straight to file descriptors 1 and 2 (PoCL's
clang prints "1 warning generated."), and pyopencl turns a non-empty build log into a Python warning
(`CompilerWarning`); neither is the user's output nor Tolk's. `quietly(compile)` runs one compile with both
descriptors redirected to a temporary file and Python's warnings recorded. Afterwards:

- a CompileError raised inside gets the held-back text appended to its log (any other exception gets it as a
  note), so a failing compile shows everything its compiler said;
- with DEBUG>=2 the text is written to the real stderr and the warnings are issued again;
- otherwise both are dropped. Warnings of Tolk's own classes (modules named ``tolk...``) are always issued
  again: they are meant for the user (a damaged cache entry).

The redirection is process-wide for its duration (file descriptors are): output another thread writes during a
compile is held back with it. Nested calls redirect once (the outermost).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import TypeVar

from tolk_core import config
from tolk_core.errors import CompileError

T = TypeVar("T")
_active = False  # a redirection is in place: an inner quietly() leaves it alone


class _Held:
    """What one redirection held back: the descriptors' text and the recorded warnings."""

    def __init__(self) -> None:
        self.text = ""
        self.warnings: list[warnings.WarningMessage] = []


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a replaced stream without flush, or a closed one
            stream.flush()


@contextlib.contextmanager
def _redirected() -> Iterator[_Held]:
    """fds 1 and 2 into a temporary file, warnings recorded; both handed back in the yielded _Held on exit."""
    global _active
    held = _Held()
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:  # a descriptor is closed (a daemon): nothing to redirect
        yield held
        return
    _flush()
    tmp = tempfile.TemporaryFile()
    _active = True
    try:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always")
            try:
                yield held
            finally:
                _flush()
        held.warnings = recorded
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        _active = False
        tmp.seek(0)
        held.text = tmp.read().decode(errors="replace")
        tmp.close()


def _own(w: warnings.WarningMessage) -> bool:
    return w.category.__module__.split(".")[0].startswith("tolk")


def _reissue(ws: list[warnings.WarningMessage]) -> None:
    for w in ws:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def quietly(compile: Callable[[], T]) -> T:
    """`compile()` with its compiler's output held back (see the module docstring)."""
    if _active:
        return compile()
    error: BaseException | None = None
    with _redirected() as held:
        try:
            result = compile()
        except BaseException as e:  # noqa: BLE001 - re-raised below, once the descriptors are back
            error = e
    _reissue([w for w in held.warnings if _own(w)])
    foreign = [w for w in held.warnings if not _own(w)]
    said = held.text + "".join(f"{w.category.__name__}: {w.message}\n" for w in foreign)
    if error is not None:
        if said and isinstance(error, CompileError):
            error.log = f"{error.log.rstrip()}\n{said}" if error.log else said
        elif said:
            error.add_note(f"compiler output:\n{said}")
        raise error
    if config.get("DEBUG") >= 2:
        sys.stderr.write(held.text)
        _reissue(foreign)
    return result
