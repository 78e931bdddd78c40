"""Allocations a device cannot hold fail with OutOfMemoryError (a MemoryError) naming the size, the device and the
limit, before anything compiles; before, PoCL aborted the whole process (`pocl_create_migration_commands:
Assertion 'p->mem_ptr != NULL'`). The device cases run in a subprocess, so a regression cannot kill pytest."""
from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

import pytest

from tolk_core.errors import OutOfMemoryError, TolkError
from tolk_core.runtime import Allocator

pytestmark = pytest.mark.timeout(300)


class _Fake(Allocator):
    """Refuses sizes past `limit`; `_alloc` raises MemoryError for sizes in `fails`."""

    def __init__(self, limit: int, fails: set[int] = frozenset()):
        super().__init__()
        self.limit, self.fails, self.asked, self.device_name = limit, fails, [], "FAKE:3"

    def limits(self, nbytes):
        return [(self.limit, "the fake's memory")]

    def _alloc(self, nbytes):
        self.asked.append(nbytes)
        if nbytes in self.fails:
            raise MemoryError("no room")
        return bytearray(nbytes)


def test_a_size_past_a_limit_is_refused_before_the_backend_is_asked():
    a = _Fake(limit=100)
    assert len(a.alloc(100)) == 100
    with pytest.raises(OutOfMemoryError) as e:
        a.alloc(101)
    assert isinstance(e.value, MemoryError) and isinstance(e.value, TolkError)
    assert "101 bytes" in str(e.value) and "FAKE:3" in str(e.value) and "the fake's memory, 100 bytes" in str(e.value)
    assert a.asked == [100]


def test_a_failed_allocation_frees_the_cache_retries_and_then_raises_the_named_error():
    a = _Fake(limit=1 << 20, fails={64})
    h = a.alloc(32)
    a.free(h, 32)
    assert a.cached_bytes == 32
    with pytest.raises(OutOfMemoryError, match=r"cannot allocate 64 bytes on FAKE:3: the allocation failed \(no room"):
        a.alloc(64)
    assert a.cached_bytes == 0 and a.asked == [32, 64, 64]  # the cache was released before the retry


_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from tolk_core.counters import GlobalCounters
    from tolk_core.errors import OutOfMemoryError
    from tolk_core.frontend.tensor import Tensor
    device, n = sys.argv[1], int(sys.argv[2])
    small = (Tensor(np.arange(4, dtype=np.float32), device=device) * 2).numpy().tolist()
    compiled = GlobalCounters.kernels_compiled
    try:
        (Tensor.empty(n, device=device) + 1).realize()
        print("NO ERROR")
    except OutOfMemoryError as e:
        assert isinstance(e, MemoryError)
        print("OOM", GlobalCounters.kernels_compiled - compiled, small)
        print(e)
""")


def _run(device: str, n: int, address_space: int | None = None) -> subprocess.CompletedProcess:
    def limit():  # runs in the child before it starts Python
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    return subprocess.run([sys.executable, "-c", _SCRIPT, device, str(n)], capture_output=True, text=True,
                          timeout=240, preexec_fn=limit if address_space else None)


def _assert_refused(proc: subprocess.CompletedProcess, device: str, nbytes: int, limit_text: str) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"  # -6: an abort in the driver
    head, _, message = proc.stdout.partition("\n")
    assert head == "OOM 0 [0.0, 2.0, 4.0, 6.0]", proc.stdout  # nothing compiled; the small tensor was right
    assert f"{nbytes} bytes" in message and f"on {device}" in message and limit_text in message, message


def test_a_size_past_the_device_or_host_memory_is_refused(device):
    n = 2 ** 40  # 4 TiB of float32: past any device's largest allocation and this host's memory
    want = "CL_DEVICE_MAX_MEM_ALLOC_SIZE" if device == "OPENCL" else "the host's available memory"
    _assert_refused(_run(device, n), "OPENCL:0" if device == "OPENCL" else device, 4 * n, want)


def test_a_size_past_the_address_space_limit_is_refused(device):
    # 2 GiB under a 3 GB address-space limit (ulimit -v): PoCL used to abort on the buffer's first use
    n = 2 ** 29
    proc = _run(device, n, address_space=3 * 10 ** 9)
    _assert_refused(proc, "OPENCL:0" if device == "OPENCL" else device, 4 * n, "ulimit -v")
