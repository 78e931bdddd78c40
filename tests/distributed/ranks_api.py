"""A job script for tests/distributed/test_api.py: every rank calls tolk_core.distributed's API on inputs
derived from its rank and writes what it got to DIR/rank<N>.json."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tolk_core import Tensor
from tolk_core import distributed as dist
from tolk_core.errors import CollectiveError


def main(out: Path) -> None:
    dist.init()
    r = dist.rank()
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) * (r + 1))
    got: dict = {"rank": r, "size": dist.world_size(), "devices": list(dist.devices("CPU"))}
    for op in ("sum", "mean", "max", "min"):
        got[op] = dist.all_reduce(x, op).numpy().tolist()
    got["mean_int"] = dist.all_reduce(Tensor(np.array([-3, 4, 5], np.int32) * (r + 1)), "mean").numpy().tolist()
    w = Tensor(np.full(4, float(r + 10), np.float32))
    w.to_(dist.devices("CPU"))
    dist.broadcast_parameters([w])
    got["broadcast"] = w.numpy().tolist()
    dist.check_replicated([w])  # equal after the broadcast: no error
    try:
        dist.check_replicated([w, Tensor(np.full(2, float(r), np.float32))])
        got["mismatch"] = None
    except CollectiveError as e:
        got["mismatch"] = str(e)
    got["part"] = list(dist.part(7))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{r}.json").write_text(json.dumps(got))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
