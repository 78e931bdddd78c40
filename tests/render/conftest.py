"""The example plugin's renderer, imported from its source tree (examples/tolk_example_device) unmodified."""
from __future__ import annotations

import sys

import pytest

from tests.conformance.helpers import EXAMPLE


@pytest.fixture
def example_renderer(monkeypatch):
    """The class `tolk_example_device.renderer.ExampleRenderer`; its modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from tolk_example_device.renderer import ExampleRenderer
    yield ExampleRenderer
    for name in [m for m in sys.modules if m == "tolk_example_device" or m.startswith("tolk_example_device.")]:
        del sys.modules[name]
