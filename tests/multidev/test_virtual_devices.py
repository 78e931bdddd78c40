"""Virtual CPU devices: TOLK_CPU_DEVICES=n offers CPU:0 .. CPU:n-1 ("CPU" is CPU:0), each a device of its own
with its share of the cores; copies between them go through the host."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import Tensor
from tolk_core.counters import GlobalCounters
from tolk_core.errors import DeviceUnavailableError, UnknownDeviceError
from tolk_core.plugins import Device


def test_devices_listed(cpus4):
    rec = Device.registry.get("CPU")
    assert rec is not None and rec.device_count == 4
    assert [Device.check(f"cpu:{i}") for i in range(4)] == list(cpus4)
    assert Device.canonicalize("CPU:0") == Device.canonicalize("CPU") == "CPU"


def test_index_past_the_devices_is_unavailable(cpus4):
    with pytest.raises(DeviceUnavailableError, match="index 4 out of range: CPU has 4 device"):
        Device.check("CPU:4")


def test_single_cpu_still_refuses_an_index():
    with pytest.raises(UnknownDeviceError, match="single device"):
        Device.canonicalize("CPU:1")


def test_threads_are_the_cores_shared(cpus4):
    import os
    dev = Device["CPU:1"]
    assert dev.threads == max(1, (os.cpu_count() or 1) // 4)


def test_buffers_on_cpu1_compute(cpus4):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(x, device="CPU:1")
    out = (t * 2 + 1).sum(axis=1)
    assert out.device == "CPU:1"
    np.testing.assert_allclose(out.numpy(), (x * 2 + 1).sum(axis=1))


def test_copy_cpu0_to_cpu2(cpus4):
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    moved = (Tensor(x, device="CPU:0") + 1).to("CPU:2")
    assert moved.device == "CPU:2"
    np.testing.assert_array_equal((moved * 3).numpy(), (x + 1) * 3)


def test_devices_share_compiled_programs(cpus4):
    x = np.arange(16, dtype=np.float32)
    ts = [Tensor(x, device=d) for d in cpus4]
    for t in ts[:1]:
        (t * 3 - 7).realize()
    before = GlobalCounters.snapshot()
    outs = [(t * 3 - 7).numpy() for t in ts[1:]]
    after = GlobalCounters.snapshot()
    for o in outs:
        np.testing.assert_array_equal(o, x * 3 - 7)
    assert after["kernels_compiled"] == before["kernels_compiled"]
    assert after["programs_shared"] - before["programs_shared"] == 3


def test_copies_between_virtual_devices_are_direct(cpus4):
    x = np.arange(1000, dtype=np.int32)
    before = GlobalCounters.copies_direct
    out = Tensor(x, device="CPU:3").to("CPU:1").numpy()
    np.testing.assert_array_equal(out, x)
    assert GlobalCounters.copies_direct == before + 1


@pytest.fixture
def device_threads():
    """Devices launch from their own threads whatever the load of this machine (DEVICE_THREADS=1)."""
    from tolk_core import config
    with config.override(DEVICE_THREADS=1):
        yield


def test_devices_compute_at_the_same_time(cpus4, device_threads):
    # each device's kernels are launched from its own thread: the two devices' runs overlap in time (the
    # runtime's spans; each run is long enough that the other thread has started, whatever the machine's load)
    from tolk_core.engine import concurrent
    devs = cpus4[:2]
    x = np.random.default_rng(1).random((2, 1 << 21)).astype(np.float32)
    t = Tensor(x).shard(devs, axis=0).realize()
    want = np.exp(np.sin(x) * np.cos(x) + np.sqrt(x))
    before = GlobalCounters.concurrent_runs
    out = (t.sin() * t.cos() + t.sqrt()).exp().realize()
    spans = concurrent.spans()
    assert GlobalCounters.concurrent_runs == before + 1
    assert sorted(d for d, _, _ in spans) == sorted(devs)
    assert max(s for _, s, _ in spans) < min(e for _, _, e in spans)  # each run started before the other ended
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
    # a jitted replay too: each device's steps from its own thread
    import tolk_core
    jitted = tolk_core.jit(lambda v: (v.sin() * v.cos() + v.sqrt()).exp().realize())
    for _ in range(3):
        out = jitted(t)
        spans = concurrent.spans()
        assert max(s for _, s, _ in spans) < min(e for _, _, e in spans)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)


def test_device_threads_0_runs_devices_one_after_another(cpus4):
    from tolk_core import config
    from tolk_core.engine import concurrent
    x = np.random.default_rng(2).random((4, 1 << 12)).astype(np.float32)
    t = Tensor(x).shard(cpus4, axis=0).realize()
    before = GlobalCounters.concurrent_runs
    with config.override(DEVICE_THREADS=0):
        out = (t * 3 + 1).realize()
        assert not concurrent.threads_pay(4)
    assert GlobalCounters.concurrent_runs == before
    np.testing.assert_allclose(out.numpy(), x * 3 + 1, rtol=1e-6)
