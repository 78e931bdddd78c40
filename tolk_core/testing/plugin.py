"""The conformance suite's pytest plugin (entry point ``pytest11``). Inert unless ``--tolk-device`` is given.

    pytest --pyargs tolk_core.testing --tolk-device MYDEV [--tolk-device OTHER] [-m "registration or runtime"]
           [--tolk-xfails conformance-xfails.toml] [--tolk-report report.json] [--tolk-stress]

Tiers are markers: registration, memory, render, runtime, graph, jit, stress (opt-in with --tolk-stress);
``smoke`` marks the subset ``tolk devices --check`` runs. ``@pytest.mark.requires("float64")`` skips a test on a
device whose BackendSpec.capabilities does not declare the flag, naming it. The xfails file is TOML::

    [xfail]
    "test_runtime.py::test_dtype_roundtrip[MYDEV-float16]" = "half kernels not written yet"

(keys match ``file::test[params]`` or ``test[params]``, with ``*`` and ``?`` as wildcards and brackets literal;
xfails are strict, so a fixed test flags itself). At the
end one line per device is printed (``tolk conformance MYDEV: 40 passed, 3 skipped, 1 xfailed, 0 failed``) and
a JSON report is written (``--tolk-report``, default ``conformance/report.json`` in Tolk's cache directory,
not the working directory).
"""
from __future__ import annotations

import fnmatch
import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tolk_core.runtime import cache_dir

TIERS = ("registration", "memory", "render", "runtime", "graph", "jit", "stress")
_STATE: dict[str, Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("tolk", "Tolk backend conformance suite")
    g.addoption("--tolk-device", action="append", default=[], metavar="NAME",
                help="run the conformance suite on this device (repeatable); without it the suite is inert")
    g.addoption("--tolk-xfails", default=None, metavar="TOML", help="expected failures ([xfail] pattern = reason)")
    g.addoption("--tolk-report", default=None, metavar="PATH",
                help="where to write the JSON report (default: conformance/report.json in Tolk's cache directory)")
    g.addoption("--tolk-stress", action="store_true", help="also run the opt-in stress tier")
    g.addoption("--tolk-collectives", action="append", default=[], metavar="NAME",
                help="run the collectives tier on this provider (repeatable; inert without it)")
    g.addoption("--tolk-ranks", default="2,4", metavar="N,M", help="rank counts of the collectives tier's jobs")
    g.addoption("--tolk-launcher", default=None, metavar="CMD",  # applies to every --tolk-collectives name
                help="how to start a job of {n} ranks, e.g. 'mpiexec -n {n} --oversubscribe' (default: TCP's local "
                     "launcher, tolk_core.collectives.launch)")


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: Tolk conformance tier {tier}")
    config.addinivalue_line("markers", "smoke: the subset `tolk devices --check` runs")
    config.addinivalue_line("markers", "collectives: the collectives tier (--tolk-collectives NAME)")
    config.addinivalue_line("markers", "requires(*caps): skip unless the device declares these capabilities")
    _STATE.clear()
    _STATE["devices"] = [d.upper() for d in config.getoption("--tolk-device")]
    _STATE["results"] = {}


def _active() -> bool:
    return bool(_STATE.get("devices"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tolk_collectives_name" in metafunc.fixturenames:
        names = [n.upper() for n in metafunc.config.getoption("--tolk-collectives")] or [None]
        metafunc.parametrize("tolk_collectives_name", names, ids=[n or "no-provider" for n in names])
    if "tolk_ranks" in metafunc.fixturenames:
        ranks = [int(r) for r in metafunc.config.getoption("--tolk-ranks").split(",") if r.strip()]
        metafunc.parametrize("tolk_ranks", ranks, ids=[f"{r}ranks" for r in ranks])
    if "tolk_device_name" in metafunc.fixturenames:
        devices = _STATE.get("devices") or [None]
        metafunc.parametrize("tolk_device_name", devices, ids=[d or "no-device" for d in devices], scope="session")


def _xfails(config: pytest.Config) -> dict[str, str]:
    path = config.getoption("--tolk-xfails")
    if not path:
        return {}
    try:
        table = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise pytest.UsageError(f"--tolk-xfails {path}: {e}") from e
    xf = table.get("xfail", {})
    if not isinstance(xf, dict) or not all(isinstance(v, str) for v in xf.values()):
        raise pytest.UsageError(f"--tolk-xfails {path}: expected a table [xfail] of \"pattern\" = \"reason\"")
    return xf


def _short_id(item: pytest.Item) -> str:
    return item.nodeid.rsplit("/", 1)[-1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _active():
        return
    xf = _xfails(config)
    for item in items:
        if not _is_conformance(item):
            continue
        if item.get_closest_marker("stress") and not config.getoption("--tolk-stress"):
            item.add_marker(pytest.mark.skip(reason="the stress tier is opt-in: pass --tolk-stress"))
        short = _short_id(item)
        for pattern, reason in xf.items():
            if any(fnmatch.fnmatchcase(x, pattern.replace("[", "[[]")) for x in (short, short.partition("::")[2])):
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


def _is_conformance(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and module.__name__.startswith("tolk_core.testing.")


def _device_of(item: pytest.Item) -> str | None:
    cs = getattr(item, "callspec", None)
    return cs.params.get("tolk_device_name") if cs is not None else None


def _tier(item: pytest.Item) -> str:
    return next((t for t in TIERS if item.get_closest_marker(t)), "other")


def capabilities(name: str) -> dict[str, Any]:
    """The capability flags of backend `name`: the Capabilities fields, its extras, and ``graph``."""
    from dataclasses import fields

    from tolk_core.plugins import get_registry
    rec = get_registry().get(name)
    if rec is None:
        return {}
    caps = rec.spec.capabilities
    out: dict[str, Any] = {f.name: getattr(caps, f.name) for f in fields(caps) if f.name != "extras"}
    out.update(caps.extras)
    out["graph"] = rec.graph is not None
    return out


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _is_conformance(item):
        return
    if item.get_closest_marker("collectives"):
        cs = getattr(item, "callspec", None)
        if cs is None or cs.params.get("tolk_collectives_name") is None:
            pytest.skip("the collectives tier is inert without --tolk-collectives NAME")
        return
    name = _device_of(item)
    if name is None:
        pytest.skip("the Tolk conformance suite is inert without --tolk-device NAME")
    for m in item.iter_markers("requires"):
        caps = capabilities(name)
        for cap in m.args:
            if not caps.get(cap):
                pytest.skip(f"{name} does not declare capability {cap!r}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    rep = yield
    if _active() and _is_conformance(item):
        contract = getattr(call.excinfo.value, "contract", None) if call.excinfo is not None else None
        rep.user_properties += [("tolk_device", _device_of(item)), ("tolk_tier", _tier(item)),
                                ("tolk_contract", contract)]
    return rep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)
    if "tolk_device" not in props or props["tolk_device"] is None:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed") or \
            (report.when == "teardown" and report.outcome == "failed"):
        outcome = "xfailed" if hasattr(report, "wasxfail") and report.outcome == "skipped" else \
            "xpassed" if hasattr(report, "wasxfail") else report.outcome
        message = ""
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.outcome == "failed":
            message = report.longreprtext.strip().splitlines()[-1] if report.longreprtext else ""
        _STATE["results"].setdefault(props["tolk_device"], []).append({
            "test": report.nodeid.rsplit("/", 1)[-1], "tier": props["tolk_tier"], "outcome": outcome,
            "contract": props["tolk_contract"], "message": message})


def _skip_reason(message: str) -> str:
    """How the summary names one skip's reason: ``no 'graph'`` for a capability, else the whole message quoted
    (cut at 100 characters with an ellipsis, never mid-way without saying so)."""
    if " does not declare capability " in message:
        return "no " + message.split(" capability ")[-1]
    text = " ".join(message.split())
    return repr(text if len(text) <= 100 else text[:99] + "…")


def summary_line(device: str, results: list[dict[str, Any]]) -> str:
    """``tolk conformance MYDEV: 40 passed, 3 skipped (no 'float64': 2; 'MYDEV is unavailable: ...': 1), 1 xfailed,
    0 failed``."""
    counts = Counter(r["outcome"] for r in results)
    why = Counter(_skip_reason(r["message"]) for r in results if r["outcome"] == "skipped")
    skipped = f"{counts['skipped']} skipped" + (f" ({'; '.join(f'{k}: {v}' for k, v in why.items())})"
                                                 if why else "")
    parts = [f"{counts['passed']} passed", skipped, f"{counts['xfailed']} xfailed", f"{counts['failed']} failed"]
    if counts["xpassed"]:
        parts.append(f"{counts['xpassed']} xpassed")
    broken = sorted({r["contract"] for r in results if r["outcome"] == "failed" and r["contract"]})
    return f"tolk conformance {device}: {', '.join(parts)}" + (f"; contracts broken: {', '.join(broken)}"
                                                               if broken else "")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _active():
        return
    results: dict[str, list[dict[str, Any]]] = _STATE["results"]
    report = {}
    for device in _STATE["devices"]:
        rs = results.get(device, [])
        line = summary_line(device, rs)
        terminalreporter.write_line(line)
        tiers: dict[str, Counter] = {}
        for r in rs:
            tiers.setdefault(r["tier"], Counter())[r["outcome"]] += 1
        report[device] = {"summary": line, "tiers": {t: dict(c) for t, c in tiers.items()}, "tests": rs}
    path = Path(config.getoption("--tolk-report") or cache_dir() / "conformance" / "report.json")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2))
        terminalreporter.write_line(f"tolk conformance report: {path}")
    except OSError as e:
        terminalreporter.write_line(f"tolk conformance report not written ({path}: {e})")


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def tolk_record(tolk_device_name: str) -> Any:
    """The registry record (BackendRecord) of the device under test."""
    from tolk_core.testing.checks import record
    return record(tolk_device_name)


@pytest.fixture(scope="session")
def tolk_device(tolk_record: Any) -> Any:
    """The opened device under test; tests needing it skip (with the probe's reason) when it is unavailable."""
    from tolk_core.plugins import Device
    if tolk_record.state != "available":
        pytest.skip(f"{tolk_record.name} is {tolk_record.state}: {tolk_record.reason}")
    return Device[tolk_record.name]


@pytest.fixture(scope="session")
def tolk_renderer(tolk_record: Any) -> Any:
    """The device's renderer: the opened device's when it is available (it may know the hardware, e.g. float64
    support), else built without a device (``Device.renderer_for``), as a GPU plugin's CI without a GPU does."""
    from tolk_core.plugins import Device
    from tolk_core.testing.checks import ContractError
    try:
        if tolk_record.state == "available":
            return Device[tolk_record.name].renderer
        return Device.renderer_for(tolk_record.name)
    except Exception as e:
        raise ContractError("RendererSpec.renderer", f"{type(e).__name__}: {e}") from e


@pytest.fixture(scope="session")
def tolk_compiler(tolk_record: Any) -> Any:
    """The compiler from the renderer spec's factory, usable while the device is unavailable."""
    from tolk_core.plugins import Device
    from tolk_core.testing.checks import ContractError
    try:
        return Device.compiler_for(tolk_record.name)
    except Exception as e:
        raise ContractError("RendererSpec.compiler", f"{type(e).__name__}: {e}") from e
