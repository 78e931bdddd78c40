"""The frozen spec dataclasses a plugin's hooks return, and lazy "module:attr" references.

A *ref* is either a string ``"package.module:attr"`` (resolved on first use, so that a plugin's entry-point
module stays import-light) or the object itself (convenient for runtime registration in tests and notebooks).
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tolk_core.errors import PluginError

API_VERSION: tuple[int, int] = (1, 1)
"""The plugin API this tolk-core speaks (docs/plugins.md, section 11: compatibility policy). A spec whose major
differs is reported ``incompatible``; any minor of the same major loads. 1.1 added the device lifecycle
(``CompiledDevice.lost``, ``lost_error``, ``close``; DeviceLostError; the ``lost`` state). The
``tolk_collectives`` hook (CollectiveSpec) is an addition a 1.1 plugin may use or ignore: older plugins simply
do not implement it (docs/plugins.md, section 12)."""

Ref = str | Callable[..., Any] | type
NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def resolve_ref(ref: Ref) -> Any:
    """Import and return the object a ref names. Raises PluginError naming the ref on failure."""
    if not isinstance(ref, str):
        return ref
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise PluginError(f"bad reference {ref!r}: expected 'package.module:attr'")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # ImportError, OSError from a native library, AttributeError, ...
        raise PluginError(f"cannot load {ref!r}: {type(e).__name__}: {e}") from e
    return obj


def ref_name(ref: Ref | None) -> str:
    """A printable name for a ref (for tables and JSON)."""
    if ref is None:
        return ""
    if isinstance(ref, str):
        return ref
    return f"{getattr(ref, '__module__', '?')}:{getattr(ref, '__qualname__', repr(ref))}"


@dataclass(frozen=True)
class Availability:
    """What a probe answers. Probes are cheap, create no device context, and never raise.

    ok: usable here. reason: why not (or a short description when ok). device_count: how many devices
    (``NAME:0`` .. ``NAME:n-1``). hint: how to fix it. priority: overrides the spec's static priority (OpenCL
    ranks by device type). details: versions and the like, shown by ``tolk doctor``.
    """
    ok: bool
    reason: str = ""
    device_count: int = 1
    hint: str | None = None
    priority: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """Typed capability flags; conformance tests key on them, so each flag is a test contract."""
    timing: bool = False
    local_size: bool = False
    max_local_size: int = 0
    shared_memory: bool = False
    float64: bool = True
    half: bool = False
    extras: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendSpec:
    """Declares a device. Returned (one or many) by the ``tolk_backends`` hook.

    name: canonical upper-case name (``CPU``), unique across installed plugins.
    device: ref to the CompiledDevice subclass, constructed as ``cls(canonical_name)``.
    probe: ref to ``() -> Availability``; None means always available.
    priority: automatic ranking among available backends (higher wins; ties broken by name).
    indexed: canonical names carry an index (``OPENCL:0``); False for single-device backends (``CPU``).
    install_hint: the fix printed when a demanded device is unavailable and the probe gave no hint.
    """
    name: str
    device: Ref
    probe: Ref | None = None
    priority: int = 0
    api_version: tuple[int, int] = API_VERSION
    indexed: bool = True
    aliases: tuple[str, ...] = ()
    capabilities: Capabilities = field(default_factory=Capabilities)
    env_vars: tuple[str, ...] = ()
    install_hint: str = ""
    docs_url: str = ""


@dataclass(frozen=True)
class GraphSpec:
    """Supplies a Graph capability for a device (possibly from another distribution than the device).

    graph: ref to a ``Graph`` subclass. When several providers exist the highest priority wins (ties: by
    provider name). supports_copy: the Graph takes copies into its device in a batch (a ``Launch`` of a
    ``CopyProgram``, performed in order with the kernels); False (the default): a
    copy, and the collectives made of copies, close the batch (docs/plugins.md, docs/jit.md).
    """
    device: str
    graph: Ref
    priority: int = 0
    api_version: tuple[int, int] = API_VERSION
    supports_update: bool = True
    max_batch: int = 0
    supports_copy: bool = False


@dataclass(frozen=True)
class RendererSpec:
    """Supplies a renderer and the compiler turning its source into a binary, for a device.

    renderer: ref to a class constructed as ``cls(device)`` where device is the CompiledDevice or None.
    compiler: ref to a zero-argument Compiler factory usable while the device is unavailable (so a GPU
    plugin's kernels still compile in CI). The highest priority renderer is the device's default.
    """
    device: str
    name: str
    renderer: Ref
    compiler: Ref | None = None
    priority: int = 0
    api_version: tuple[int, int] = API_VERSION


COLLECTIVE_OPS: tuple[str, ...] = ("allreduce_sum", "allreduce_max", "allreduce_min", "allgather", "broadcast",
                                   "reduce_scatter", "barrier")
"""Every operation a collectives provider may offer (``reduce_scatter`` reduces with the ops allreduce offers)."""


@dataclass(frozen=True)
class CollectiveSpec:
    """Declares a collectives provider: an engine that combines arrays across the processes of one job.
    Returned (one or many) by the ``tolk_collectives`` hook (docs/plugins.md, section 12).

    name: canonical upper-case name (``MPI``), unique across installed plugins.
    group: ref to a factory ``(timeout: float) -> tolk_core.collectives.ProcessGroup`` that joins the job this
    process was launched into (rank and size come from the launcher: env vars, mpiexec).
    probe: ref to ``() -> Availability``; None means always available. It must not join a job.
    priority: automatic ranking among available providers (higher wins; ties broken by name).
    ops: the operations offered, a subset of COLLECTIVE_OPS. devices: the devices whose buffers it reads and
    writes directly (others go through the host via copyout/copyin). persistent: it offers
    ``allreduce_init`` (bound once, started and waited on each replay).
    launcher: how to start a job of N processes for it (shown by `tolk devices --json`).
    """
    name: str
    group: Ref
    probe: Ref | None = None
    priority: int = 0
    api_version: tuple[int, int] = API_VERSION
    ops: tuple[str, ...] = COLLECTIVE_OPS
    devices: tuple[str, ...] = ()
    persistent: bool = False
    launcher: str = ""
    env_vars: tuple[str, ...] = ()
    install_hint: str = ""
