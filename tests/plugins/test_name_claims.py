"""Name claims: a third-party claim on a shipped device name leaves the shipped device usable and says how to
choose; renderer names clashing on one device are reported; specs for a device nobody declares are listed."""
from __future__ import annotations

import types

from tolk_core.cli import devices_data, format_devices
from tolk_core.plugins import BackendSpec, Device, GraphSpec, RendererSpec, get_registry, hookimpl, register
from tolk_core.runtime import Graph


def plugin(name, backends=(), graphs=(), renderers=()):
    mod = types.ModuleType(name)
    mod.tolk_backends = hookimpl(lambda: list(backends))
    mod.tolk_graphs = hookimpl(lambda: list(graphs))
    mod.tolk_renderers = hookimpl(lambda: list(renderers))
    return mod


def test_third_party_cpu_claim_keeps_the_shipped_cpu(tolk_env):
    register(plugin("mycpu", [BackendSpec("CPU", device=object, priority=99)]), name="mycpu")
    recs = get_registry().records("CPU")
    assert [(r.plugin.dist, r.state) for r in recs] == [("tolk-cpu", "available"), ("<runtime>", "conflict")]
    assert "also claimed by tolk-cpu 0.1.0, shipped with tolk-core, which keeps the name" in recs[1].reason
    assert "TOLK_DISABLE_PLUGINS=tolk-cpu" in recs[1].hint
    assert Device.DEFAULT == "CPU" and type(Device["CPU"]).__module__ == "tolk_cpu.runtime"


def test_renderer_name_clash_is_reported_and_the_shipped_one_kept(tolk_env):
    register(plugin("myc", renderers=[RendererSpec("CPU", "C", renderer=lambda dev: None)]), name="myc")
    reg = get_registry()
    assert reg.get("CPU").renderer.spec.renderer == "tolk_cpu.renderer:CRenderer"
    clash = [r for r in reg.rejected if r.state == "conflict"]
    assert len(clash) == 1 and clash[0].plugin.name == "myc"
    assert "renderer name 'C' for CPU is already supplied by tolk-cpu 0.1.0" in clash[0].reason


def test_orphaned_specs_are_listed_by_tolk_devices_verbose(tolk_env):
    register(plugin("orph", graphs=[GraphSpec("NOPE", Graph)], renderers=[RendererSpec("NOPE", "N", object)]),
             name="orph")
    out = format_devices(devices_data(get_registry()), verbose=True)
    assert "ignored GraphSpec for NOPE from <runtime>: orphaned: no loaded plugin declares the device NOPE" in out
    assert "ignored RendererSpec for NOPE from <runtime>: orphaned:" in out
