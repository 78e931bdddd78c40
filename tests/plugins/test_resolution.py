"""Device selection: argument > TOLK_DEVICE > project file > user file > plugin priority; demand vs preference."""
from __future__ import annotations

import types

import pytest

from tolk_core import config
from tolk_core.errors import ConfigError, DeviceUnavailableError, UnknownDeviceError
from tolk_core.plugins import Availability, BackendSpec, Device, hookimpl, register
from tolk_core.runtime import Allocator, CompiledDevice, Compiler, Program


class FakeAllocator(Allocator):
    def _alloc(self, nbytes):
        return bytearray(nbytes)

    def copyin(self, handle, src):
        handle[:] = src

    def copyout(self, dest, handle):
        dest[:] = handle


class FakeCompiler(Compiler):
    def compile(self, src):
        return src.encode()


class FakeProgram(Program):
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
        return None


class FakeDevice(CompiledDevice):
    def __init__(self, name):
        super().__init__(name, FakeAllocator(), FakeCompiler(), FakeProgram)


def fake_backends():
    mod = types.ModuleType("fakes")
    mod.tolk_backends = hookimpl(lambda: [
        BackendSpec("ALPHA", FakeDevice, probe=lambda: Availability(True, "ok", 2), priority=50),
        BackendSpec("BETA", FakeDevice, priority=1),
        BackendSpec("DOWN", FakeDevice, probe=lambda: Availability(False, "no down driver", 0, hint="install down"),
                    priority=99),
    ])
    return mod


@pytest.fixture
def world(tolk_env, tmp_path):
    register(fake_backends(), name="fakes")
    user = tmp_path / "xdg" / "tolk" / "config.toml"
    user.parent.mkdir(parents=True)
    return types.SimpleNamespace(project=tolk_env / "tolk.toml", user=user)


def put(path, device):
    path.write_text(f'device = "{device}"\n')
    config.reset()


def test_level5_plugin_priority_skips_unavailable(world):
    res = Device.resolve()
    assert (res.device, res.origin) == ("ALPHA:0", "plugin priority (ALPHA=50)")
    assert Device.DEFAULT == "ALPHA:0"


def test_level4_user_file(world):
    put(world.user, "beta")
    res = Device.resolve()
    assert res.device == "BETA:0" and res.origin == f"user file {world.user} [device]"


def test_level3_project_file_beats_user_file(world):
    put(world.user, "BETA")
    put(world.project, "ALPHA:1")
    res = Device.resolve()
    assert res.device == "ALPHA:1" and res.origin.startswith("project file") and str(world.project) in res.origin


def test_level2_environment_beats_files(world, monkeypatch):
    put(world.project, "ALPHA")
    monkeypatch.setenv("TOLK_DEVICE", "beta")
    assert (Device.DEFAULT, Device.resolve().origin) == ("BETA:0", "environment TOLK_DEVICE")


def test_level1_argument_beats_environment(world, monkeypatch):
    monkeypatch.setenv("TOLK_DEVICE", "BETA")
    assert Device.resolve("alpha:1") == type(Device.resolve("alpha:1"))("ALPHA:1", "argument")
    assert Device["alpha:1"].name == "ALPHA:1"


def test_preference_for_unavailable_device_is_skipped_and_recorded(world):
    put(world.project, "DOWN")
    put(world.user, "BETA")
    res = Device.resolve()
    assert res.device == "BETA:0" and res.origin.startswith("user file")
    assert len(res.notes) == 1 and "DOWN:0 skipped, unavailable: no down driver" in res.notes[0]
    assert str(world.project) in res.notes[0]


def test_demand_for_unavailable_device_raises_naming_plugin_reason_fix(world, monkeypatch):
    monkeypatch.setenv("TOLK_DEVICE", "DOWN")
    with pytest.raises(DeviceUnavailableError) as e:
        _ = Device.DEFAULT
    msg = str(e.value)
    assert "'DOWN'" in msg and "entry point 'fakes'" in msg and "no down driver" in msg and "Fix: install down" in msg
    with pytest.raises(DeviceUnavailableError, match="no down driver"):
        Device["down"]


def test_environment_list_means_first_available(world, monkeypatch):
    monkeypatch.setenv("TOLK_DEVICE", "DOWN,BETA,ALPHA")
    res = Device.resolve()
    assert res.device == "BETA:0" and "DOWN skipped" in res.notes[0]
    monkeypatch.setenv("TOLK_DEVICE", "DOWN,NOPE")
    with pytest.raises(DeviceUnavailableError) as e:
        Device.resolve()
    assert "none of the devices in environment TOLK_DEVICE (DOWN,NOPE)" in str(e.value)
    assert "no down driver" in str(e.value) and "unknown device 'NOPE'" in str(e.value)


def test_unknown_device_suggests_close_names_and_lists_unavailable(world):
    with pytest.raises(UnknownDeviceError) as e:
        Device["ALPA"]
    msg = str(e.value)
    assert "unknown device 'ALPA'" in msg and "did you mean 'ALPHA'" in msg
    assert "Installed but unavailable: " in msg and "DOWN (unavailable: no down driver)" in msg
    assert "ALPHA" in msg.split("Available devices:")[1]


def test_unknown_device_in_a_file_is_a_config_error_naming_file_and_key(world):
    put(world.project, "ALHPA")
    with pytest.raises(ConfigError) as e:
        Device.resolve()
    assert str(world.project) in str(e.value) and "[device]" in str(e.value) and "did you mean 'ALPHA'" in str(e.value)


def test_canonical_names_and_one_open_device_per_name(world):
    assert Device.canonicalize("alpha") == "ALPHA:0" and Device.canonicalize("CPU") == "CPU"
    assert Device["ALPHA"] is Device["alpha:0"]
    assert Device["ALPHA:1"] is not Device["ALPHA:0"]
    with pytest.raises(UnknownDeviceError, match="single device"):
        Device.canonicalize("CPU:1")
    with pytest.raises(UnknownDeviceError, match="bad device string"):
        Device.canonicalize("ALPHA:x")
    with pytest.raises(DeviceUnavailableError, match="index 5 out of range: ALPHA has 2 device"):
        Device["ALPHA:5"]


def test_with_every_plugin_disabled_the_reference_device_is_default(tolk_env, monkeypatch):
    monkeypatch.setenv("TOLK_DISABLE_PLUGINS", "cpu,opencl,cuda")
    assert Device.DEFAULT == "PYTHON"


def test_renderer_and_compiler_for_an_unavailable_device(world):
    from tolk_core.errors import PluginError
    from tolk_core.plugins import RendererSpec

    class R:
        def __init__(self, device):
            self.device = device
    mod = types.ModuleType("r")
    mod.tolk_renderers = hookimpl(lambda: [RendererSpec("DOWN", "DR", renderer=R, compiler=Compiler)])
    register(mod, name="r")
    assert Device.renderer_for("down").device is None
    assert type(Device.compiler_for("DOWN")) is Compiler
    with pytest.raises(PluginError, match="no renderer is registered for ALPHA"):
        Device.renderer_for("ALPHA")
