"""Device resolution and the registry's face, ``tolk_core.Device``.

Precedence for the default device, highest first:
  1. an explicit argument (``Device[name]``, ``Device.resolve(name)``)      demand
  2. ``TOLK_DEVICE`` (or ``config.override(DEVICE=...)``)                    demand; ``A,B`` = first available
  3. the project file (``tolk.toml`` / ``[tool.tolk]``), key ``device``      preference
  4. the user file (``$XDG_CONFIG_HOME/tolk/config.toml``), key ``device``   preference
  5. plugin priority among available backends (ties broken by name)
A demand that cannot be met raises (UnknownDeviceError, DeviceUnavailableError). A preference naming an
unavailable device is skipped and the reason recorded in ``Resolution.notes``; one naming no installed device is
a ConfigError naming the file and key.
"""
from __future__ import annotations

import difflib
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from tolk_core import config
from tolk_core.errors import ConfigError, DeviceUnavailableError, PluginError, UnknownDeviceError
from tolk_core.plugins import contract
from tolk_core.plugins.registry import BackendRecord, PluginWarning, Registry, get_registry
from tolk_core.plugins.specs import Capabilities, RendererSpec, resolve_ref
from tolk_core.runtime import disk, ranks
from tolk_core.runtime.compiler import Compiler
from tolk_core.runtime.device import CompiledDevice


@dataclass(frozen=True)
class Resolution:
    """The resolved default device, the precedence step that chose it, and preferences skipped on the way."""
    device: str
    origin: str
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.device} from {self.origin}" + "".join(f" ({n})" for n in self.notes)


def _parse(name: str) -> tuple[str, int | None]:
    base, sep, idx = name.strip().partition(":")
    if sep:
        if not idx.isdigit():
            raise UnknownDeviceError(f"bad device string {name!r}: expected NAME[:index], e.g. 'OPENCL:0'")
        return base.upper(), int(idx)
    return base.upper(), None


def _unknown(name: str, reg: Registry) -> UnknownDeviceError:
    base = _parse(name)[0] if ":" not in name or name.partition(":")[2].isdigit() else name.upper()
    usable = sorted({b.name for b in reg.backends if b.state == "available"})
    unusable = sorted({f"{b.name} ({b.state}: {b.reason})" for b in reg.backends if b.state != "available"})
    all_names = sorted(set(reg.by_name))
    close = difflib.get_close_matches(base, all_names, n=3, cutoff=0.5)
    msg = f"unknown device {name!r}"
    if close:
        msg += f"; did you mean {' or '.join(repr(c) for c in close)}?"
    msg += f" Available devices: {', '.join(usable) or 'none'}."
    if unusable:
        msg += f" Installed but unavailable: {'; '.join(unusable)}."
    broken = [p for p in reg.plugins if p.state == "broken"]
    likely = [p for p in broken if base.lower() in _plugin_words(p)]
    for p in likely:  # its devices are unknown because it never registered: say so instead of "install it"
        return UnknownDeviceError(
            f"device {name!r} is not registered because the plugin {p.provider} (entry point {p.name!r}), which "
            f"looks like its provider, is broken: {p.reason}. Fix: `tolk devices -v` shows the traceback; fix or "
            f"reinstall the plugin, or disable it with TOLK_DISABLE_PLUGINS={p.dist}. {msg}")
    if broken:
        msg += (" Broken plugins (the devices they declare are unknown): "
                + "; ".join(f"{p.provider} ({p.name}): {p.reason}" for p in broken) + ".")
    msg += f" A device plugin for {base} may need installing (e.g. pip install tolk-{base.lower()})."
    return UnknownDeviceError(msg)


def _plugin_words(p: Any) -> set[str]:
    """The names a plugin goes by, lower case: its entry point, its distribution with and without ``tolk-``."""
    dist = p.dist.lower().replace("-", "_")
    return {p.name.lower(), dist, dist.removeprefix("tolk_")}


def _record(name: str, reg: Registry) -> tuple[BackendRecord, int | None]:
    base, idx = _parse(name)
    recs = reg.records(base)
    if not recs:
        raise _unknown(name, reg)
    return recs[0], idx


def _canonical(rec: BackendRecord, idx: int | None, name: str) -> str:
    """``NAME:i`` of an indexed backend; a backend that is not indexed is ``NAME`` for index 0 and, where its
    probe offers several (virtual) devices (the CPU's CPU_DEVICES), ``NAME:i`` for the others."""
    if not rec.spec.indexed:
        if idx in (None, 0):
            return rec.name
        if rec.device_count <= 1:
            raise UnknownDeviceError(f"device {name!r}: {rec.name} has a single device; use {rec.name!r}"
                                     + (" (or set TOLK_CPU_DEVICES for virtual CPU devices)" if rec.name == "CPU"
                                        else ""))
        return f"{rec.name}:{idx}"
    return f"{rec.name}:{idx or 0}"


def _why_unusable(rec: BackendRecord, idx: int | None) -> str | None:
    """None when usable, else the reason."""
    if rec.state != "available":
        return f"{'in conflict' if rec.state == 'conflict' else rec.state}: {rec.reason}"
    if (rec.spec.indexed or idx) and (idx or 0) >= rec.device_count:
        return f"index {idx} out of range: {rec.name} has {rec.device_count} device(s)"
    return None


def _lost(dev: CompiledDevice) -> str | None:
    """Why an opened device is lost, or None; a `lost` property that raises counts as lost, with that reason."""
    try:
        return getattr(dev, "lost", None)
    except Exception as e:  # noqa: BLE001 - asking a dead worker may fail: that is the answer
        return f"its lost check raised {type(e).__name__}: {e}"


def _demand_error(name: str, rec: BackendRecord, why: str) -> DeviceUnavailableError:
    if rec.state == "available":  # the backend works, the index is past its devices
        fix = f"use an index below {rec.device_count}, e.g. {rec.name + ':0'!r}"
    else:
        fix = rec.hint or rec.spec.install_hint or "run `tolk devices` for details"
    return DeviceUnavailableError(f"device {name!r} (plugin {rec.plugin.provider}, entry point {rec.plugin.name!r}) "
                                  f"is {why}. Fix: {fix}")


class DeviceFace:
    """The registry's face: ``Device["CPU"]`` opens (once per canonical name), ``Device.DEFAULT`` names the
    resolved default, ``Device.canonicalize`` normalizes names (``"opencl"`` -> ``"OPENCL:0"``)."""

    def __init__(self) -> None:
        self._opened: dict[str, CompiledDevice] = {}
        self._known: dict[str, tuple[Registry, CompiledDevice]] = {}  # name asked -> (registry then, device)
        self._lock = threading.RLock()

    @property
    def registry(self) -> Registry:
        return get_registry()

    def canonicalize(self, name: str) -> str:
        """Canonical ``NAME`` or ``NAME:index``; raises UnknownDeviceError for names no plugin provides. A rank's
        device (``CPU@rank1``, runtime/ranks.py) is the canonical device on that rank: this rank's is local."""
        if disk.is_disk_name(name):
            return disk.canonical(name)
        if ranks.is_rank_name(name):
            device, rank = ranks.split(name)
            return ranks.rank_name(self.canonicalize(device), rank)
        rec, idx = _record(name, self.registry)
        return _canonical(rec, idx, name)

    def check(self, name: str) -> str:
        """Canonical name of a demanded device; raises unless it is available (a rank's device: unless this
        process's device of that name is, as every rank runs the same program)."""
        if disk.is_disk_name(name):
            return disk.canonical(name)
        if ranks.is_rank_name(name):
            device, rank = ranks.split(name)
            return ranks.rank_name(self.check(device), rank)
        rec, idx = _record(name, self.registry)
        canon = _canonical(rec, idx, name)
        if (why := _why_unusable(rec, idx)) is not None:
            raise _demand_error(name, rec, why)
        return canon

    def __getitem__(self, name: str) -> CompiledDevice:
        # the engine asks for its device a few times per realize: a name answered before, under the same
        # registry snapshot and not lost since, is answered without resolving it again
        known = self._known.get(name)
        if known is not None and known[0] is self.registry and _lost(known[1]) is None:
            return known[1]
        dev = self._get(name)
        self._known[name] = (self.registry, dev)
        return dev

    def _get(self, name: str) -> CompiledDevice:
        canon = self.check(name)
        with self._lock:
            if (dev := self._opened.get(canon)) is not None:
                if (why := _lost(dev)) is None:
                    return dev
                self._drop(canon, dev, why)
            if disk.is_disk_name(canon):  # core's file device, opened per path outside the registry
                dev = self._opened[canon] = disk.DiskDevice(canon)
                return dev
            dev = self._open(canon)
            self._opened[canon] = dev
            return dev

    def _open(self, canon: str) -> CompiledDevice:
        rec = self.registry.get(canon.partition(":")[0])
        assert rec is not None
        who = f"{canon} (plugin {rec.plugin.provider}, entry point {rec.plugin.name!r})"
        try:
            dev = resolve_ref(rec.spec.device)(canon)
        except Exception as e:
            raise DeviceUnavailableError(f"device {who} failed to open: {type(e).__name__}: {e}") from e
        contract.check_device(dev, who)
        dev.attach(rec.renderer.spec if rec.renderer else None, rec.graph.spec if rec.graph else None)
        if config.get("DEBUG") >= 1:
            print(f"opened device {canon} from {rec.plugin.provider} ({type(dev).__name__})")
        return dev

    def _drop(self, canon: str, dev: CompiledDevice, why: str) -> None:
        """Forget a lost device and close it; `close` failing on a dead device is reported, never raised."""
        del self._opened[canon]
        try:
            dev.close()
        except Exception as e:  # noqa: BLE001 - the device is gone either way
            warnings.warn(f"tolk: closing lost device {canon} raised {type(e).__name__}: {e}", PluginWarning,
                          stacklevel=3)
        if config.get("DEBUG") >= 1:
            print(f"device {canon} was lost ({why}); opening it again")

    def state(self, name: str) -> tuple[str, str]:
        """The state and reason of device `name`: its backend's (``available``, ``unavailable``, ...), or
        ``lost`` while the device opened in this process can no longer run anything (the next ``Device[name]``
        opens it again)."""
        rec, idx = _record(name, self.registry)
        canon = _canonical(rec, idx, name)
        if (dev := self._opened.get(canon)) is not None and (why := _lost(dev)) is not None:
            return "lost", why
        return rec.state, rec.reason

    def capabilities(self, name: str) -> Capabilities:
        """The capability flags of device `name` (its backend's spec; a disk's own)."""
        if disk.is_disk_name(name):
            return disk.CAPABILITIES
        if ranks.is_rank_name(name):
            return self.capabilities(ranks.split(name)[0])
        return _record(name, self.registry)[0].spec.capabilities

    def is_disk(self, name: str) -> bool:
        """Whether device `name` is a disk: copy-only, its values only copied, viewed or bitcast."""
        return bool(self.capabilities(name).extras.get("disk", False))

    def provider(self, name: str) -> str:
        """Who provides device `name`, for error messages: its plugin's distribution and version and its entry
        point (``"tolk-cpu 0.1 (entry point 'cpu')"``); core's own disks say so."""
        if disk.is_disk_name(name):
            return "tolk_core (disk)"
        rec, _ = _record(name, self.registry)
        return f"{rec.plugin.provider} (entry point {rec.plugin.name!r})"

    def _renderer_spec(self, name: str) -> RendererSpec:
        rec, _ = _record(name, self.registry)
        if rec.renderer is None:
            raise PluginError(f"no renderer is registered for {rec.name}")
        return rec.renderer.spec

    def renderer_for(self, name: str) -> Any:
        """The default renderer of backend `name`, constructed with ``device=None``: works while the device is
        unavailable (e.g. rendering CUDA code on a machine without a GPU)."""
        return resolve_ref(self._renderer_spec(name).renderer)(None)

    def compiler_for(self, name: str) -> Compiler:
        """A Compiler for backend `name`'s default renderer, from its spec's compiler factory; works while the
        device is unavailable (CUDA C still compiles to a cubin in CI)."""
        spec = self._renderer_spec(name)
        if spec.compiler is None:
            raise PluginError(f"renderer {spec.name} for {spec.device} has no compiler factory")
        return resolve_ref(spec.compiler)()

    def resolve(self, device: str | None = None) -> Resolution:
        """Resolve the device to use, following the precedence in this module's docstring."""
        reg = self.registry
        if device is not None:
            return Resolution(self.check(device), "argument")
        notes: list[str] = []
        for origin, value in config.layers("DEVICE"):
            if value is None or origin.kind == "default":
                continue
            names = [v.strip() for v in value.split(",") if v.strip()]
            if origin.is_demand:
                if len(names) == 1:
                    return Resolution(self.check(names[0]), str(origin))
                reasons: list[str] = []
                for n in names:
                    try:
                        return Resolution(self.check(n), str(origin), tuple(reasons))
                    except (UnknownDeviceError, DeviceUnavailableError) as e:
                        reasons.append(f"{n} skipped: {e}")
                raise DeviceUnavailableError(f"none of the devices in {origin} ({value}) is available: "
                                             + "; ".join(reasons))
            for n in names:
                try:
                    rec, idx = _record(n, reg)
                    canon = _canonical(rec, idx, n)
                except UnknownDeviceError as e:
                    raise ConfigError(f"{origin}: {e}") from None
                if (why := _why_unusable(rec, idx)) is not None:
                    notes.append(f"{origin}: {canon} skipped, {why}")
                    continue
                return Resolution(canon, str(origin), tuple(notes))
        avail = reg.available()
        if not avail:
            states = "; ".join(f"{b.name}: {b.state} ({b.reason})" for b in reg.backends) or "no backend installed"
            raise DeviceUnavailableError(f"no device is available ({states}). Fix: install tolk-cpu and a C compiler")
        best = avail[0]
        return Resolution(_canonical(best, 0, best.name), f"plugin priority ({best.name}={best.priority})",
                          tuple(notes))

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - the documented name
        """The canonical name of the resolved default device."""
        return self.resolve().device

    def opened(self) -> dict[str, CompiledDevice]:
        return dict(self._opened)

    def reset(self) -> None:
        """Forget opened devices (tests)."""
        with self._lock:
            self._opened.clear()
            self._known.clear()


Device = DeviceFace()
