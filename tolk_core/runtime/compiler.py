"""Compiler: source text to a binary, with an in-memory and an on-disk cache."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.runtime import cache_file
from tolk_core.runtime.quiet import quietly


def cache_dir() -> Path:
    """The compile cache directory: config CACHE_DIR, else $XDG_CACHE_HOME/tolk, else ~/.cache/tolk."""
    if d := config.get("CACHE_DIR"):
        return Path(d).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tolk"


def remembered_identity(facts: str | None, compute: Callable[[], str]) -> str:
    """`compute()` (a compiler identity that costs subprocess calls), remembered on disk under a digest of `facts`:
    everything the identity depends on that is cheap to read (the compiler binary's path, size and modification
    time, flags, the CPU). `facts` None: compute every time."""
    if facts is None or config.get("DISABLE_COMPILER_CACHE"):
        return compute()
    path = cache_dir() / "identity" / hashlib.sha256(f"{cache_file.MAGIC!r} {facts}".encode()).hexdigest()
    with contextlib.suppress(UnicodeDecodeError):
        if (data := cache_file.read_entry(path, "compiler identity")) is not None:
            return data.decode()
    ident = compute()
    with contextlib.suppress(OSError):
        cache_file.write_entry(path, ident.encode())
    return ident


class Compiler:
    """Turns source into a binary (``compile``), cached by ``compile_cached``.

    Subclasses implement ``compile`` (raising CompileError(message, source, log) on failure) and
    ``identity()``: a string naming the compiler, its version, its flags and the *resolved* target (e.g. what
    ``-march=native`` means on this CPU). The cache key is a SHA-256 of (kind, identity, source).

    On disk an entry is written to a temporary file and renamed into place, so a reader never sees half an
    entry; a per-entry lock makes a second process compiling the same source at the same time wait and then
    read the first one's entry, so they share it. Entries carry their length and SHA-256 (`cache_file`): a
    truncated or damaged one warns (CacheCorruptionWarning) and is compiled and written again.
    """

    kind: str = "generic"

    def __init__(self) -> None:
        self._mem: dict[str, bytes] = {}
        self._identity: str | None = None

    def compile(self, src: str) -> bytes:
        raise NotImplementedError

    def identity(self) -> str:
        """Compiler identity, flags and resolved target; part of the cache key."""
        return type(self).__qualname__

    def resolved_identity(self) -> str:
        """`identity()`, computed once per compiler object (it may cost subprocess calls)."""
        ident = getattr(self, "_identity", None)  # a subclass may not have called Compiler.__init__
        if ident is None:
            ident = self._identity = self.identity()
        return ident

    def cache_key(self, src: str) -> str:
        h = hashlib.sha256()
        for part in (cache_file.MAGIC.decode(), self.kind, self.resolved_identity(), src):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def cache_path(self, src: str) -> Path:
        key = self.cache_key(src)
        return cache_dir() / "compile" / self.kind / key[:2] / key

    def compile_cached(self, src: str) -> bytes:
        """``compile(src)``, reusing an earlier result from memory or disk when the key matches."""
        key = self.cache_key(src)
        if (lib := self._mem.get(key)) is not None:
            return lib
        if config.get("DISABLE_COMPILER_CACHE"):
            lib = self._compile_counted(src)
        else:
            lib = self._disk_cached(src)
        self._mem[key] = lib
        return lib

    def _compile_counted(self, src: str) -> bytes:
        GlobalCounters.compiles += 1
        # the compiler's own output (warnings, driver notes) is held back unless DEBUG>=2 or it fails
        return quietly(lambda: self.compile(src))

    @staticmethod
    def _read_entry(path: Path, warn: bool = True) -> bytes | None:
        if (lib := cache_file.read_entry(path, "compiled binary", warn)) is not None:
            GlobalCounters.disk_cache_hits += 1
        return lib

    def _disk_cached(self, src: str) -> bytes:
        path = self.cache_path(src)
        if (lib := self._read_entry(path)) is not None:
            return lib
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(path.with_suffix(".lock"), "wb")
        except OSError:  # a read-only cache location: compile without caching
            return self._compile_counted(src)
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # another process may have written it while we waited; a damaged entry has warned already
            if (lib := self._read_entry(path, warn=False)) is not None:
                return lib
            lib = self._compile_counted(src)
            with contextlib.suppress(OSError):  # a full disk only costs the next process the compile
                cache_file.write_entry(path, lib)
            return lib
