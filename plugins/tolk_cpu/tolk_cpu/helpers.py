"""HelperThreads: one kind of native helper thread of the CPU device (the launch queue's worker, the core keepers).

Every kind is made the same way: per device, on first use; where it cannot be made (its C does not compile, no
thread can be started) a warning names what is lost and the setting that asks for that, once, and no other is
tried; threads do not survive a fork, so in a forked child the objects made in the parent are marked dead
(`orphan`) and their devices make new ones.
"""
from __future__ import annotations

import atexit
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tolk_core.errors import CompileError


class Helper(Protocol):
    alive: bool

    def orphan(self) -> None: ...


H = TypeVar("H", bound=Helper)


class HelperThreads:
    """The helpers of one kind made in this process. `what`: how the warning names them; `lost`: what runs
    without them and the setting that asks for it."""

    def __init__(self, what: str, lost: str, drain: Callable[[], None] | None = None):
        self.what, self.lost, self.drain = what, lost, drain
        self.made: list[Any] = []
        self._lock = threading.Lock()
        self._hooked = False  # the fork (and exit) hooks are registered: once per process, a child inherits them
        self._failed: list[str] = []

    def make(self, build: Callable[[], H]) -> H | None:
        """`build()`, remembered; None where it failed (now or before: warned once). `drain`, when given, runs
        before a fork and at exit."""
        if self._failed:
            return None
        with self._lock:
            if not self._hooked:
                os.register_at_fork(after_in_child=self._forget)
                if self.drain is not None:
                    os.register_at_fork(before=self.drain)
                    atexit.register(self.drain)
                self._hooked = True
            try:
                made = build()
            except (CompileError, OSError) as e:
                self._failed.append(str(e))
                warnings.warn(f"tolk: {self.what} could not be made ({e}); {self.lost}", RuntimeWarning, stacklevel=3)
                return None
            self.made.append(made)
        return made

    def _forget(self) -> None:
        for h in self.made:
            h.alive = False
            h.orphan()
        self.made.clear()
