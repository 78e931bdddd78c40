"""What a plugin author reads when their plugin breaks a contract: each message names the plugin, the contract
and the fix (docs/plugins.md, sections 4 and 7)."""
from __future__ import annotations

import types

import numpy as np
import pytest

from tolk_core.errors import DeviceUnavailableError, PluginError, UnknownDeviceError
from tolk_core.plugins import Availability, BackendSpec, Device, PluginWarning, RendererSpec, hookimpl, register
from tolk_core.runtime import Allocator, CompiledDevice, Compiler, Program
from tolk_core.testing import checks
from tolk_core.testing.plugin import summary_line


class HostAllocator(Allocator):
    def _alloc(self, nbytes):
        return bytearray(nbytes)

    def copyin(self, handle, src):
        handle[:] = src

    def copyout(self, dest, handle):
        dest[:] = handle


class NoCopyout(Allocator):  # BUG: copyout missing
    def _alloc(self, nbytes):
        return bytearray(nbytes)

    def copyin(self, handle, src):
        handle[:] = src


class TextCompiler(Compiler):
    def compile(self, src):
        return src.encode()


class NoCall(Program):  # BUG: __call__ missing
    pass


class Runs(Program):
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
        return None


def device_class(allocator=HostAllocator, program=Runs, call_super=True):
    class SubDevice(CompiledDevice):
        def __init__(self, name):
            if call_super:
                super().__init__(name, allocator(), TextCompiler(), program)

        def self_test(self):
            raise NotImplementedError  # no message: the check must still say where
    return SubDevice


def plugin(name, backends=(), renderers=()):
    mod = types.ModuleType(name)
    mod.tolk_backends = hookimpl(lambda: list(backends))
    mod.tolk_renderers = hookimpl(lambda: list(renderers))
    return mod


def with_device(cls, renderer=True, probe=None):
    rs = [RendererSpec("SUB", "SubC", renderer="tolk_cpu.renderer:CRenderer")] if renderer else []
    register(plugin("subproc", [BackendSpec("SUB", cls, probe=probe, indexed=False)], rs), name="subproc")


@pytest.mark.parametrize("alloc, program, contract, missing", [
    (NoCopyout, Runs, "Allocator.copyout", "NoCopyout does not define copyout"),
    (HostAllocator, NoCall, "Program.__call__", "NoCall does not define __call__")])
def test_open_names_the_missing_method(tolk_env, alloc, program, contract, missing):
    with_device(device_class(alloc, program))
    with pytest.raises(PluginError) as e:
        Device["SUB"]
    msg = str(e.value)
    assert msg.startswith("device SUB (plugin <runtime>, entry point 'subproc'): ")
    assert f"contract {contract} broken: {missing}. Fix: define " in msg and e.value.contract == contract


def test_forgotten_super_init_is_named(tolk_env):
    with_device(device_class(call_super=False))
    with pytest.raises(PluginError, match=r"device SUB \(plugin <runtime>.*contract CompiledDevice.__init__ broken: "
                                          r"SubDevice.__init__ did not call super\(\).__init__. Fix: call super"):
        Device["SUB"]


def test_device_without_renderer_fails_check_and_programs_clearly(tolk_env):
    from tolk_core import Tensor
    with_device(device_class(), renderer=False)
    results = {c.name: c for c in checks.smoke("SUB")}
    assert results["check_generated_kernel"].ok is False
    detail = results["check_generated_kernel"].detail
    assert "contract tolk_renderers broken: no renderer is registered for SUB" in detail
    assert results["check_self_test"].ok is False
    assert results["check_self_test"].detail.endswith("NotImplementedError (raised in SubDevice.self_test)")
    with pytest.raises(PluginError, match=r"device SUB \(<runtime>.*\) has no renderer: .*contract tolk_renderers.*"
                                          r"Fix: yield RendererSpec\(device='SUB'"):
        (Tensor(np.ones(3, np.float32), device="SUB") + 1).numpy()


@pytest.mark.filterwarnings("ignore::tolk_core.plugins.PluginWarning")
def test_broken_plugins_device_demanded_by_name_says_broken_and_why(tolk_env):
    bad = types.ModuleType("subproc")

    @hookimpl
    def tolk_backends():
        raise OSError("libsubproc.so.1: cannot open shared object file")
    bad.tolk_backends = tolk_backends
    register(bad, name="subproc")
    with pytest.raises(UnknownDeviceError) as e:
        Device["SUBPROC"]
    msg = str(e.value)
    assert "'SUBPROC' is not registered because the plugin <runtime> (entry point 'subproc')" in msg
    assert "is broken: registration failed: OSError: libsubproc.so.1" in msg and "tolk devices -v" in msg
    assert "may need installing" not in msg


def test_probe_that_raised_gets_a_bug_hint_not_the_install_hint(tolk_env):
    def probe():
        raise OSError("libsubproc.so.1")
    register(plugin("subproc", [BackendSpec("SUB", device_class(), probe=probe, indexed=False,
                                            install_hint="pip install tolk-sub")]), name="subproc")
    with pytest.raises(DeviceUnavailableError) as e:
        Device["SUB"]
    assert "probe raised OSError: libsubproc.so.1" in str(e.value) and "bug in the plugin" in str(e.value)
    assert "pip install tolk-sub" not in str(e.value)


def test_skip_summary_keeps_each_reason_whole():
    msg = "SUB is unavailable: probe raised OSError: libsubproc.so.1: cannot open shared object file"
    graph = "SUB does not declare capability 'graph'"
    line = summary_line("SUB", [{"outcome": "skipped", "message": msg, "contract": None}] * 3 +
                        [{"outcome": "skipped", "message": graph, "contract": None}])
    assert line == f"tolk conformance SUB: 0 passed, 4 skipped ('{msg}': 3; no 'graph': 1), 0 xfailed, 0 failed"


def test_zero_devices_at_top_priority_leaves_the_default_working(tolk_env):
    from tolk_core import Tensor
    register(plugin("empty", [BackendSpec("EMPTY", device_class(), priority=1000,
                                          probe=lambda: Availability(True, "driver found", 0))]), name="empty")
    assert Device.DEFAULT == "CPU"
    rec = Device.registry.get("EMPTY")
    assert rec.state == "unavailable" and "device_count=0" in rec.reason
    np.testing.assert_array_equal((Tensor(np.arange(4, dtype=np.float32)) * 2).numpy(), [0, 2, 4, 6])


def test_broken_plugin_warning_names_the_fix(tolk_env):
    bad = types.ModuleType("bad")
    bad.tolk_backends = hookimpl(lambda: ["not a spec"])
    register(bad, name="bad")
    with pytest.warns(PluginWarning, match=r"unregister it with tolk_core.plugins.unregister\('bad'\)"):
        assert Device.registry.get("CPU") is not None
