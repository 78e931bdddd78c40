"""Entry point of tolk-cpu: hook implementations only (import-light: no ctypes loading, no compiler calls)."""
from __future__ import annotations

import shutil

from tolk_core import config
from tolk_core.plugins import Availability, BackendSpec, Capabilities, GraphSpec, RendererSpec, hookimpl


def probe() -> Availability:
    """Available when the configured C compiler (config CC, default ``cc``) is on PATH."""
    cc = config.get("CC")
    if shutil.which(cc) is None:
        return Availability(False, f"C compiler {cc!r} not found", 0,
                            hint="install gcc (apt-get install gcc) or set CC in the tolk config / TOLK_CC")
    n = config.get("CPU_DEVICES")  # virtual devices CPU:0 .. CPU:n-1 (docs/multi-device.md)
    return Availability(True, f"C compiler {cc}" + (f", {n} virtual devices" if n > 1 else ""), n)


@hookimpl
def tolk_backends():
    yield BackendSpec(name="CPU", device="tolk_cpu.runtime:CPUDevice", probe="tolk_cpu.plugin:probe", priority=10,
                      indexed=False, capabilities=Capabilities(timing=True, float64=True, half=True),
                      install_hint="install gcc or set TOLK_CC")


@hookimpl
def tolk_renderers():
    yield RendererSpec(device="CPU", name="C", renderer="tolk_cpu.renderer:CRenderer",
                       compiler="tolk_cpu.runtime:CPUCompiler")


@hookimpl
def tolk_graphs():
    yield GraphSpec(device="CPU", graph="tolk_cpu.graph:CPUGraph")
