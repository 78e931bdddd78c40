"""tuned: the tuning cache as the engine reads it: which choices a kernel is planned with on a device.

A kernel with an entry in the tuning cache (tolk_core/tune/cache.py) is generated under the entry's choices
wherever it is compiled (eager runs, the JIT), so a program tuned once starts tuned in every later process. The
key is the kernel's AST text with the device's kind, renderer and compiler identity (docs/tuning.md).
"""
from __future__ import annotations

from typing import Any

from tolk_core import config
from tolk_core.codegen.choices import Choices, parse
from tolk_core.counters import GlobalCounters
from tolk_core.engine.source_cache import structure_text
from tolk_core.errors import ConfigError, TolkError
from tolk_core.ir.uop import UOp
from tolk_core.tune import cache


def device_kind(name: str) -> str:
    """A device name without its index: tuning applies to every device of one kind alike (CPU:1 as CPU:0)."""
    return name.partition(":")[0]


def tune_key(ast: UOp, name: str, device: Any) -> str | None:
    """The tuning-cache key of kernel `ast` on device `name` (opened as `device`), None when the AST has no
    stable text."""
    if (text := structure_text(ast)) is None:
        return None
    renderer = f"{type(device.renderer).__module__}.{type(device.renderer).__qualname__}"
    return cache.key(text, device_kind(name), renderer, device.compiler.resolved_identity())


def start_choices() -> Choices:
    """The plan every kernel without a tuning entry gets and a search starts from: TUNE_START's choices, or the
    heuristics' own (empty)."""
    text = config.get("TUNE_START")
    if not text:
        return Choices()
    try:
        return parse(text)
    except ValueError as e:
        raise ConfigError(f"TUNE_START={text!r}: {e}") from None


def planned_choices(ast: UOp, name: str, device: Any) -> Choices | None:
    """The choices kernel `ast` is generated with on device `name`: its tuning entry's, else TUNE_START's, else
    None (the heuristics')."""
    tuned = tuned_choices(ast, name, device)
    if tuned is not None:
        return tuned
    start = start_choices()
    return start if start.values else None


def tuned_choices(ast: UOp, name: str, device: Any) -> Choices | None:
    """The choices kernel `ast` was tuned to on device `name`, or None (never tuned, or the caches are off).
    An entry that kept the heuristic's plan gives the empty Choices."""
    if config.get("DISABLE_COMPILER_CACHE") or not cache.any_entries():
        return None  # nothing tuned here: no key to compute (it asks the compiler for its identity)
    try:
        key = tune_key(ast, name, device)
    except TolkError:  # the compiler's identity query failed: the compile itself reports it, with its context
        return None
    if key is None or (entry := cache.lookup(key)) is None:
        return None
    GlobalCounters.tune_cache_hits += 1
    return Choices.of(entry.choices)
