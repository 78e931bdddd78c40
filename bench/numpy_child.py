"""The numpy peer, run in a child process whose environment lacks OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
(set on these machines, they make OpenBLAS pick a slower kernel). Prints one JSON object: the best time of each
requested row and the BLAS in use (threadpoolctl).

Usage: python -m bench.numpy_child REPS MIN_TOTAL_S ROW_NAME...
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
    reps, min_total, names = int(sys.argv[1]), float(sys.argv[2]), set(sys.argv[3:])
    times = {}
    for row in rows("CPU"):
        if row.name in names:
            fn = row.numpy(row.setup(np.random.default_rng(0)))
            times[row.name] = best_time(fn, reps, min_total)
    print(json.dumps({"times": times, "blas": blas_info()}))


if __name__ == "__main__":
    main()
