"""Contract checks as plain functions: the conformance tests call them, and so does ``tolk devices --check``
(the smoke subset), which must work without pytest.

Every check raises `ContractError` naming the contract it found broken, so a failing plugin author reads which
promise their code breaks (e.g. ``Allocator.copyout``) before the details.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tolk_core.plugins import Availability, BackendRecord, BackendSpec, Capabilities, Device, get_registry
from tolk_core.plugins.specs import resolve_ref
from tolk_core.runtime import CompiledDevice

IMPORT_BUDGET_S = 0.5
"""Seconds an entry-point module may take to import in a fresh interpreter (after tolk_core.plugins)."""
IMPORT_CHECK_S = 10.0
"""Seconds the import check waits for its fresh interpreter, start-up included, before it fails."""


class CheckSkipped(Exception):
    """A check that does not apply to this device (the message says why)."""


class ContractError(AssertionError):
    """A plugin broke a documented contract. ``contract`` names it (``Allocator.copyout``, ``BackendSpec.probe``)."""

    def __init__(self, contract: str, message: str):
        super().__init__(f"contract {contract} broken: {message}")
        self.contract = contract


def require(cond: Any, contract: str, message: str | Callable[[], str]) -> None:
    """Raise ContractError(contract, message) unless `cond`."""
    if not cond:
        raise ContractError(contract, message() if callable(message) else message)


def record(name: str) -> BackendRecord:
    """The registry record of backend `name`; a ContractError when no installed plugin declares it."""
    rec = get_registry().get(name)
    if rec is None:
        plugins = ", ".join(f"{p.provider} ({p.state}{': ' + p.reason if p.reason else ''})"
                            for p in get_registry().plugins)
        raise ContractError("tolk_backends", f"no installed plugin declares a backend named {name!r} (plugins: "
                            f"{plugins})")
    return rec


# ---------------------------------------------------------------- registration

def check_registered(rec: BackendRecord) -> str:
    """The backend's plugin imported, its hooks ran and its specs validated (not broken/conflict/incompatible)."""
    require(rec.plugin.state == "loaded", "tolk_backends",
            f"plugin {rec.plugin.provider} is {rec.plugin.state}: {rec.plugin.reason}")
    require(rec.state not in ("conflict", "incompatible", "broken"), "BackendSpec",
            f"{rec.name} is {rec.state}: {rec.reason}")
    return f"{rec.name} from {rec.plugin.provider}"


def _entry_module(rec: BackendRecord) -> str | None:
    if rec.plugin.dist == "<runtime>":
        return None
    return rec.plugin.value.partition(":")[0]


def check_import_light(rec: BackendRecord, budget_s: float = IMPORT_BUDGET_S) -> str:
    """Importing the entry-point module in a fresh interpreter pulls in no third-party module (only the
    standard library, pluggy, tolk_core and the plugin's own package) and takes at most `budget_s`."""
    module = _entry_module(rec)
    if module is None:
        return "registered at runtime: no entry point to import"
    code = ("import importlib, json, sys, time\nimport tolk_core.plugins\nbefore = set(sys.modules)\n"
            f"t0 = time.perf_counter()\nimportlib.import_module({module!r})\ndt = time.perf_counter() - t0\n"
            "print(json.dumps([dt, sorted(set(sys.modules) - before)]))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=IMPORT_CHECK_S)
    except subprocess.TimeoutExpired:
        raise ContractError("entry point is import-light", f"importing {module!r} in a fresh interpreter did not "
                            f"finish within {IMPORT_CHECK_S:g} s: the entry-point module must not block (no "
                            "network, no device, no waiting) at import") from None
    require(proc.returncode == 0, "entry point",
            lambda: f"importing {module!r} failed in a fresh interpreter:\n{proc.stderr[-2000:]}")
    dt, new = json.loads(proc.stdout.strip().splitlines()[-1])
    own = module.split(".")[0]
    allowed = set(sys.stdlib_module_names) | {"tolk_core", "pluggy", own}
    heavy = sorted({m.split(".")[0] for m in new} - allowed)
    require(not heavy, "entry point is import-light",
            f"importing {module!r} pulled in {', '.join(heavy)}; the entry-point module may import only the "
            "standard library, pluggy and tolk_core.plugins: name heavy objects with 'module:attr' strings")
    require(dt <= budget_s, "entry point is import-light",
            f"importing {module!r} took {dt:.3f} s (budget {budget_s} s)")
    return f"{module} imports in {dt * 1e3:.1f} ms"


def check_specs(rec: BackendRecord) -> str:
    """The backend spec is well formed and its refs resolve to the right kinds of objects."""
    s = rec.spec
    require(isinstance(s, BackendSpec), "BackendSpec", f"tolk_backends returned {type(s).__name__}")
    require(isinstance(s.capabilities, Capabilities), "BackendSpec.capabilities",
            f"capabilities must be a Capabilities, got {type(s.capabilities).__name__}")
    if rec.state == "available":  # an unavailable device's module may import a driver that is missing here
        try:
            cls = resolve_ref(s.device)
        except Exception as e:  # noqa: BLE001 - the message is the finding
            raise ContractError("BackendSpec.device", f"{s.device!r} does not resolve: {e}") from e
        require(isinstance(cls, type) and issubclass(cls, CompiledDevice), "BackendSpec.device",
                f"{s.device!r} must name a CompiledDevice subclass, got {cls!r}")
    device = cls.__name__ if rec.state == "available" else f"{rec.name} {rec.state}, device class not imported"
    if rec.graph is not None:
        require(rec.graph.state == "ok", "GraphSpec", rec.graph.reason)
    if rec.renderer is None:  # check_renderer_registered reports it; a device may still pass its self-test
        return f"{device}, no renderer"
    r = rec.renderer.spec
    try:
        resolve_ref(r.renderer)
        factory = resolve_ref(r.compiler) if r.compiler is not None else None
    except Exception as e:  # noqa: BLE001
        raise ContractError("RendererSpec", f"renderer {r.name!r}: {e}") from e
    require(factory is not None, "RendererSpec.compiler",
            f"renderer {r.name!r} has no compiler factory (needed to compile while the device is unavailable)")
    return f"{device}, renderer {r.name}"


def check_renderer_registered(rec: BackendRecord) -> str:
    """Some plugin supplies a renderer for the backend: without one, Tolk cannot run programs on it."""
    require(rec.renderer is not None, "tolk_renderers",
            f"no renderer is registered for {rec.name}: core cannot generate kernels for it")
    assert rec.renderer is not None
    return rec.renderer.spec.name


PROBE_CHECK_S = 1.0
"""Seconds the probe check waits: a tenth of the registry's default PROBE_TIMEOUT, since every process that
resolves the default device waits for every probe."""


def check_probe(rec: BackendRecord, timeout_s: float = PROBE_CHECK_S) -> str:
    """The probe returns an Availability without raising, within `timeout_s`; ``ok=False`` comes with a reason.
    The probe runs under the registry's guard, so one that never returns fails this check instead of hanging."""
    from tolk_core.plugins import guard
    if rec.spec.probe is None:
        return "no probe (always available)"
    try:
        probe = resolve_ref(rec.spec.probe)
    except Exception as e:  # noqa: BLE001 - the message is the finding
        raise ContractError("BackendSpec.probe", f"{rec.spec.probe!r} does not resolve: {e}") from e
    out = guard.call(probe, timeout_s, "tolk-probe-check")
    require(out.done, "BackendSpec.probe",
            f"the probe did not return within {timeout_s:g} s (it was cancelled); a probe must answer quickly: "
            "no device context, no network, no compile. Every process resolving the default device waits for it")
    if out.error is not None:
        err = out.error
        raise ContractError("BackendSpec.probe", f"the probe raised {type(err).__name__}: {err}; a probe must never "
                            "raise: return Availability(False, reason, 0, hint=...) instead") from err
    res = out.value
    require(isinstance(res, Availability), "BackendSpec.probe",
            f"the probe returned {type(res).__name__}, expected Availability")
    require(res.ok or res.reason.strip(), "BackendSpec.probe", "ok=False needs a reason saying why")
    require(not res.ok or res.device_count >= 1, "BackendSpec.probe",
            f"ok=True with device_count={res.device_count}")
    return f"{'ok' if res.ok else 'unavailable'}: {res.reason} ({out.seconds * 1e3:.1f} ms)"


# ---------------------------------------------------------------- runtime smoke

def open_device(rec: BackendRecord) -> CompiledDevice:
    """The opened device (a DeviceUnavailableError propagates: callers turn it into a skip)."""
    return Device[rec.name]


def check_self_test(dev: CompiledDevice) -> str:
    """The device's own smoke kernel (``self_test``) computes the right values (ints passed as `vals`)."""
    try:
        return dev.self_test()
    except ContractError:
        raise
    except Exception as e:
        where = _raised_at(e)
        raise ContractError("CompiledDevice.self_test", f"{type(e).__name__}{': ' + str(e) if str(e) else ''}"
                            f"{' (raised in ' + where + ')' if where else ''}") from e


def _raised_at(e: BaseException) -> str:
    """``Class.method`` (or ``function``) of the innermost frame that raised `e`, for messages with no text."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    code, self_ = tb.tb_frame.f_code, tb.tb_frame.f_locals.get("self")
    return f"{type(self_).__name__}.{code.co_name}" if self_ is not None else code.co_name


def check_generated_kernel(dev: CompiledDevice) -> str:
    """A kernel generated by core for the device's renderer compiles, launches and matches numpy."""
    import numpy as np

    from tolk_core.testing.kernels import build, run_on
    require(dev.renderer is not None, "tolk_renderers",
            f"no renderer is registered for {dev.name}: core cannot generate kernels for it; yield a RendererSpec "
            "from a tolk_renderers hook")
    k = build(lambda a, b: (a * 2 + b).relu(), ((33, 7), "float32"), ((7,), "float32"), device=dev.name)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((33, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    got = run_on(dev, k, [a, b])
    want = np.maximum(a * 2 + b, 0)
    require(np.allclose(got, want, rtol=1e-6, atol=1e-6), "Program.__call__",
            lambda: f"relu(a*2+b) gave wrong values: max error {np.abs(got - want).max()}")
    return "relu(a*2+b) on 33x7 floats"


@dataclass
class CheckResult:
    name: str
    ok: bool | None        # None: skipped
    detail: str


SMOKE_CHECKS: tuple[tuple[str, str], ...] = (
    ("registration", "check_registered"), ("registration", "check_specs"), ("registration", "check_probe"),
    ("runtime", "check_self_test"), ("runtime", "check_generated_kernel"),
)


def smoke(name: str) -> list[CheckResult]:
    """The registration and runtime tiers' smoke subset for backend `name` (what ``tolk devices --check`` runs).
    Runtime checks are skipped (ok=None) when the device is unavailable."""
    out: list[CheckResult] = []
    rec = record(name)
    dev: CompiledDevice | None = None
    for tier, fn_name in SMOKE_CHECKS:
        fn = globals()[fn_name]
        try:
            if tier == "runtime":
                if rec.state != "available":
                    out.append(CheckResult(fn_name, None, f"{rec.state}: {rec.reason}"))
                    continue
                dev = dev or open_device(rec)
                out.append(CheckResult(fn_name, True, fn(dev)))
            else:
                out.append(CheckResult(fn_name, True, fn(rec)))
        except CheckSkipped as e:
            out.append(CheckResult(fn_name, None, str(e)))
        except Exception as e:  # noqa: BLE001 - reported, never raised
            out.append(CheckResult(fn_name, False, f"{type(e).__name__}: {e}"))
    return out
