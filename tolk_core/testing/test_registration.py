"""Tier registration: the entry point imports light and fast, the specs are valid, the probe never raises."""
from __future__ import annotations

import pytest

from tolk_core.testing import checks

pytestmark = pytest.mark.registration


@pytest.mark.smoke
def test_plugin_loaded_and_backend_registered(tolk_record):
    checks.check_registered(tolk_record)


def test_entry_point_is_import_light(tolk_record):
    checks.check_import_light(tolk_record)


@pytest.mark.smoke
def test_specs_valid(tolk_record):
    checks.check_specs(tolk_record)


def test_renderer_registered(tolk_record):
    checks.check_renderer_registered(tolk_record)


@pytest.mark.smoke
def test_probe_never_raises_and_gives_a_reason(tolk_record):
    checks.check_probe(tolk_record)


def test_available_device_opens(tolk_record):
    """An available backend's device class constructs and carries the four contract objects."""
    from tolk_core.runtime import Allocator, Compiler, Program
    if tolk_record.state != "available":
        pytest.skip(f"{tolk_record.name} is {tolk_record.state}: {tolk_record.reason}")
    dev = checks.open_device(tolk_record)
    checks.require(dev.name.partition(":")[0] == tolk_record.name, "CompiledDevice",
                   f"opened device is named {dev.name!r}, expected {tolk_record.name}[:index]")
    checks.require(isinstance(dev.allocator, Allocator), "CompiledDevice.allocator",
                   f"expected an Allocator, got {type(dev.allocator).__name__}")
    checks.require(isinstance(dev.compiler, Compiler), "CompiledDevice.compiler",
                   f"expected a Compiler, got {type(dev.compiler).__name__}")
    checks.require(isinstance(dev.runtime, type) and issubclass(dev.runtime, Program), "CompiledDevice.runtime",
                   f"expected a Program subclass, got {dev.runtime!r}")
