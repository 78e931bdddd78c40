"""The device lifecycle: a device whose worker process dies is `lost`, raises DeviceLostError, is closed, and the
next Device[name] opens a new one (docs/plugins.md, section 7)."""
from __future__ import annotations

import subprocess
import sys
import types

import pytest

from tolk_core.errors import DeviceLostError
from tolk_core.plugins import BackendSpec, Device, hookimpl, register
from tolk_core.runtime import Allocator, CompiledDevice, Compiler, Program


class WorkerAllocator(Allocator):
    """Host memory, but every copy first asks whether the worker that owns the device is still there."""

    def __init__(self, device):
        super().__init__()
        self.device = device

    def _alloc(self, nbytes):
        self.device.ensure_alive()
        return bytearray(nbytes)

    def copyin(self, handle, src):
        self.device.ensure_alive()
        handle[:] = src

    def copyout(self, dest, handle):
        self.device.ensure_alive()
        dest[:] = handle


class NoCompiler(Compiler):
    def compile(self, src):
        return src.encode()


class WorkerProgram(Program):
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
        self.device.ensure_alive()


class WorkerDevice(CompiledDevice):
    """A remote-style device: a worker subprocess stands for its context."""
    closed: list[str] = []

    def __init__(self, name):
        super().__init__(name, WorkerAllocator(self), NoCompiler(), WorkerProgram)
        self.worker = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)

    @property
    def lost(self):
        code = self.worker.poll()
        return None if code is None else f"its worker process exited with status {code}"

    def ensure_alive(self):
        if (why := self.lost) is not None:
            raise self.lost_error(why)

    def close(self):
        super().close()
        self.worker.wait(timeout=10)
        type(self).closed.append(self.name)


def test_lost_device_reports_lost_raises_and_reopens(tolk_env):
    mod = types.ModuleType("worker")
    mod.tolk_backends = hookimpl(lambda: [BackendSpec("WORKER", WorkerDevice, indexed=False)])
    register(mod, name="worker")
    first = Device["WORKER"]
    h = first.allocator.alloc(4)
    assert Device.state("WORKER") == ("available", "no probe (always available)")
    first.worker.kill()
    first.worker.wait(timeout=10)
    state, why = Device.state("WORKER")
    assert state == "lost" and why == "its worker process exited with status -9"
    from tolk_core.cli import devices_data
    row = next(b for b in devices_data(Device.registry)["backends"] if b["name"] == "WORKER")
    assert (row["state"], row["reason"]) == ("lost", why)  # what `tolk devices` shows in this process
    with pytest.raises(DeviceLostError, match=r"device WORKER is lost: its worker process exited with status -9\. "
                                              r"Its buffers are gone; the next Device\['WORKER'\] opens it again"):
        first.allocator.copyin(h, memoryview(b"abcd"))
    second = Device["WORKER"]
    assert second is not first and WorkerDevice.closed == ["WORKER"]
    assert Device.state("WORKER")[0] == "available" and Device["WORKER"] is second
    h2 = second.allocator.alloc(4)
    second.allocator.copyin(h2, memoryview(b"wxyz"))
    out = bytearray(4)
    second.allocator.copyout(memoryview(out), h2)
    assert out == b"wxyz"
    second.worker.stdin.close()
    second.worker.wait(timeout=10)


def test_a_device_asked_again_follows_the_registry(tolk_env):
    """`Device[name]` answers a name it answered before without resolving it again, but only under the same
    registry: once the backend's plugin is unregistered, the name is unknown even though the device was opened."""
    from tolk_core.errors import UnknownDeviceError
    from tolk_core.plugins import unregister
    mod = types.ModuleType("worker")
    mod.tolk_backends = hookimpl(lambda: [BackendSpec("WORKER", WorkerDevice, indexed=False)])
    register(mod, name="worker")
    first = Device["WORKER"]
    try:
        assert Device["WORKER"] is first and Device["WORKER"] is first
        unregister("worker")
        with pytest.raises(UnknownDeviceError, match="WORKER"):
            Device["WORKER"]
    finally:
        first.worker.stdin.close()
        first.worker.wait(timeout=10)
