"""The entry-point loader and the immutable registry snapshot.

Loading happens at the first registry use (never at ``import tolk_core``). Each entry point of the group
``tolk.backends`` is imported on its own; any failure becomes a recorded ``broken`` state with its traceback.
Every backend then gets exactly one state with a reason; a backend's probe runs when its state is first asked
for (naming a device probes that backend only; the default device, `tolk devices` and `available()` probe all):

  available     the probe said ok
  unavailable   the probe said why not (or raised, or timed out)
  incompatible  the spec targets another plugin-API major version (both versions named)
  disabled      deny-listed (TOLK_DISABLE_PLUGINS) or not allow-listed (TOLK_PLUGINS); plugin-level
  conflict      two providers claim the same device name (both listed)
  broken        import, hook or validation error (traceback kept), or an import past PLUGIN_IMPORT_TIMEOUT;
                plugin-level
  lost          (a device opened in this process, `Device.state`) its context or worker died; reopened on demand
"""
from __future__ import annotations

import difflib
import os
import threading
import traceback
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pluggy

from tolk_core import config
from tolk_core.errors import ConfigError, PluginError
from tolk_core.plugins import builtin, entry_points, guard
from tolk_core.plugins.hookspecs import PROJECT, TolkHookSpecs
from tolk_core.plugins.specs import (
    API_VERSION,
    NAME_RE,
    Availability,
    BackendSpec,
    CollectiveSpec,
    GraphSpec,
    RendererSpec,
    ref_name,
    resolve_ref,
)

GROUP = "tolk.backends"
_BUILTIN_IDS = frozenset({builtin.ENTRY_POINT, "tolk-core"})


class PluginWarning(UserWarning):
    """Emitted once per snapshot for each broken plugin (the rest of Tolk keeps working)."""

STATES = ("available", "unavailable", "incompatible", "disabled", "conflict", "broken", "lost")


@dataclass(frozen=True)
class PluginRecord:
    """One plugin: an entry point (or a runtime registration). state: loaded | disabled | broken."""
    name: str
    dist: str
    version: str
    value: str
    state: str
    reason: str = ""
    traceback: str = ""
    import_s: float = 0.0

    @property
    def provider(self) -> str:
        return f"{self.dist} {self.version}".strip()


@dataclass(frozen=True)
class ProvidedSpec:
    """A graph or renderer spec and the plugin that returned it."""
    spec: Any
    plugin: PluginRecord
    state: str = "ok"
    reason: str = ""


class _Status:
    """A backend's state, reason, hint and availability: fixed when known at load time (conflict,
    incompatible), else its probe's answer, asked once on first use (a process that names its device probes
    only that one). Thread-safe; the probe runs at most once per snapshot."""

    def __init__(self, state: str = "", reason: str = "", hint: str = "", probe: Any = None,
                 timeout: float = 0.0, install_hint: str = ""):
        self._fixed: tuple[str, str, str, Availability | None] | None = (state, reason, hint, None) if state else None
        self._probe, self._timeout, self._install_hint = probe, timeout, install_hint
        self._lock = threading.Lock()

    def get(self) -> tuple[str, str, str, Availability | None]:
        if self._fixed is None:
            with self._lock:
                if self._fixed is None:
                    a = run_probe(self._probe, self._timeout)
                    if a.ok and not (isinstance(a.device_count, int) and a.device_count >= 1):
                        a = Availability(False, f"the probe said ok with device_count={a.device_count!r}: there is "
                                         "no device to open", 0, hint="the probe must answer ok only with "
                                         "device_count >= 1 (else ok=False and the reason): a bug in the plugin")
                    self._fixed = (("available", a.reason, "", a) if a.ok else
                                   ("unavailable", a.reason or "probe said not available",
                                    a.hint or self._install_hint, a))
        return self._fixed


class _Probed:
    """The probe-backed facts of a record holding a `status` (_Status): its state, reason and hint."""
    status: _Status

    @property
    def state(self) -> str:
        return self.status.get()[0]

    @property
    def reason(self) -> str:
        return self.status.get()[1]

    @property
    def hint(self) -> str:
        return self.status.get()[2]


@dataclass(frozen=True)
class BackendRecord(_Probed):
    """One declared backend, its provider, its state and reason, and what other plugins attach to it.
    `state`, `reason`, `hint` and `availability` run the backend's probe on first access (see `_Status`)."""
    name: str
    spec: BackendSpec
    plugin: PluginRecord
    status: _Status = field(repr=False, compare=False)
    graph: ProvidedSpec | None = None
    renderers: tuple[ProvidedSpec, ...] = ()

    @property
    def availability(self) -> Availability | None:
        return self.status.get()[3]

    @property
    def priority(self) -> int:
        a = self.availability
        return a.priority if a is not None and a.priority is not None else self.spec.priority

    @property
    def device_count(self) -> int:
        return self.availability.device_count if self.availability is not None else 0

    @property
    def renderer(self) -> ProvidedSpec | None:
        return self.renderers[0] if self.renderers else None


@dataclass(frozen=True)
class CollectiveRecord(_Probed):
    """One declared collectives provider, its plugin and its state (available, unavailable, incompatible,
    conflict); `state`, `reason` and `hint` run its probe on first access, as a backend's do."""
    name: str
    spec: CollectiveSpec
    plugin: PluginRecord
    status: _Status = field(repr=False, compare=False)

    @property
    def priority(self) -> int:
        a = self.status.get()[3]
        return a.priority if a is not None and a.priority is not None else self.spec.priority


@dataclass(frozen=True)
class Registry:
    """An immutable snapshot: every plugin, every backend with its state, graph and renderer providers, and
    every collectives provider with its state."""
    plugins: tuple[PluginRecord, ...]
    backends: tuple[BackendRecord, ...]
    rejected: tuple[ProvidedSpec, ...] = ()
    by_name: Mapping[str, tuple[BackendRecord, ...]] = field(default_factory=lambda: MappingProxyType({}))
    collectives: tuple[CollectiveRecord, ...] = ()

    def collective(self, name: str) -> CollectiveRecord | None:
        """The collectives provider called `name` (case-insensitive) that keeps the name, or None."""
        recs = [c for c in self.collectives if c.name == name.upper()]
        keep = [c for c in recs if c.state != "conflict"] or recs
        return keep[0] if keep else None

    def available_collectives(self) -> list[CollectiveRecord]:
        """Available collectives providers, best first (priority descending, then name)."""
        return sorted((c for c in self.collectives if c.state == "available"), key=lambda c: (-c.priority, c.name))

    def records(self, name: str) -> tuple[BackendRecord, ...]:
        """The records claiming `name` (case-insensitive; aliases included); empty if none."""
        return self.by_name.get(name.upper(), ())

    def get(self, name: str) -> BackendRecord | None:
        """The record for `name`, or None. With a conflict, the first of the conflicting records."""
        recs = self.records(name)
        return recs[0] if recs else None

    def available(self) -> list[BackendRecord]:
        """Available backends, best first (priority descending, then name)."""
        return sorted((b for b in self.backends if b.state == "available"), key=lambda b: (-b.priority, b.name))

    @property
    def names(self) -> list[str]:
        return sorted({b.name for b in self.backends})


# ---------------------------------------------------------------- runtime registration and the snapshot cache

_runtime: list[tuple[str, Any]] = []
_snapshot: Registry | None = None
_lock = threading.RLock()


def register(obj: Any, name: str | None = None) -> None:
    """Register a plugin at runtime (a module or object with ``@hookimpl`` functions); tests and notebooks.
    The next registry use rebuilds the snapshot (devices already opened stay open)."""
    global _snapshot
    with _lock:
        _runtime.append((name if name else getattr(obj, "__name__", type(obj).__name__), obj))
        _snapshot = None


def unregister(name: str) -> None:
    """Remove a runtime registration by name."""
    global _snapshot
    with _lock:
        _runtime[:] = [(n, o) for n, o in _runtime if n != name]
        _snapshot = None


def reset() -> None:
    """Drop the snapshot and runtime registrations and opened devices (tests)."""
    global _snapshot
    with _lock:
        _runtime.clear()
        _snapshot = None
    from tolk_core.plugins import device as _device
    _device.Device.reset()
    config.reset()


def get_registry(fresh: bool = False) -> Registry:
    """The current snapshot, loading plugins on first use (`fresh`: bypassing the entry-point cache)."""
    global _snapshot
    with _lock:
        if _snapshot is None:
            _snapshot = build_registry(fresh)
            for p in _snapshot.plugins:
                if p.state == "broken":
                    fix = (f"unregister it with tolk_core.plugins.unregister({p.name!r})" if p.dist == "<runtime>"
                           else f"disable it with TOLK_DISABLE_PLUGINS={p.dist}")
                    warnings.warn(f"tolk: backend plugin {p.provider!r} ({p.name}) is broken: {p.reason} (run `tolk "
                                  f"devices -v` for the traceback; {fix})", PluginWarning, stacklevel=2)
        return _snapshot


def refresh() -> Registry:
    """Rebuild the snapshot from the installed distributions' metadata (keeps runtime registrations)."""
    global _snapshot
    with _lock:
        _snapshot = None
        return get_registry(fresh=True)


# ---------------------------------------------------------------- gates


def _split(v: str | None) -> list[str] | None:
    return None if v is None else [x.strip() for x in v.split(",") if x.strip()]


def _check_gate_names(names: list[str], known: set[str], var: str) -> None:
    lowered = {k.lower() for k in known}
    for n in names:
        if n.lower() in _BUILTIN_IDS:
            if var == "TOLK_DISABLE_PLUGINS":
                raise ConfigError(f"{var}: {n!r} is tolk-core's built-in {builtin.NAME} reference device, which "
                                  "cannot be disabled (it is the last-resort device)")
            continue
        if n.lower() not in lowered:
            close = difflib.get_close_matches(n.lower(), sorted(lowered), n=1)
            raise ConfigError(f"{var}: unknown plugin {n!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                              + f" (installed: {', '.join(sorted(known)) or 'none'})")


# ---------------------------------------------------------------- loading


def _load_entry_points(fresh: bool = False) -> tuple[list[PluginRecord], list[tuple[PluginRecord, Any]]]:
    eps = entry_points.installed(GROUP, fresh)
    known = {ep.name for ep in eps} | {ep.dist for ep in eps}
    allow = _split(config.get("PLUGINS"))
    if allow is None and os.environ.get("TOLK_PLUGINS") == "":  # set but empty: no plugins (config ignores "")
        allow = []
    deny = _split(config.get("DISABLE_PLUGINS")) or []
    import_timeout = float(config.get("PLUGIN_IMPORT_TIMEOUT"))
    if allow is not None:
        _check_gate_names(allow, known, "TOLK_PLUGINS")
    _check_gate_names(deny, known, "TOLK_DISABLE_PLUGINS")
    allow_l = None if allow is None else {a.lower() for a in allow}
    deny_l = {d.lower() for d in deny}
    records: list[PluginRecord] = []
    loaded: list[tuple[PluginRecord, Any]] = []
    seen: set[tuple[str, str]] = set()
    for ep in sorted(eps, key=lambda e: (e.dist, e.name)):
        dist, version = ep.dist, ep.version
        if (dist, ep.name) in seen:  # the same distribution found twice on the path
            continue
        seen.add((dist, ep.name))
        ids = {ep.name.lower(), dist.lower()}
        if ids & deny_l:
            records.append(PluginRecord(ep.name, dist, version, ep.value, "disabled",
                                        f"disabled by TOLK_DISABLE_PLUGINS={config.get('DISABLE_PLUGINS')}"))
            continue
        if allow_l is not None and not ids & allow_l:
            records.append(PluginRecord(ep.name, dist, version, ep.value, "disabled",
                                        f"not in TOLK_PLUGINS={config.get('PLUGINS') or ''}"))
            continue
        out = guard.call(ep.load, import_timeout, "tolk-import")
        if not out.done or out.error is not None:
            if isinstance(out.error, KeyboardInterrupt):
                raise out.error
            why = (f"import did not finish within {import_timeout:g}s (TOLK_PLUGIN_IMPORT_TIMEOUT); an entry-point "
                   "module must be import-light (docs/plugins.md, section 1)" if not out.done else
                   f"import failed: {type(out.error).__name__}: {out.error}")
            tb = "".join(traceback.format_exception(out.error)) if out.error is not None else out.stack
            records.append(PluginRecord(ep.name, dist, version, ep.value, "broken", why, tb, out.seconds))
            continue
        obj = out.value
        rec = PluginRecord(ep.name, dist, version, ep.value, "loaded", import_s=out.seconds)
        records.append(rec)
        loaded.append((rec, obj))
    from tolk_core.version import __version__
    rec = PluginRecord(builtin.ENTRY_POINT, "tolk-core", __version__, builtin.__name__, "loaded")
    records.append(rec)
    loaded.append((rec, builtin))
    for name, obj in list(_runtime):
        rec = PluginRecord(name, "<runtime>", "", getattr(obj, "__name__", repr(obj)), "loaded")
        records.append(rec)
        loaded.append((rec, obj))
    return records, loaded


_HOOKS: tuple[tuple[str, type], ...] = (("tolk_backends", BackendSpec), ("tolk_graphs", GraphSpec),
                                       ("tolk_renderers", RendererSpec), ("tolk_collectives", CollectiveSpec))


def _call_hooks(rec: PluginRecord, obj: Any) -> list[list[Any]]:
    """Register `obj` in a private plugin manager and call its four hooks (the specs of each, in `_HOOKS`
    order). Raises on any problem."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(TolkHookSpecs)
    pm.register(obj, name=f"{rec.dist}:{rec.name}")
    pm.check_pending()
    out: list[list[Any]] = []
    for hook, cls in _HOOKS:
        caller = getattr(pm.hook, hook)
        for impl in caller.get_hookimpls():
            if impl.hookwrapper or impl.wrapper:
                raise PluginError(f"{hook} must not be a wrapper")
        results = caller()
        specs: list[Any] = []
        for r in results:
            for s in (r if isinstance(r, Iterable) and not isinstance(r, str) else [r]):
                if not isinstance(s, cls):
                    raise PluginError(f"{hook} returned {type(s).__name__}, expected {cls.__name__}")
                specs.append(s)
        out.append(specs)
    return out


def _validate_backend(s: BackendSpec) -> None:
    if not NAME_RE.match(s.name):
        raise PluginError(f"backend name {s.name!r} must be upper-case letters, digits and _ (e.g. 'CUDA')")
    if not isinstance(s.api_version, tuple) or len(s.api_version) != 2:
        raise PluginError(f"backend {s.name}: api_version must be a (major, minor) tuple, got {s.api_version!r}")


def _validate_collective(s: CollectiveSpec) -> None:
    from tolk_core.plugins.specs import COLLECTIVE_OPS
    if not NAME_RE.match(s.name):
        raise PluginError(f"collectives name {s.name!r} must be upper-case letters, digits and _ (e.g. 'MPI')")
    if not isinstance(s.api_version, tuple) or len(s.api_version) != 2:
        raise PluginError(f"collectives {s.name}: api_version must be a (major, minor) tuple, got {s.api_version!r}")
    if unknown := sorted(set(s.ops) - set(COLLECTIVE_OPS)):
        raise PluginError(f"collectives {s.name}: unknown operations {unknown}; known: {', '.join(COLLECTIVE_OPS)}")
    if s.group is None:
        raise PluginError(f"collectives {s.name}: group must name the ProcessGroup factory ('package.module:attr')")


def _collective_records(claims: Mapping[str, list[tuple[CollectiveSpec, PluginRecord]]],
                        timeout: float) -> list[CollectiveRecord]:
    """One record per claimant. The name tolk-core ships keeps it against a third party (the others are
    `conflict`, as for devices); two third parties on one name are both `conflict`."""
    out: list[CollectiveRecord] = []
    for name, claimants in sorted(claims.items()):
        core = [c for c in claimants if c[1].dist == "tolk-core"]
        if len(claimants) > 1:
            who = " and ".join(f"{rec.provider} (entry point {rec.name!r})" for _, rec in claimants)
            choose = " or ".join(f"TOLK_DISABLE_PLUGINS={rec.dist}" for _, rec in claimants if rec.dist != "tolk-core")
            for s, rec in claimants:
                if not (core and rec is core[0][1]):
                    out.append(CollectiveRecord(name, s, rec, _Status("conflict", f"collectives {name} is claimed by "
                                                                      f"{who}", f"choose one: {choose}")))
            if not core:
                continue
            claimants = core
        s, rec = claimants[0]
        if (why := _incompatible(s.api_version)) is not None:
            status = _Status("incompatible", why, f"install a version of {rec.dist} built for tolk plugin API "
                                                  f"{API_VERSION[0]}.x")
        else:
            status = _Status(probe=s.probe, timeout=timeout, install_hint=s.install_hint)
        out.append(CollectiveRecord(name, s, rec, status))
    return out


def _incompatible(api: tuple[int, int]) -> str | None:
    if api[0] != API_VERSION[0]:
        return (f"built for tolk plugin API {api[0]}.{api[1]}, but this tolk-core speaks "
                f"{API_VERSION[0]}.{API_VERSION[1]}")
    return None


PROBE_SLOW_S = 1.0
"""A probe taking longer works, but warns: every process resolving the default device waits for it (the same
second the conformance suite's probe check allows; the shipped plugins' take under 50 ms, docs/plugins.md)."""


def run_probe(ref: Any, timeout: float) -> Availability:
    """Run a probe in a thread with a time limit (`guard.call`: one that overruns is cancelled). Never raises:
    failures become ``ok=False`` with the reason."""
    if ref is None:
        return Availability(True, "no probe (always available)")
    out = guard.call(lambda: resolve_ref(ref)(), timeout, "tolk-probe")
    if not out.done:
        return Availability(False, f"probe timed out after {timeout:g}s (cancelled)", 0,
                            hint="the plugin's probe must answer quickly: fix or disable the plugin, or raise "
                                 "TOLK_PROBE_TIMEOUT if the driver is just slow")
    res = out.error if out.error is not None else out.value
    if isinstance(res, BaseException):
        why = f"{type(res).__name__}: {res}".strip().rstrip(":")
        return Availability(False, f"probe raised {why} (a probe must return Availability, never raise)", 0,
                            hint="the probe is a bug in the plugin: report it to its authors, or disable it "
                                 "with TOLK_DISABLE_PLUGINS")
    if not isinstance(res, Availability):
        return Availability(False, f"probe returned {type(res).__name__}, expected Availability", 0,
                            hint="the probe is a bug in the plugin: report it to its authors")
    if out.seconds > PROBE_SLOW_S:
        warnings.warn(f"tolk: the probe {ref_name(ref)} took {out.seconds:.2f} s (more than {PROBE_SLOW_S} s): every "
                      "process that resolves the default device waits for it; make the probe cheap (no device "
                      "context) or name a device with TOLK_DEVICE", PluginWarning, stacklevel=2)
    return res


SHIPPED = frozenset({"tolk-cpu", "tolk-opencl", "tolk-cuda"})
"""The distributions shipped with tolk-core: a third-party claim on one of their device names never takes the name
from them (docs/plugins.md, section 7: name claims)."""


def _claimed(name: str, claimants: list[tuple[BackendSpec, PluginRecord]], graph: ProvidedSpec | None,
             rs: tuple[ProvidedSpec, ...], timeout: float) -> list[BackendRecord]:
    """The records of device `name`: one per claimant. A single claimant is probed (or incompatible). Several:
    a shipped claimant keeps the name and the others are `conflict`; without one, all are `conflict`. Each
    conflict says how to choose."""
    shipped = [(s, rec) for s, rec in claimants if rec.dist in SHIPPED]
    if len(claimants) > 1 and len(shipped) != 1:
        who = " and ".join(f"{rec.provider} (entry point {rec.name!r})" for _, rec in claimants)
        choose = " or ".join(f"TOLK_DISABLE_PLUGINS={rec.dist}" for _, rec in claimants)
        return [BackendRecord(name, s, rec, _Status("conflict", f"{name} is claimed by {who}",
                                                    f"choose one: uninstall the others or set {choose}"),
                              graph=graph, renderers=rs) for s, rec in claimants]
    out: list[BackendRecord] = []
    keeper = shipped[0] if shipped else claimants[0]
    for s, rec in claimants:
        if s is keeper[0] and rec is keeper[1]:
            continue
        out.append(BackendRecord(name, s, rec, _Status(
            "conflict", f"{name} is also claimed by {keeper[1].provider}, shipped with tolk-core, which keeps the name",
            f"to use {rec.provider}'s {name}, set TOLK_DISABLE_PLUGINS={keeper[1].dist} (or rename its device)"),
            graph=graph, renderers=rs))
    s, rec = keeper
    if (why := _incompatible(s.api_version)) is not None:
        status = _Status("incompatible", why, f"install a version of {rec.dist} built for tolk plugin API "
                                              f"{API_VERSION[0]}.x")
    else:
        status = _Status(probe=s.probe, timeout=timeout, install_hint=s.install_hint)
    return [BackendRecord(name, s, rec, status, graph=graph, renderers=rs), *out]


def _orphans(provided: list[ProvidedSpec], claims: Mapping[str, Any]) -> list[ProvidedSpec]:
    """Graph and renderer specs for a device no loaded plugin declares: kept, listed as `orphaned`."""
    return [ProvidedSpec(p.spec, p.plugin, "orphaned", f"no loaded plugin declares the device {p.spec.device.upper()} "
                         "(is its plugin installed, enabled and not broken? see `tolk devices -v`)")
            for p in provided if p.spec.device.upper() not in claims]


def _unique_renderer_names(renderers: list[ProvidedSpec]) -> tuple[list[ProvidedSpec], list[ProvidedSpec]]:
    """Renderers of one device must have distinct names: the highest priority one (ties: a shipped provider, then
    by provider name) keeps a name, the others are rejected as `conflict`, naming both providers."""
    keep: dict[tuple[str, str], ProvidedSpec] = {}
    clashes: list[ProvidedSpec] = []
    for r in sorted(renderers, key=lambda x: (-x.spec.priority, x.plugin.dist not in SHIPPED, x.plugin.dist,
                                              x.plugin.name)):
        key = (r.spec.device.upper(), r.spec.name)
        if (first := keep.get(key)) is None:
            keep[key] = r
            continue
        clashes.append(ProvidedSpec(r.spec, r.plugin, "conflict", f"renderer name {r.spec.name!r} for {key[0]} is "
                                    f"already supplied by {first.plugin.provider} (entry point {first.plugin.name!r}); "
                                    "rename the renderer (RendererSpec.name) or disable one plugin"))
    return [r for r in renderers if r in keep.values()], clashes


def build_registry(fresh: bool = False) -> Registry:
    """Load every plugin and build a fresh snapshot (does not touch the cached one); probes run lazily.
    `fresh`: read the installed distributions' metadata rather than the entry-point cache."""
    records, loaded = _load_entry_points(fresh)
    final_plugins: list[PluginRecord] = [r for r in records if r.state != "loaded"]
    backends: list[tuple[BackendSpec, PluginRecord]] = []
    graphs: list[ProvidedSpec] = []
    renderers: list[ProvidedSpec] = []
    colls: dict[str, list[tuple[CollectiveSpec, PluginRecord]]] = {}
    for rec, obj in loaded:
        try:
            b, g, r, c = _call_hooks(rec, obj)
            for s in b:
                _validate_backend(s)
                if s.name == builtin.NAME and obj is not builtin:
                    raise PluginError(f"the device name {builtin.NAME} is reserved for tolk-core's reference device")
            for cs in c:
                _validate_collective(cs)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            final_plugins.append(PluginRecord(rec.name, rec.dist, rec.version, rec.value, "broken",
                                              f"registration failed: {type(e).__name__}: {e}",
                                              traceback.format_exc(), rec.import_s))
            continue
        final_plugins.append(rec)
        backends += [(s, rec) for s in b]
        graphs += [ProvidedSpec(s, rec) for s in g]
        renderers += [ProvidedSpec(s, rec) for s in r]
        for cs in c:
            colls.setdefault(cs.name, []).append((cs, rec))

    rejected: list[ProvidedSpec] = []

    def compatible(ps: ProvidedSpec) -> bool:
        if (why := _incompatible(ps.spec.api_version)) is not None:
            rejected.append(ProvidedSpec(ps.spec, ps.plugin, "incompatible", why))
            return False
        return True

    graphs = [g for g in graphs if compatible(g)]
    renderers = [r for r in renderers if compatible(r)]

    claims: dict[str, list[tuple[BackendSpec, PluginRecord]]] = {}
    for s, rec in backends:
        claims.setdefault(s.name, []).append((s, rec))
    rejected += _orphans(graphs, claims) + _orphans(renderers, claims)
    renderers, clashes = _unique_renderer_names(renderers)
    rejected += clashes
    timeout = float(config.get("PROBE_TIMEOUT"))
    out: list[BackendRecord] = []
    for name, claimants in sorted(claims.items()):
        gs = sorted((x for x in graphs if x.spec.device.upper() == name),
                    key=lambda x: (-x.spec.priority, x.plugin.dist, x.plugin.name))
        rs = tuple(sorted((x for x in renderers if x.spec.device.upper() == name),
                          key=lambda x: (-x.spec.priority, x.plugin.dist, x.plugin.name)))
        out += _claimed(name, claimants, gs[0] if gs else None, rs, timeout)
    by_name: dict[str, list[BackendRecord]] = {}
    for record in out:
        by_name.setdefault(record.name, []).append(record)
        for a in record.spec.aliases:
            by_name.setdefault(a.upper(), []).append(record)
    return Registry(tuple(final_plugins), tuple(out), tuple(rejected),
                    MappingProxyType({k: tuple(v) for k, v in by_name.items()}),
                    tuple(_collective_records(colls, timeout)))


