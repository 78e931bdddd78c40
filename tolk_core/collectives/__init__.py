"""Collectives across the processes of a job: the ProcessGroup contract, provider selection and the reference
provider TCP (docs/plugins.md, section 12).

    from tolk_core.collectives import init_process_group
    with init_process_group() as g:          # TOLK_COLLECTIVES picks a provider, else the best available
        total = g.allreduce(grad, "sum")

A provider is a plugin's ``tolk_collectives`` hook (CollectiveSpec); tolk-core ships TCP (tolk_core.collectives.tcp),
which needs nothing but sockets, and `launch` starts N local ranks for it.
"""
from __future__ import annotations

from tolk_core import config
from tolk_core.collectives.group import DTYPES, REDUCE_OPS, PersistentOp, ProcessGroup, reduce_arrays
from tolk_core.errors import CollectiveError, CollectiveTimeoutError
from tolk_core.plugins import CollectiveRecord, get_registry, resolve_ref


def provider(name: str | None = None) -> CollectiveRecord:
    """The collectives provider `name` (or TOLK_COLLECTIVES, or the best available). Raises CollectiveError
    naming its state and reason when it cannot be used."""
    reg = get_registry()
    name = name or config.get("COLLECTIVES")
    if name is None:
        avail = reg.available_collectives()
        if not avail:
            raise CollectiveError("no collectives provider is available (tolk-core's TCP always should be: run "
                                  "`tolk devices`)")
        return avail[0]
    rec = reg.collective(name)
    if rec is None:
        known = ", ".join(sorted({c.name for c in reg.collectives})) or "none"
        raise CollectiveError(f"unknown collectives provider {name!r} (installed: {known})")
    if rec.state != "available":
        raise CollectiveError(f"collectives provider {rec.name} is {rec.state}: {rec.reason}"
                              + (f"; fix: {rec.hint}" if rec.hint else ""))
    return rec


def init_process_group(name: str | None = None, *, timeout: float | None = None) -> ProcessGroup:
    """Join the job this process was launched into through provider `name` (see `provider`). `timeout`: seconds an
    operation may wait for another rank (default TOLK_COLLECTIVES_TIMEOUT)."""
    rec = provider(name)
    group = resolve_ref(rec.spec.group)(float(timeout if timeout is not None else config.get("COLLECTIVES_TIMEOUT")))
    if not isinstance(group, ProcessGroup):
        raise CollectiveError(f"collectives provider {rec.name} ({rec.plugin.provider}): contract CollectiveSpec.group "
                              f"broken: its factory returned {type(group).__name__}, not a tolk_core.collectives."
                              "ProcessGroup")
    return group


__all__ = ["DTYPES", "REDUCE_OPS", "CollectiveError", "CollectiveTimeoutError", "PersistentOp", "ProcessGroup",
           "init_process_group", "provider", "reduce_arrays"]
