"""The four registration hooks of the ``tolk`` pluggy project.

A plugin's entry-point module defines module-level functions with these names, decorated with
``tolk_core.plugins.hookimpl``, each returning an iterable of specs. Core calls every implementation (no
``firstresult``), so that it can detect two plugins claiming one name.
"""
from __future__ import annotations

from collections.abc import Iterable

import pluggy

from tolk_core.plugins.specs import BackendSpec, CollectiveSpec, GraphSpec, RendererSpec

PROJECT = "tolk"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class TolkHookSpecs:
    """Hook specifications; implementations take no arguments."""

    @hookspec
    def tolk_backends(self) -> Iterable[BackendSpec]:  # type: ignore[empty-body]  # a specification: pluggy calls the implementations, never this body
        """Declare devices."""

    @hookspec
    def tolk_graphs(self) -> Iterable[GraphSpec]:  # type: ignore[empty-body]  # a specification: pluggy calls the implementations, never this body
        """Supply a Graph capability for a device (batched replay of launches)."""

    @hookspec
    def tolk_renderers(self) -> Iterable[RendererSpec]:  # type: ignore[empty-body]  # a specification: pluggy calls the implementations, never this body
        """Supply a renderer and its compiler for a device."""

    @hookspec
    def tolk_collectives(self) -> Iterable[CollectiveSpec]:  # type: ignore[empty-body]  # a specification: pluggy calls the implementations, never this body
        """Supply a collectives provider (allreduce, allgather, ... across the processes of a job)."""
