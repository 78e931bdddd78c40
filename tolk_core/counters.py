"""GlobalCounters: process-wide counts of work done, for tests, benchmarks and users.

Counts only grow; take differences around the code you measure (`GlobalCounters.snapshot()`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class _Counters:
    kernels_launched: int = 0   # program launches (one per kernel call, inside a graph replay too)
    graph_replays: int = 0      # JIT replays of a batch through a device's Graph (one per batch per call)
    graph_kernels: int = 0      # the kernel launches those batched replays made (included in kernels_launched)
    eager_graph_replays: int = 0  # eager realizes (schedule-cache hits) replayed through a device's Graph
    compiles: int = 0           # compiler invocations (a miss in both the memory and the disk cache)
    disk_cache_hits: int = 0    # binaries loaded from the on-disk cache instead of compiled
    kernels_compiled: int = 0   # kernels the engine handed to a device's compiler (not yet loaded in this process)
    programs_shared: int = 0    # programs a device loaded from the module another device compiled (multi-device)
    copies_direct: int = 0      # copies between devices made host memory to host memory, with no staging copy
    copies_device: int = 0      # copies between devices the destination device made itself (copy_from_peer)
    allreduces: int = 0         # collective allreduces run (docs/multi-device.md)
    allreduces_direct: int = 0  # of those, folded on each device straight from the others' memory (no copy)
    concurrent_runs: int = 0    # several devices' queued launches run at once (engine/concurrent.py)
    bytes_copied: int = 0       # bytes copied between host and device buffers (copyin and copyout)
    schedules: int = 0          # tensor graphs scheduled into kernels
    schedule_cache_hits: int = 0  # schedules reused from the cache (structurally equal graph: no scheduling)
    tune_searches: int = 0      # kernels whose plan a search (BEAM) tuned in this process
    tune_cache_hits: int = 0    # kernels planned from the tuning cache's entry (no search)
    time_sum_s: float = 0.0     # kernel time, when DEBUG>=2 makes launches wait and time themselves

    def snapshot(self) -> dict[str, float]:
        return asdict(self)

    def reset(self) -> None:
        for k, v in asdict(_Counters()).items():
            setattr(self, k, v)


GlobalCounters = _Counters()
