"""The loader and the registry snapshot: every state with its reason, gates, runtime registration, import cost."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import types

import pytest

from tolk_core.errors import ConfigError, DeviceUnavailableError
from tolk_core.plugins import (
    API_VERSION,
    Availability,
    BackendSpec,
    Device,
    GraphSpec,
    PluginWarning,
    RendererSpec,
    get_registry,
    hookimpl,
    register,
    run_probe,
)
from tolk_core.runtime import Graph


def plugin(name, backends=(), graphs=(), renderers=()):
    """A runtime plugin object: a module with the three hooks."""
    mod = types.ModuleType(name)
    mod.tolk_backends = hookimpl(lambda: list(backends))
    mod.tolk_graphs = hookimpl(lambda: list(graphs))
    mod.tolk_renderers = hookimpl(lambda: list(renderers))
    return mod


def state(name):
    recs = get_registry().records(name)
    assert recs, f"{name} not in registry"
    return recs[0].state, recs[0].reason


def test_shipped_plugins_are_registered(tolk_env):
    reg = get_registry()
    assert {"CPU", "OPENCL", "CUDA"} <= set(reg.names)
    assert state("CPU")[0] == "available"
    cpu = reg.get("CPU")
    assert cpu.plugin.dist == "tolk-cpu" and cpu.renderer.spec.renderer == "tolk_cpu.renderer:CRenderer"
    assert {p.dist for p in reg.plugins} >= {"tolk-cpu", "tolk-opencl", "tolk-cuda"}


def test_available_and_unavailable_with_reason_and_hint(tolk_env):
    register(plugin("p1", [BackendSpec("GOOD", device=object, probe=lambda: Availability(True, "fine", 3))]))
    gone = Availability(False, "no widget driver", 0, hint="apt install widget")
    register(plugin("p2", [BackendSpec("GONE", device=object, probe=lambda: gone)]))
    assert state("GOOD") == ("available", "fine")
    assert get_registry().get("GOOD").device_count == 3
    rec = get_registry().get("GONE")
    assert (rec.state, rec.reason, rec.hint) == ("unavailable", "no widget driver", "apt install widget")


def test_probe_that_raises_or_hangs_is_unavailable_not_a_crash(tolk_env):
    def boom():
        raise OSError("libwidget.so: cannot open shared object file")
    raised = run_probe(boom, 1)
    assert raised.reason == ("probe raised OSError: libwidget.so: cannot open shared object file (a probe must "
                             "return Availability, never raise)")
    assert "bug in the plugin" in raised.hint and "install" not in raised.hint  # not the install hint
    t0 = time.perf_counter()
    slow = run_probe(lambda: time.sleep(5), 0.2)
    assert not slow.ok and slow.reason == "probe timed out after 0.2s (cancelled)" and time.perf_counter() - t0 < 2
    assert run_probe(lambda: 42, 1).reason == "probe returned int, expected Availability"
    register(plugin("p", [BackendSpec("BOOM", device=object, probe=boom)]))
    assert state("BOOM")[0] == "unavailable"


def test_incompatible_names_both_versions(tolk_env):
    register(plugin("p", [BackendSpec("NEWER", device="no.such:Thing", api_version=(API_VERSION[0] + 1, 0))]))
    st, reason = state("NEWER")
    assert st == "incompatible"
    assert f"{API_VERSION[0] + 1}.0" in reason and f"{API_VERSION[0]}.{API_VERSION[1]}" in reason


def test_conflict_lists_both_providers(tolk_env):
    register(plugin("alpha", [BackendSpec("DUP", device=object)]), name="alpha")
    register(plugin("beta", [BackendSpec("DUP", device=object)]), name="beta")
    recs = get_registry().records("DUP")
    assert [r.state for r in recs] == ["conflict", "conflict"]
    assert "'alpha'" in recs[0].reason and "'beta'" in recs[0].reason


def test_broken_hook_or_bad_spec_keeps_the_rest_working(tolk_env):
    bad = types.ModuleType("bad")

    @hookimpl
    def tolk_backends():
        raise RuntimeError("plugin bug")
    bad.tolk_backends = tolk_backends
    register(bad, name="bad")
    register(plugin("lower", [BackendSpec("lower", device=object)]), name="lower")
    register(plugin("wrongtype", ["not a spec"]), name="wrongtype")
    with pytest.warns(PluginWarning) as warned:
        plugins = {p.name: p for p in get_registry().plugins}
    assert len(warned) == 3 and "unregister('bad')" in str(warned[0].message)
    assert plugins["bad"].state == "broken" and "RuntimeError: plugin bug" in plugins["bad"].reason
    assert "Traceback" in plugins["bad"].traceback
    assert plugins["lower"].state == "broken" and "must be upper-case" in plugins["lower"].reason
    assert plugins["wrongtype"].state == "broken" and "expected BackendSpec" in plugins["wrongtype"].reason
    assert state("CPU")[0] == "available"


def test_graph_and_renderer_specs_attach_to_a_device_from_another_plugin(tolk_env):
    class MyGraph(Graph):
        pass
    register(plugin("g", graphs=[GraphSpec("CPU", MyGraph, priority=1), GraphSpec("CPU", Graph, priority=0)]))
    register(plugin("r", renderers=[RendererSpec("CPU", "FANCY", renderer=lambda dev: ("fancy", dev), priority=99)]))
    register(plugin("old", graphs=[GraphSpec("CPU", Graph, priority=100, api_version=(0, 1))]))
    cpu = get_registry().get("CPU")
    assert cpu.graph.spec.graph is MyGraph and cpu.graph.plugin.name == "g"
    assert cpu.renderer.spec.name == "FANCY"
    assert [r.state for r in get_registry().rejected] == ["incompatible"]
    dev = Device["CPU"]
    assert dev.graph is MyGraph
    assert dev.renderer == ("fancy", dev)  # constructed lazily, with the device


def test_renderer_is_resolved_lazily(tolk_env):
    register(plugin("r", renderers=[RendererSpec("CPU", "MISSING", renderer="tolk_nonexistent.mod:R", priority=99)]))
    dev = Device["CPU"]  # opening does not touch the renderer
    from tolk_core.errors import PluginError
    with pytest.raises(PluginError, match="cannot load 'tolk_nonexistent.mod:R'"):
        _ = dev.renderer


def test_gates_allow_deny_and_unknown_names(tolk_env, monkeypatch):
    monkeypatch.setenv("TOLK_DISABLE_PLUGINS", "tolk-opencl")
    reg = get_registry()
    assert "OPENCL" not in reg.names
    rec = next(p for p in reg.plugins if p.dist == "tolk-opencl")
    assert rec.state == "disabled" and "TOLK_DISABLE_PLUGINS=tolk-opencl" in rec.reason
    monkeypatch.delenv("TOLK_DISABLE_PLUGINS")
    monkeypatch.setenv("TOLK_PLUGINS", "cpu")  # entry-point name
    Device.reset()
    from tolk_core.plugins import refresh
    reg = refresh()
    assert reg.names == ["CPU", "PYTHON"]  # the built-in reference device is never gated
    assert {p.dist: p.state for p in reg.plugins}["tolk-cuda"] == "disabled"
    monkeypatch.setenv("TOLK_PLUGINS", "tolk-cpuu")
    with pytest.raises(ConfigError, match="TOLK_PLUGINS: unknown plugin 'tolk-cpuu'; did you mean 'tolk-cpu'"):
        refresh()


def test_import_tolk_core_imports_no_backend_library():
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import tolk_core"], capture_output=True,
                         text=True, check=True).stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.splitlines() if "|" in line}
    assert "tolk_core" in imported
    for heavy in ("pyopencl", "pycuda", "tolk_cpu", "tolk_opencl", "tolk_cuda"):
        assert heavy not in imported, heavy
    maps = subprocess.run([sys.executable, "-c", "import tolk_core; print(open('/proc/self/maps').read())"],
                          capture_output=True, text=True, check=True).stdout
    assert "libOpenCL" not in maps and "libcuda" not in maps


def test_core_plugins_package_imports_no_numpy():
    """`tolk_core.plugins` (what an entry-point module imports) pulls in only the standard library, pluggy and
    tolk_core itself: so the suite's import-light check can see a plugin that imports numpy."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import tolk_core.plugins"], capture_output=True,
                         text=True, check=True).stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.splitlines() if "|" in line}
    assert "tolk_core" in imported and "pluggy" in imported
    assert not {"numpy", "ml_dtypes"} & imported
    code = "import json, sys, tolk_core.plugins; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout))
    third_party = loaded - set(sys.stdlib_module_names) - {"tolk_core", "pluggy", "__main__"}
    assert sorted(m for m in third_party if not m.startswith(("__editable__", "_distutils_hack"))) == []


def test_entry_point_modules_are_import_light():
    code = ("import sys, json, tolk_cpu.plugin, tolk_opencl.plugin, tolk_cuda.plugin; "
            "print(json.dumps([m for m in ('pyopencl', 'pycuda') if m in sys.modules])); "
            "print(json.dumps([x for x in ('libOpenCL', 'libcuda') if x in open('/proc/self/maps').read()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert [json.loads(line) for line in out.splitlines()] == [[], []]


# ---- third-party distributions installed on the path with their dist-info (tests/fixtures/site)


@pytest.mark.filterwarnings("ignore::tolk_core.plugins.PluginWarning")
def test_naming_a_device_probes_only_that_backend(tolk_env):
    probed: list[str] = []

    def probe(name):
        return lambda: probed.append(name) or Availability(True, name, 1)

    register(plugin("lazy", [BackendSpec("LAZYA", device=object, probe=probe("LAZYA")),
                             BackendSpec("LAZYB", device=object, probe=probe("LAZYB"))]))
    assert Device.check("lazya") == "LAZYA:0" and probed == ["LAZYA"]
    assert get_registry().get("LAZYA").state == "available" and probed == ["LAZYA"]  # asked once per snapshot
    assert "LAZYB" in {b.name for b in get_registry().available()} and sorted(probed) == ["LAZYA", "LAZYB"]


def test_fixture_device_plugin_appears_and_works(fixture_plugins):
    rec = get_registry().get("FIXTURE")
    assert rec.state == "available" and rec.plugin.dist == "tolk-fixture-device" and rec.plugin.version == "0.1.0"
    dev = Device["fixture:1"]
    assert dev.name == "FIXTURE:1"
    assert dev.self_test().startswith("a*k+b")


@pytest.mark.filterwarnings("ignore::tolk_core.plugins.PluginWarning")
def test_fixture_graph_only_plugin_supplies_cpu_graph(fixture_plugins):
    cpu = get_registry().get("CPU")
    assert cpu.plugin.dist == "tolk-cpu" and cpu.graph.plugin.dist == "tolk-fixture-graph"
    assert Device["CPU"].graph.__name__ == "ReplayGraph"


def test_fixture_broken_conflict_incompatible(fixture_plugins):
    with pytest.warns(PluginWarning, match=r"'tolk-fixture-broken 0.0.1' \(fixture_broken\) is broken: import failed.*"
                      r"TOLK_DISABLE_PLUGINS=tolk-fixture-broken"):
        reg = get_registry()
    broken = next(p for p in reg.plugins if p.dist == "tolk-fixture-broken")
    assert broken.state == "broken" and "ImportError: simulated: libfoo.so.3 not found" in broken.reason
    twins = reg.records("TWIN")
    assert {t.plugin.dist for t in twins} == {"tolk-fixture-twin-a", "tolk-fixture-twin-b"}
    assert all(t.state == "conflict" and "tolk-fixture-twin-a" in t.reason and "tolk-fixture-twin-b" in t.reason
               for t in twins)
    assert reg.get("FUTURE").state == "incompatible" and "2.0" in reg.get("FUTURE").reason
    with pytest.raises(DeviceUnavailableError, match="is in conflict: TWIN is claimed by tolk-fixture-twin-a"):
        Device["TWIN"]
    with pytest.raises(DeviceUnavailableError, match="is incompatible: built for tolk plugin API 2.0"):
        Device["FUTURE"]
    assert reg.get("CPU").state == "available" and Device["CPU"].self_test()


@pytest.mark.filterwarnings("ignore::tolk_core.plugins.PluginWarning")
def test_fixture_disable_by_distribution_name(fixture_plugins, monkeypatch):
    monkeypatch.setenv("TOLK_DISABLE_PLUGINS", "tolk-fixture-twin-b,fixture_broken")
    reg = get_registry()
    assert [t.state for t in reg.records("TWIN")] == ["available"]
    assert {p.dist: p.state for p in reg.plugins}["tolk-fixture-broken"] == "disabled"
