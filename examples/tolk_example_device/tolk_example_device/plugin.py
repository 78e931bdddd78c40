"""Entry point: hook implementations only. Import-light: heavy objects are named by "module:attr" strings."""
from __future__ import annotations

import os
import shutil

from tolk_core.plugins import Availability, BackendSpec, Capabilities, GraphSpec, RendererSpec, hookimpl

CC_VAR = "TOLK_EXAMPLE_CC"


def compiler_name() -> str:
    return os.environ.get(CC_VAR, "cc")


def probe() -> Availability:
    """Cheap and never raises: available when the C compiler is on PATH."""
    cc = compiler_name()
    if shutil.which(cc) is None:
        return Availability(False, f"C compiler {cc!r} not found", 0, hint=f"install gcc or set {CC_VAR}")
    return Availability(True, f"host memory, C via {cc}", 1)


@hookimpl
def tolk_backends():
    yield BackendSpec(name="EXAMPLE", device="tolk_example_device.runtime:ExampleDevice",
                      probe="tolk_example_device.plugin:probe", priority=1, indexed=False,
                      capabilities=Capabilities(timing=True, float64=True), env_vars=(CC_VAR,),
                      install_hint=f"install gcc or set {CC_VAR}")


@hookimpl
def tolk_renderers():
    yield RendererSpec(device="EXAMPLE", name="ExampleC", renderer="tolk_example_device.renderer:ExampleRenderer",
                       compiler="tolk_example_device.runtime:ExampleCompiler")


@hookimpl
def tolk_graphs():
    yield GraphSpec(device="EXAMPLE", graph="tolk_example_device.runtime:ExampleGraph")
