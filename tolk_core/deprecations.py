"""The one table of deprecated plugin-API hooks and attributes, and the warning each gives (docs/plugins.md,
section 11: compatibility policy).

A deprecated name keeps working for one minor release of the plugin API after the one that deprecated it
(`Deprecation.until`), warning with a DeprecationWarning that names its replacement; the next minor release
removes it. Core looks a name up here and calls `warn`; nothing else writes a deprecation message, so the table
is the complete list a plugin author checks before upgrading.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Deprecation:
    """`name` (what a plugin writes), its `replacement`, the plugin-API version that deprecated it (`since`)
    and the last one that accepts it (`until`, one minor later); `where` says what uses it."""
    name: str
    replacement: str
    since: tuple[int, int]
    until: tuple[int, int]
    where: str


DEPRECATED: dict[str, Deprecation] = {d.name: d for d in (
    Deprecation("loop kind as a plain string", "a LoopKind member (tolk_core.render.renderer.LoopKind)", (1, 0),
                (1, 1), "Renderer.render_kernel's loop_kinds values, the kind passed to Renderer.loop_pragma, the "
                "keys of Renderer.loop_pragmas"),
)}


def _v(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def message(name: str, used: str, instead: str) -> str:
    """The warning text for a use of deprecated `name`: what was `used`, what to write `instead` (the entry's
    replacement made specific), since and until when it works."""
    d = DEPRECATED[name]
    return (f"{used}: use {instead} ({name} is deprecated since plugin API {_v(d.since)}, replaced by "
            f"{d.replacement}; accepted through plugin API {_v(d.until)}, removed in the next minor release)")


def warn(name: str, used: str, instead: str, stacklevel: int = 3) -> None:
    """Warn (DeprecationWarning) that deprecated `name` was used (`used`: how) and what to write `instead`."""
    warnings.warn(message(name, used, instead), DeprecationWarning, stacklevel=stacklevel)


def expired(api: tuple[int, int]) -> list[Deprecation]:
    """The entries a plugin API version `api` no longer accepts (past their `until`): a release bumping the
    minor deletes them, and a test keeps the table honest (tests/plugins/test_api_policy.py)."""
    return [d for d in DEPRECATED.values() if api[0] > d.until[0] or (api[0] == d.until[0] and api[1] > d.until[1])]
