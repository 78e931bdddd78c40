"""CompiledDevice: what a plugin's device class derives from."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tolk_core.errors import PluginError
from tolk_core.runtime.allocator import Allocator
from tolk_core.runtime.compiler import Compiler
from tolk_core.runtime.program import Graph, Program

if TYPE_CHECKING:
    from tolk_core.plugins.specs import GraphSpec, RendererSpec


class CompiledDevice:
    """An opened device: ``name`` (canonical, e.g. ``CPU``, ``OPENCL:0``), ``allocator``, ``compiler``,
    ``runtime`` (its Program class), ``renderer`` (created lazily from the registry's renderer spec, or None)
    and ``graph`` (a Graph class, or None: no batching).

    Plugins subclass it with ``__init__(self, name)`` and call ``super().__init__(name, allocator, compiler,
    runtime)``. The registry attaches renderer and graph specs after construction.

    Lifecycle (docs/plugins.md, section 7): opened -> (lost) -> closed. A device whose context or worker died
    raises ``self.lost_error(reason)`` (a DeviceLostError, remembering the reason) or reports it through
    ``lost``; the registry then closes it and opens a new one on the next ``Device[name]``. ``close()`` releases
    what the device holds; the registry calls it once, on a lost device, so it must not raise there.
    """

    graph_surface: Mapping[str, str] = MappingProxyType({})
    """What a Graph from another distribution may rely on (docs/plugins.md, section 6), attribute -> meaning, e.g.
    ``{"Program.fxn": "the kernel's ctypes function"}``; anything not listed may change in any release."""

    def __init__(self, name: str, allocator: Allocator, compiler: Compiler, runtime: type[Program],
                 graph: type[Graph] | None = None):
        self.name, self.allocator, self.compiler, self.runtime = name, allocator, compiler, runtime
        allocator.device_name = name  # named in its out-of-memory errors
        self._graph = graph
        self._graph_spec: GraphSpec | None = None
        self._renderer_spec: RendererSpec | None = None
        self._renderer: Any = None
        self._lost: str | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def attach(self, renderer_spec: RendererSpec | None, graph_spec: GraphSpec | None) -> None:
        """Called by the registry: the default renderer spec and the chosen Graph provider for this device."""
        self._renderer_spec, self._graph_spec = renderer_spec, graph_spec

    @property
    def renderer(self) -> Any:
        """The device's renderer, constructed on first access as ``RendererClass(self)``; None if none."""
        if self._renderer is None and self._renderer_spec is not None:
            from tolk_core.plugins.specs import resolve_ref
            try:
                self._renderer = resolve_ref(self._renderer_spec.renderer)(self)
            except PluginError:
                raise
            except Exception as e:
                raise PluginError(f"renderer {self._renderer_spec.name} for {self.name} failed to initialize: "
                                  f"{type(e).__name__}: {e}") from e
        return self._renderer

    @property
    def graph_takes_copies(self) -> bool:
        """Whether this device's Graph takes copies into the device in its batches (`GraphSpec.supports_copy`,
        docs/plugins.md); False without a Graph."""
        return self._graph_spec is not None and self._graph_spec.supports_copy

    @property
    def graph(self) -> type[Graph] | None:
        """The Graph class to batch launches with, or None when no plugin supplies one."""
        if self._graph_spec is not None:
            from tolk_core.plugins.specs import resolve_ref
            return resolve_ref(self._graph_spec.graph)
        return self._graph

    @property
    def lost(self) -> str | None:
        """Why the device can no longer run anything (its worker died, its context was reset), or None while it
        works. A subclass may override it to check its worker; the base reports what `lost_error` recorded. The
        registry asks it on every ``Device[name]``, so it must be cheap (a poll, never a round trip)."""
        return self._lost

    def lost_error(self, reason: str) -> Exception:
        """Record that the device is lost and return the DeviceLostError to raise (``raise self.lost_error(...)``)."""
        from tolk_core.errors import DeviceLostError
        self._lost = reason
        return DeviceLostError(f"device {self.name} is lost: {reason}. Its buffers are gone; the next "
                               f"Device[{self.name.partition(':')[0]!r}] opens it again")

    def close(self) -> None:
        """Release the device's resources (contexts, workers, cached memory). Called once, by the registry, when
        it drops a lost device, before it opens a new one; the base frees the allocator's cache."""
        self.allocator.free_cache()

    def synchronize(self) -> None:
        """Block until all queued work on this device finished."""

    def self_test(self) -> str:
        """Run a hand-written smoke kernel and check its result; return a short description, raise on failure."""
        raise NotImplementedError(f"{type(self).__name__} has no self-test")
