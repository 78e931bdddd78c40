"""host: the CPU cache sizes that loop-style kernel plans are sized from (docs/performance.md, "Matmul").

`cache_sizes()` reads, in order: the setting CPU_CACHE_SIZES ("L1,L2,L3" with K/M/G suffixes, e.g. "32K,1M,32M":
an override for machines that report wrong sizes and for tests), Linux's sysfs (`cpu0/cache/index*`: the data
or unified cache of each level, as one core sees it), glibc's `os.sysconf` names, and last `DEFAULT`, so a plan
is always sized from some numbers. L1 and L2 are per core on every CPU the project runs on; L3 is the whole
(shared) cache as reported.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tolk_core import config

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class CacheSizes:
    """Bytes of the L1 data, L2 and L3 caches; `source` says where they were read."""
    l1: int
    l2: int
    l3: int
    source: str = "default"


DEFAULT = CacheSizes(32 << 10, 256 << 10, 8 << 20)


def parse_size(text: str) -> int:
    """Bytes in a size like "48K", "1M", "32768K" or "524288"; ValueError naming the text otherwise."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a cache size: write a number of bytes with an optional K, M or G suffix")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _from_setting(text: str) -> CacheSizes:
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) != 3:
        raise ValueError(f"CPU_CACHE_SIZES={text!r}: give three sizes, L1,L2,L3 (e.g. 32K,1M,32M)")
    l1, l2, l3 = (parse_size(p) for p in parts)
    if not 0 < l1 <= l2 <= l3:
        raise ValueError(f"CPU_CACHE_SIZES={text!r}: sizes must be above 0 and grow with the level (L1 <= L2 <= L3)")
    return CacheSizes(l1, l2, l3, "setting CPU_CACHE_SIZES")


def _from_sysfs(root: Path) -> CacheSizes | None:
    found: dict[int, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level in (1, 2, 3):
            found[level] = size
    if 1 not in found or 2 not in found:
        return None
    return CacheSizes(found[1], found[2], found.get(3, found[2]), f"sysfs {root}")


def _from_sysconf() -> CacheSizes | None:
    try:
        sizes = [os.sysconf(f"SC_LEVEL{n}_{'DCACHE' if n == 1 else 'CACHE'}_SIZE") for n in (1, 2, 3)]
    except (ValueError, OSError, AttributeError):
        return None
    if sizes[0] <= 0 or sizes[1] <= 0:
        return None
    return CacheSizes(sizes[0], sizes[1], max(sizes[2], sizes[1]), "os.sysconf")


def cache_sizes(sysfs: Path = SYSFS) -> CacheSizes:
    """The cache sizes plans are sized from (module docstring); ValueError for a malformed CPU_CACHE_SIZES."""
    if text := config.get("CPU_CACHE_SIZES"):
        return _from_setting(text)
    return _from_sysfs(sysfs) or _from_sysconf() or DEFAULT
