"""Tuning results on disk: a stored entry is read back under the same key; any part of the key (compiler
identity, device, renderer, the AST) changing misses; damaged entries count as missing."""
from __future__ import annotations

import pytest

from tolk_core import config
from tolk_core.runtime.cache_file import CacheCorruptionWarning
from tolk_core.tune import cache


@pytest.fixture
def tmp_cache(tmp_path):
    with config.override(CACHE_DIR=str(tmp_path)):
        yield tmp_path


def test_an_entry_is_read_back_under_its_key_and_listed(tmp_cache):
    k = cache.key("SINK ...", "CPU", "CRenderer", "gcc 14 -O2 -march=skylake")
    assert cache.lookup(k) is None
    cache.store(k, cache.Entry("r_16_16", "CPU", {"MAX_ACCUMULATORS": 8}, 1.31, 4.2))
    got = cache.lookup(k)
    assert got is not None and got.choices == {"MAX_ACCUMULATORS": 8} and got.gain == 1.31 and got.when > 0
    listed = cache.entries()
    assert [key for key, _ in listed] == [k]
    assert cache.describe(listed[0][1]) == {"kernel": "r_16_16", "device": "CPU", "gain": 1.31,
                                            "choices": {"MAX_ACCUMULATORS": 8}, "search_s": 4.2}


def test_every_part_of_the_key_matters(tmp_cache):
    parts = ("SINK ...", "CPU", "CRenderer", "gcc 14 -O2")
    base = cache.key(*parts)
    cache.store(base, cache.Entry("k", "CPU"))
    for i, other in enumerate(("SINK other", "OPENCL", "OpenCLRenderer", "gcc 15 -O2")):
        changed = list(parts)
        changed[i] = other
        k = cache.key(*changed)
        assert k != base and cache.lookup(k) is None


def test_a_damaged_entry_warns_and_counts_as_missing(tmp_cache):
    k = cache.key("SINK ...", "CPU", "CRenderer", "cc")
    cache.store(k, cache.Entry("k", "CPU"))
    path = next((tmp_cache / "tune").glob("*/*"))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.warns(CacheCorruptionWarning):
        assert cache.lookup(k) is None
