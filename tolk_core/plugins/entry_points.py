"""The installed entry points of one group, remembered on disk between processes.

`importlib.metadata` reads every distribution's metadata (and imports the `email` package to do it): about 20
ms, a third of a warm process's Tolk start-up. The answer only changes when a distribution is installed,
removed or upgraded, which adds, removes or rewrites a ``*.dist-info`` (or ``*.egg-info``) folder in a `sys.path`
directory. The cache is keyed by the interpreter, `sys.path`, and the name and modification time of every such
folder (a listing of each path directory: about a millisecond); any change, an unreadable or corrupt cache
file, or ``fresh=True`` (`registry.refresh`) reads the metadata again.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from tolk_core.runtime import cache_file
from tolk_core.runtime.compiler import cache_dir


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: its name, its ``module[:attr]`` value and the distribution that declares it."""
    name: str
    value: str
    dist: str
    version: str

    def load(self) -> Any:
        """Import the module the value names and return it, or its attribute after ``:``."""
        module, _, attr = self.value.partition(":")
        obj: Any = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj


_METADATA_DIRS = (".dist-info", ".egg-info")
_KEYS_KEPT = 16


def _path_key() -> str:
    """A digest of the interpreter, `sys.path` and the metadata folders (name, modification time) in it."""
    h = hashlib.sha256(sys.executable.encode())
    for p in sys.path:
        h.update(f"\0{p}".encode())
        with contextlib.suppress(OSError):
            with os.scandir(p or ".") as it:
                for e in sorted((e for e in it if e.name.endswith(_METADATA_DIRS)), key=lambda e: e.name):
                    h.update(f"\0{e.name}\0{e.stat().st_mtime_ns}".encode())
    return h.hexdigest()


def _read_metadata(group: str) -> list[EntryPoint]:
    import importlib.metadata as md  # deferred: the import is most of the cost this module saves

    return [EntryPoint(ep.name, ep.value, ep.dist.name if ep.dist else "?", ep.dist.version if ep.dist else "")
            for ep in md.entry_points(group=group)]


def installed(group: str, fresh: bool = False) -> list[EntryPoint]:
    """The entry points of `group` that the installed distributions declare (from the cache when valid)."""
    path = cache_dir() / "entry_points" / f"{hashlib.sha256(group.encode()).hexdigest()[:16]}.v2.json"
    key = _path_key()
    table: dict[str, list[list[str]]] = {}
    with contextlib.suppress(ValueError):
        if (data := cache_file.read_entry(path, "entry-point table")) is not None:
            table = json.loads(data)
    with contextlib.suppress(TypeError, KeyError, AttributeError):
        if not fresh:
            return [EntryPoint(*row) for row in table[key]]
    eps = _read_metadata(group)
    # one entry per path layout (scripts, `python -c` and test runs see different sys.path), newest last
    table = {k: v for k, v in table.items() if k != key} if isinstance(table, dict) else {}
    table = dict([*list(table.items())[-(_KEYS_KEPT - 1):], (key, [[e.name, e.value, e.dist, e.version] for e in eps])])
    with contextlib.suppress(OSError):  # a read-only cache directory only costs the next process the read
        cache_file.write_entry(path, json.dumps(table).encode())
    return eps
