"""cache: tuning results on disk beside the kernel cache, so a tuned program starts tuned in every process.

An entry is keyed by everything a measured speed depends on: the kernel AST's structure, the device kind, the
renderer and the compiler identity (its version, flags and resolved target), the CPU model and Tolk's version.
A change of any of them (a new compiler, another machine sharing the cache folder, an upgrade) misses, and the
kernel is planned by the heuristic again until it is tuned again. An entry holds the choices the search kept
(none: the heuristic's plan was best, which is worth remembering too: no search next time), the gain measured
and the seconds the search took. Entries are verified like the compile cache's (`runtime.cache_file`).
`entries()` lists them for `tolk tune --show`.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tolk_core.runtime import cache_file
from tolk_core.runtime.compiler import cache_dir
from tolk_core.version import __version__


@dataclass(frozen=True)
class Entry:
    """A kernel's tuning: `choices` kept (empty: the heuristic's plan), the `gain` over the heuristic measured
    in the search's final window, the search's `seconds`, and what it was for (kernel name, device)."""
    kernel: str
    device: str
    choices: dict[str, int] = field(default_factory=dict)
    gain: float = 1.0
    seconds: float = 0.0
    when: float = 0.0


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere what `platform` reports)."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def key(structure: str, device_kind: str, renderer: str, compiler_identity: str) -> str:
    """The entry key of a kernel (its AST as stable text, `engine.source_cache.structure_text`) on a device."""
    h = hashlib.sha256()
    for part in ("tolk tune 1", structure, device_kind, renderer, compiler_identity, cpu_model(), __version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _path(k: str) -> Path:
    return cache_dir() / "tune" / k[:2] / k


def lookup(k: str) -> Entry | None:
    """The entry under key `k`, or None (missing, or damaged: that warns and counts as missing)."""
    data = cache_file.read_entry(_path(k), "tuning result")
    if data is None:
        return None
    try:
        return Entry(**json.loads(data))
    except (ValueError, TypeError):
        return None


def store(k: str, entry: Entry) -> None:
    """Write `entry` under key `k` (a read-only cache location only costs the next process a search)."""
    payload = json.dumps({**asdict(entry), "when": entry.when or time.time()}, sort_keys=True).encode()
    with contextlib.suppress(OSError):
        cache_file.write_entry(_path(k), payload)


def any_entries() -> bool:
    """Whether the tuning cache folder exists (anything was ever tuned with this cache directory)."""
    return (cache_dir() / "tune").is_dir()


def entries() -> list[tuple[str, Entry]]:
    """Every readable entry as (key, entry), oldest first."""
    root = cache_dir() / "tune"
    found: list[tuple[str, Entry]] = []
    for p in sorted(root.glob("*/*")) if root.is_dir() else []:
        if p.name.startswith(".") or p.suffix == ".lock":
            continue
        if (e := lookup(p.name)) is not None:
            found.append((p.name, e))
    return sorted(found, key=lambda ke: ke[1].when)


def describe(entry: Entry) -> dict[str, Any]:
    """An entry as a row of `tolk tune --show`."""
    return {"kernel": entry.kernel, "device": entry.device, "gain": round(entry.gain, 3),
            "choices": entry.choices or "heuristic", "search_s": round(entry.seconds, 1)}
