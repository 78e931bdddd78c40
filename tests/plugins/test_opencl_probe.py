"""tolk-opencl's probe lists devices through the ICD loader with ctypes: the same devices as pyopencl, in the
same order, without importing pyopencl or numpy (docs/plugins.md, section 7: probes stay cheap)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import has_opencl

pytestmark = pytest.mark.skipif(not has_opencl(), reason="no OpenCL platform here: nothing to list")


def test_enumeration_matches_pyopencl():
    import pyopencl as cl
    from tolk_opencl import enumerate as cl_enum
    want = [(d.platform.name, d.name, bool(d.type & cl.device_type.GPU))
            for p in cl.get_platforms() for d in p.get_devices()]
    assert [(f.platform, f.name, f.is_gpu) for f in cl_enum.devices()] == want


def test_probe_imports_neither_pyopencl_nor_numpy():
    code = ("import json, sys, time; from tolk_opencl.plugin import probe; t0 = time.perf_counter(); a = probe(); "
            "print(json.dumps([a.ok, a.device_count, time.perf_counter() - t0, "
            "[m for m in ('pyopencl', 'numpy') if m in sys.modules]]))")
    ok, count, seconds, heavy = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                          text=True, check=True).stdout)
    assert ok and count >= 1 and heavy == []
    assert seconds < 1.0  # the driver's start-up only (about 50-70 ms with PoCL here)
