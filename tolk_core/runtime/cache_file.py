"""Verified entries of Tolk's on-disk caches (compiled binaries, rendered sources, compiler identities, entry
points): each file holds a small header, the payload's length and SHA-256, then the payload.

A reader checks the header before it trusts a byte: an entry cut short (a full disk, a killed process, a copy
that stopped) or overwritten with anything else is reported with a `CacheCorruptionWarning` naming the file and
treated as missing, so the caller rebuilds it and writes it again. A compiled binary that is truncated is
otherwise handed to a program loader that may crash the process (PoCL) or fail every later run (``dlopen``:
"invalid ELF header"). Writers go through a temporary file renamed into place, so a concurrent reader sees the
old entry or the new one, never half of one.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import threading
import warnings
from pathlib import Path

from tolk_core.errors import CacheCorruptionWarning

MAGIC = b"TOLKCE1\n"  # the format's name and version: an entry of another format is never read as this one
_HEADER = struct.Struct(f"<{len(MAGIC)}sQ32s")  # magic, payload length, SHA-256 of the payload
HEADER_SIZE = _HEADER.size


def encode(payload: bytes) -> bytes:
    """The file contents of an entry holding `payload`."""
    return _HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


def _problem(data: bytes) -> str | None:
    """What is wrong with entry file contents `data`, or None when they are whole."""
    if len(data) < HEADER_SIZE:
        return f"{len(data)} bytes, shorter than its {HEADER_SIZE}-byte header"
    magic, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return "no Tolk cache header (garbage, or a file of another format)"
    if len(data) - HEADER_SIZE != length:
        return f"payload of {len(data) - HEADER_SIZE} bytes where the header says {length} (truncated or appended)"
    if hashlib.sha256(memoryview(data)[HEADER_SIZE:]).digest() != digest:
        return "payload does not match its SHA-256 (overwritten or damaged)"
    return None


def read_entry(path: Path, what: str, warn: bool = True) -> bytes | None:
    """The payload of the entry at `path`, or None when it is missing, unreadable or damaged. A damaged entry
    warns (`CacheCorruptionWarning`, naming `what` the entry holds and its path) unless `warn` is False: the
    caller rebuilds it, and a second look at the same entry need not warn twice."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if (problem := _problem(data)) is None:
        return data[HEADER_SIZE:]
    if warn:
        warnings.warn(f"tolk: the cached {what} {path} is damaged ({problem}); it is rebuilt and written again. "
                      "If this repeats, check the disk or delete the cache directory (TOLK_CACHE_DIR)",
                      CacheCorruptionWarning, stacklevel=2)
    return None


def write_entry(path: Path, payload: bytes) -> None:
    """Write `payload` as the entry at `path` (its folder created): to a temporary file in the same folder,
    then renamed over `path` in one step. Raises OSError when the cache location is not writable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(encode(payload))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
