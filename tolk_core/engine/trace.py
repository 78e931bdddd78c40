"""trace: a profile's launches as a Chrome / Perfetto trace (docs/performance.md, "Traces").

The JSON trace event format (the `traceEvents` array that chrome://tracing and ui.perfetto.dev read): one
complete event (`"ph": "X"`) per launch, named after its kernel, on one track per device (the process is Tolk,
each device a thread, named by metadata events). `ts` and `dur` are microseconds; a launch ends at the host time
its call returned (profiled launches wait for the device) and lasts its measured time, so the events lie on one
timeline with gaps where the host worked between launches. `args` hold the launch's counts (docs/performance.md,
"Profiling"): executed and nominal operations, FLOPs, bytes, work ratio, and the kernel's tensor ops.
"""
from __future__ import annotations

import json
import os
from typing import Any

from tolk_core.engine.profile import Profile

_PID = 1


def trace_events(prof: Profile) -> dict[str, Any]:
    """The trace of `prof`'s launches (a profile opened with `trace=`, else no events) as a JSON object."""
    launches = prof.launches or []
    tids = {dev: i + 1 for i, dev in enumerate(dict.fromkeys(launch.device for launch in launches))}
    origin = min((launch.end_s - launch.seconds for launch in launches), default=0.0)
    ops = {(r.device, r.name): r.ops for r in prof.rows}
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": "tolk"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": dev}}
               for dev, tid in tids.items()]
    for launch in launches:
        c = launch.cost
        events.append({"name": launch.name, "cat": "kernel", "ph": "X", "pid": _PID, "tid": tids[launch.device],
                       "ts": (launch.end_s - launch.seconds - origin) * 1e6, "dur": launch.seconds * 1e6,
                       "args": {"device": launch.device, "executed": c.executed, "nominal": c.nominal,
                                "flops": c.flops, "bytes": c.bytes, "work_ratio": round(c.work_ratio, 4),
                                "ops": ops.get((launch.device, launch.name), "")}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(prof: Profile, path: str | os.PathLike[str]) -> None:
    """Write `prof`'s trace to `path` (JSON), creating its folder."""
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        json.dump(trace_events(prof), f)
