"""The tolk_collectives hook: specs are registered, validated, probed and name-claimed like device specs, and
`tolk devices` lists every provider with its state and reason."""
from __future__ import annotations

import types

import pytest

from tolk_core.cli import devices_data, format_devices
from tolk_core.collectives import ProcessGroup, init_process_group, provider
from tolk_core.errors import CollectiveError
from tolk_core.plugins import Availability, CollectiveSpec, get_registry, hookimpl, register
from tolk_core.plugins.specs import COLLECTIVE_OPS


def plugin(name, *specs):
    mod = types.ModuleType(name)
    mod.tolk_collectives = hookimpl(lambda: list(specs))
    return mod


def _no_mpi(monkeypatch):
    """Leave tolk-mpi out where it is installed, so that the available list is the test's own."""
    if _mpi_installed():
        monkeypatch.setenv("TOLK_DISABLE_PLUGINS", "tolk-mpi")


def _mpi_installed():
    import importlib.metadata as md
    try:
        md.distribution("tolk-mpi")
        return True
    except md.PackageNotFoundError:
        return False


def test_core_ships_the_tcp_reference(tolk_env):
    rec = get_registry().collective("tcp")
    assert rec is not None and rec.plugin.dist == "tolk-core" and rec.state == "available"
    assert rec.spec.persistent and set(rec.spec.ops) == set(COLLECTIVE_OPS)


def test_probe_reason_and_priority(tolk_env, monkeypatch):
    _no_mpi(monkeypatch)
    register(plugin("p", CollectiveSpec("GONE", group=object, probe=lambda: Availability(False, "no wire",
                                                                                        hint="plug it in")),
                    CollectiveSpec("FAST", group=object, priority=50)), name="p")
    reg = get_registry()
    gone = reg.collective("GONE")
    assert (gone.state, gone.reason, gone.hint) == ("unavailable", "no wire", "plug it in")
    assert [c.name for c in reg.available_collectives()] == ["FAST", "TCP"]
    with pytest.raises(CollectiveError, match="GONE is unavailable: no wire; fix: plug it in"):
        provider("GONE")
    with pytest.raises(CollectiveError, match="unknown collectives provider 'NOPE'"):
        provider("NOPE")


def test_incompatible_api_major(tolk_env):
    register(plugin("f", CollectiveSpec("FUT", group=object, api_version=(2, 0))), name="f")
    rec = get_registry().collective("FUT")
    assert rec.state == "incompatible" and "built for tolk plugin API 2.0" in rec.reason


@pytest.mark.parametrize("spec, message", [
    (CollectiveSpec("bad name", group=object), "must be upper-case"),
    (CollectiveSpec("X", group=object, ops=("allreduce_sum", "alltoall")), "unknown operations ['alltoall']"),
])
def test_invalid_spec_breaks_the_plugin_with_a_named_message(tolk_env, spec, message):
    register(plugin("bad", spec), name="bad")
    with pytest.warns(UserWarning):
        reg = get_registry()
    rec = next(p for p in reg.plugins if p.name == "bad")
    assert rec.state == "broken" and message in rec.reason


def test_two_claims_conflict_and_core_keeps_tcp(tolk_env):
    register(plugin("a", CollectiveSpec("RING", group=object), CollectiveSpec("TCP", group=object, priority=9)),
             name="a")
    register(plugin("b", CollectiveSpec("RING", group=object)), name="b")
    reg = get_registry()
    assert [c.state for c in reg.collectives if c.name == "RING"] == ["conflict", "conflict"]
    tcp = [(c.plugin.dist, c.state) for c in reg.collectives if c.name == "TCP"]
    assert sorted(tcp) == [("<runtime>", "conflict"), ("tolk-core", "available")]
    assert reg.collective("TCP").plugin.dist == "tolk-core"


def test_factory_must_return_a_process_group(tolk_env):
    register(plugin("w", CollectiveSpec("WRONG", group=lambda timeout: object())), name="w")
    with pytest.raises(CollectiveError, match="contract CollectiveSpec.group broken"):
        init_process_group("WRONG")


def test_tolk_devices_lists_collectives_with_state_and_reason(tolk_env):
    register(plugin("p", CollectiveSpec("GONE", group=object, probe=lambda: Availability(False, "no wire"))),
             name="p")
    data = devices_data(get_registry())
    rows = {c["name"]: c for c in data["collectives"]}
    assert rows["TCP"]["state"] == "available" and rows["GONE"]["state"] == "unavailable"
    text = format_devices(data)
    assert "COLLECTIVES" in text and "GONE" in text and "no wire" in text
    assert isinstance(init_process_group("TCP", timeout=5), ProcessGroup)
