"""The plugin API's version and compatibility policy (docs/plugins.md, section 11): one deprecation table, each
entry accepted for exactly one minor release and warning with its replacement; a newer minor loads."""
from __future__ import annotations

import types

import pytest

from tolk_core import deprecations
from tolk_core.plugins import API_VERSION, Availability, BackendSpec, get_registry, hookimpl, register
from tolk_core.render.renderer import LoopKind


def test_each_deprecation_lasts_one_minor_release_and_none_has_expired():
    assert deprecations.DEPRECATED
    for d in deprecations.DEPRECATED.values():
        assert d.until == (d.since[0], d.since[1] + 1), d  # warned for one minor release
        assert d.replacement and d.where
    # a release past an entry's `until` must delete it (and the code accepting it): this fails until it does
    assert deprecations.expired(API_VERSION) == []
    assert [d.name for d in deprecations.expired((API_VERSION[0], API_VERSION[1] + 1))] == \
        [d.name for d in deprecations.DEPRECATED.values() if d.until == API_VERSION]


def test_a_deprecated_use_warns_naming_the_replacement_and_the_last_version():
    with pytest.warns(DeprecationWarning) as rec:
        assert LoopKind.of("simd", stacklevel=2) is LoopKind.SIMD  # 2: blame this line
    (w,) = rec
    assert str(w.message) == (
        "loop kind 'simd' given as a plain string: use LoopKind.SIMD (loop kind as a plain string is deprecated "
        "since plugin API 1.0, replaced by a LoopKind member (tolk_core.render.renderer.LoopKind); accepted "
        "through plugin API 1.1, removed in the next minor release)")
    assert w.filename == __file__  # blamed on the caller


def test_a_spec_for_a_newer_minor_loads_and_another_major_does_not(tolk_env):
    mod = types.ModuleType("future")
    mod.tolk_backends = hookimpl(lambda: [
        BackendSpec("NEWMINOR", device=object, api_version=(API_VERSION[0], API_VERSION[1] + 3),
                    probe=lambda: Availability(True, "ok")),
        BackendSpec("NEWMAJOR", device=object, api_version=(API_VERSION[0] + 1, 0))])
    register(mod, name="future")
    reg = get_registry()
    assert reg.get("NEWMINOR").state == "available"
    assert reg.get("NEWMAJOR").state == "incompatible"
