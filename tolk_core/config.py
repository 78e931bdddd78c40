"""Settings and where each value came from. Values only: device resolution lives in `plugins/`.

Public API (kept stable; the foundation issue adds file sources behind it):
  get(name)            the effective, typed value of a setting
  override(**values)   a context manager that pins values (tests, notebooks)
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tolk_core.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    doc: str


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("DEBUG", int, 0, "1 device opens and kernel counts, 2 one line per kernel, 3 scheduled graph, "
            "4 rendered source, 5+ rewrites"),
    Setting("SPEC", int, 0, "validate each stage's graph against its spec"),
    Setting("JIT", int, 1, "0 runs jitted functions eagerly; 2 captures but never batches into graphs"),
    Setting("JIT_BATCH_SIZE", int, 32, "launches in the first graph batch; doubles per batch"),
    Setting("SPLIT_REDUCEOP", int, 1, "split large reductions over few outputs in two kernels"),
    Setting("REDUCEOP_SPLIT_SIZE", int, 22, "log2 cap on the first stage's output of a split reduction"),
    Setting("REDUCEOP_SPLIT_THRESHOLD", int, 32768, "input/output element ratio above which a reduction splits"),
    Setting("NOOPT", int, 0, "disable kernel optimizations (upcast, unroll, threads, locals)"),
)}

_overrides: dict[str, Any] = {}


def _convert(setting: Setting, raw: Any, where: str) -> Any:
    try:
        return setting.type(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {setting.name}={raw!r} is not a valid {setting.type.__name__}") from None


def get(name: str) -> Any:
    """The effective value of setting `name`: override > environment > default."""
    setting = SETTINGS.get(name)
    if setting is None:
        raise ConfigError(f"unknown setting {name!r}")
    if name in _overrides:
        return _overrides[name]
    if (raw := os.environ.get(name)) is not None:
        return _convert(setting, raw, "environment")
    return setting.default


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Pin settings for the duration of a `with` block."""
    for k in values:
        if k not in SETTINGS:
            raise ConfigError(f"unknown setting {k!r}")
    saved = dict(_overrides)
    _overrides.update({k: _convert(SETTINGS[k], v, "override") for k, v in values.items()})
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
