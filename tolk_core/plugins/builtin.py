"""The built-in PYTHON reference backend: registered by core itself, never gated, always available.

It is listed like any plugin (provider ``tolk-core``, entry point ``python``) but is not an entry point: the
allow- and deny-lists do not apply to it, so ``TOLK_PLUGINS=`` (no plugins) still leaves a working Tolk.
Its priority is the lowest, so it is the default only when no other device is available. Core also ships the
reference collectives provider TCP (loopback or LAN sockets, no dependencies; tolk_core/collectives), likewise
lowest in priority and never gated.
"""
from __future__ import annotations

from tolk_core.plugins.hookspecs import hookimpl
from tolk_core.plugins.specs import BackendSpec, Capabilities, CollectiveSpec, RendererSpec

NAME = "PYTHON"
ENTRY_POINT = "python"
PRIORITY = -100


@hookimpl
def tolk_backends():
    yield BackendSpec(name=NAME, device="tolk_core.runtime.python:PythonDevice", probe=None, priority=PRIORITY,
                      indexed=False, capabilities=Capabilities(timing=True, float64=True, half=True),
                      docs_url="docs/plugins.md")


@hookimpl
def tolk_renderers():
    yield RendererSpec(device=NAME, name="Python", renderer="tolk_core.render.python:PythonRenderer",
                       compiler="tolk_core.runtime.python:PythonCompiler")


COLLECTIVES_NAME = "TCP"


@hookimpl
def tolk_collectives():
    yield CollectiveSpec(name=COLLECTIVES_NAME, group="tolk_core.collectives.tcp:TcpGroup.join", probe=None,
                         priority=PRIORITY, persistent=True, launcher="tolk_core.collectives.launch (TOLK_RANK, "
                         "TOLK_WORLD_SIZE, TOLK_MASTER_ADDR, TOLK_MASTER_PORT)",
                         env_vars=("TOLK_RANK", "TOLK_WORLD_SIZE", "TOLK_MASTER_ADDR", "TOLK_MASTER_PORT"))
