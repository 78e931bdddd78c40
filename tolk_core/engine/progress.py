"""progress: a one-line display of a long compile on a terminal (docs/configuration.md, "Progress").

`showing(total)` wraps the compile of one schedule's missing kernels. When it has run PROGRESS_SECONDS and
stderr is a terminal, a background thread draws one line in place, redrawn a few times a second:

    tolk: compiling for CPU: 12/40 kernels rendered, 3.4 s
    tolk: compiling for CPU: 40/40 kernels rendered, compiler running, 8.1 s

and, when the compile ends, leaves one line saying what it took (`tolk: compiled 40 kernel(s) in 9.0 s`). A
compile that ends sooner shows nothing; when stderr is not a terminal (a pipe, a log file) nothing is drawn,
and PROGRESS_SECONDS <= 0 turns the display off. The thread writes to its own copy of the terminal's descriptor:
while the compiler runs, descriptor 2 is redirected (`runtime/quiet.py`).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

from tolk_core import config

_REDRAW_SECONDS = 0.2


class Progress:
    """The counts one compile reports: kernels rendered of `total`, the device, whether the compiler runs."""

    def __init__(self, total: int, device: str = "") -> None:
        self.total, self.rendered, self.device, self.compiling = total, 0, device, False
        self.start = time.perf_counter()
        self.shown = False
        self._fd: int | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def rendering(self, device: str) -> None:
        self.device, self.compiling = device, False

    def kernel_rendered(self) -> None:
        self.rendered += 1

    def compiler_running(self) -> None:
        self.compiling = True

    def line(self) -> str:
        state = ", compiler running" if self.compiling else ""
        return (f"tolk: compiling for {self.device}: {self.rendered}/{self.total} kernels rendered{state}, "
                f"{time.perf_counter() - self.start:.1f} s")

    def _draw(self, text: str, end: str = "") -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):  # the terminal went away: the compile goes on
                os.write(self._fd, f"\r\x1b[K{text}{end}".encode())

    def _run(self, delay: float) -> None:
        if self._done.wait(delay):
            return
        self.shown = True
        while True:
            self._draw(self.line())
            if self._done.wait(_REDRAW_SECONDS):
                return

    def begin(self, delay: float) -> None:
        """Start the display thread, if stderr is a terminal."""
        try:
            if not os.isatty(2):
                return
            self._fd = os.dup(2)
        except OSError:
            return
        self._thread = threading.Thread(target=self._run, args=(delay,), name="tolk-progress", daemon=True)
        self._thread.start()

    def end(self) -> None:
        """Stop the display; leave the summary line where one was drawn."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self.shown:
            self._draw(f"tolk: compiled {self.total} kernel(s) in {time.perf_counter() - self.start:.1f} s", "\n")
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def showing(total: int, device: str = "") -> Iterator[Progress]:
    """A Progress for a compile of `total` kernels, for `device` first, displayed as the module docstring says
    (the device is known from the start: a line drawn before the first kernel is rendered names it too)."""
    p = Progress(total, device)
    if total and (delay := config.get("PROGRESS_SECONDS")) > 0:
        p.begin(delay)
    try:
        yield p
    finally:
        p.end()
