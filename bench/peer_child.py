"""One peer (numpy, torch or tinygrad) timed in its own process, so its thread pools never share the cores
with Tolk's (or another peer's) while either is timed. numpy's child runs without OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE (set on these machines, they make OpenBLAS pick a slower kernel) and records the BLAS in use
(threadpoolctl). Prints one JSON object: the best time of each requested row, errors, and the BLAS.

Usage: python -m bench.peer_child PEER DEVICE REPS MIN_TOTAL_S ROW_NAME...  (DEVICE: Tolk's, for tinygrad's)
"""
from __future__ import annotations

import json
import sys

import numpy as np

from bench.rows import rows
from bench.timing import best_time


def blas_info() -> list[dict[str, object]]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"error": "threadpoolctl not installed"}]
    return [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for d in threadpool_info() if d.get("user_api") == "blas"]


def main() -> None:
    peer, device, reps, min_total = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    names = set(sys.argv[5:])
    times, errors = {}, {}
    for row in rows(device):
        impl = getattr(row, peer)
        if row.name not in names or impl is None:
            continue
        try:
            times[row.name] = best_time(impl(row.setup(np.random.default_rng(0))), reps, min_total)
        except Exception as e:  # noqa: BLE001 - a peer's failure is reported, not fatal
            errors[row.name] = f"{type(e).__name__}: {e}"[:200]
    print(json.dumps({"times": times, "errors": errors, "blas": blas_info() if peer == "numpy" else None}))


if __name__ == "__main__":
    main()
