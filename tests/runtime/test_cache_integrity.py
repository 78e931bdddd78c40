"""Damaged on-disk cache entries: a truncated or overwritten entry warns (CacheCorruptionWarning, naming the file),
is rebuilt, and the run that meets it gives the right answer; the next run finds the rebuilt entry whole.

The device tests run each step in a fresh interpreter, so no in-memory cache hides what the disk holds: before
entries were verified, a truncated OpenCL binary crashed PoCL's program loader (SIGSEGV) and a truncated CPU
one failed every later run in ``dlopen``.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from tolk_core.errors import CacheCorruptionWarning
from tolk_core.runtime import cache_file

pytestmark = pytest.mark.timeout(300)


def _quiet_read(path, what="entry"):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        data = cache_file.read_entry(path, what)
    return data, [w for w in seen if issubclass(w.category, CacheCorruptionWarning)]


def test_entry_round_trip_and_every_kind_of_damage(tmp_path):
    path = tmp_path / "sub" / "entry"
    payload = bytes(range(256)) * 4
    cache_file.write_entry(path, payload)
    assert _quiet_read(path) == (payload, [])
    assert [p.name for p in path.parent.iterdir()] == ["entry"]  # no temporary file left behind
    whole = path.read_bytes()
    damaged = {
        "truncated": whole[:-1],
        "header only": whole[:cache_file.HEADER_SIZE],
        "shorter than the header": whole[:5],
        "empty": b"",
        "appended": whole + b"x",
        "garbage": os.urandom(len(whole)),
        "one payload byte flipped": whole[:-1] + bytes([whole[-1] ^ 1]),
        "old headerless format": payload,
    }
    for how, data in damaged.items():
        path.write_bytes(data)
        got, warned = _quiet_read(path, "compiled binary")
        assert got is None, how
        assert len(warned) == 1 and str(path) in str(warned[0].message), how
        assert "compiled binary" in str(warned[0].message) and "TOLK_CACHE_DIR" in str(warned[0].message)
    assert _quiet_read(tmp_path / "missing") == (None, [])  # missing is no damage: no warning


# A script run in a fresh interpreter: realizes one small computation on DEVICE and prints it; every
# CacheCorruptionWarning is printed to stderr with its message (the default filter shows each once).
_SCRIPT = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    from tolk_core.errors import CacheCorruptionWarning
    from tolk_core.frontend.tensor import Tensor
    warnings.simplefilter("always", CacheCorruptionWarning)
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=sys.argv[1])
    print(((a * 3 + 1).relu().sum(1)).numpy().tolist())
""")
_EXPECTED = (np.maximum(np.arange(12, dtype=np.float32).reshape(3, 4) * 3 + 1, 0).sum(1)).tolist()


def _run(device: str, cache) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOLK_CACHE_DIR": str(cache)}
    env.pop("TOLK_DISABLE_COMPILER_CACHE", None)
    return subprocess.run([sys.executable, "-c", _SCRIPT, device], env=env, capture_output=True, text=True,
                          timeout=240)


def _entries(cache, kind: str) -> list:
    """The entry files of one cache (`compile` or `source`), lock files and temporaries left out."""
    root = cache / kind
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix not in (".lock", ".tmp")) \
        if root.exists() else []


@pytest.mark.parametrize(("kind", "damage"), [("compile", "truncate"), ("compile", "garbage"),
                                               ("source", "truncate"), ("identity", "garbage"),
                                               ("entry_points", "truncate")])
def test_a_damaged_entry_warns_is_rebuilt_and_the_answer_is_right(device, tmp_path, kind, damage):
    cache = tmp_path / "cache"
    first = _run(device, cache)
    assert first.returncode == 0, first.stderr
    assert ast.literal_eval(first.stdout) == _EXPECTED and "CacheCorruptionWarning" not in first.stderr
    entries = _entries(cache, kind)
    if kind == "identity" and device == "OPENCL":
        assert not entries
        pytest.skip("the OpenCL compiler's identity is read from the driver, not stored on disk")
    assert entries, f"no {kind} entry was written"
    for p in entries:
        data = p.read_bytes()
        p.write_bytes(data[:len(data) // 2] if damage == "truncate" else os.urandom(len(data)))

    second = _run(device, cache)
    assert second.returncode == 0, second.stderr  # a crash in the program loader shows as -11 (SIGSEGV)
    assert ast.literal_eval(second.stdout) == _EXPECTED
    for p in entries:
        assert "CacheCorruptionWarning" in second.stderr and str(p) in second.stderr, second.stderr
        assert cache_file.read_entry(p, kind) is not None  # rebuilt whole

    third = _run(device, cache)
    assert third.returncode == 0 and ast.literal_eval(third.stdout) == _EXPECTED
    assert "CacheCorruptionWarning" not in third.stderr, third.stderr
