"""Plugins: hookspecs, spec dataclasses, the entry-point loader, the registry snapshot and device resolution.

A device plugin needs only what this package exports (plus ``tolk_core.runtime`` for the contracts it
implements). See docs/plugins.md.
"""
from tolk_core.plugins.device import Device, DeviceFace, Resolution
from tolk_core.plugins.hookspecs import hookimpl, hookspec
from tolk_core.plugins.registry import (
    GROUP,
    STATES,
    BackendRecord,
    CollectiveRecord,
    PluginRecord,
    PluginWarning,
    ProvidedSpec,
    Registry,
    build_registry,
    get_registry,
    refresh,
    register,
    reset,
    run_probe,
    unregister,
)
from tolk_core.plugins.specs import (
    API_VERSION,
    Availability,
    BackendSpec,
    Capabilities,
    CollectiveSpec,
    GraphSpec,
    RendererSpec,
    resolve_ref,
)

__all__ = [
    "API_VERSION", "GROUP", "STATES", "Availability", "BackendRecord", "BackendSpec", "Capabilities",
    "CollectiveRecord", "CollectiveSpec", "Device", "DeviceFace", "GraphSpec", "PluginRecord", "PluginWarning",
    "ProvidedSpec", "Registry", "RendererSpec", "Resolution",
    "build_registry", "get_registry", "hookimpl", "hookspec", "refresh", "register", "reset", "resolve_ref",
    "run_probe", "unregister",
]
