"""Data-parallel training of the digits MLP across processes (docs/distributed.md): the program of
docs/multi-device.md with one change, its device tuple (one CPU per rank).

    tolk launch -n 2 examples/distributed/train_digits.py --steps 50 [--jit] [--out losses.json]
    python examples/distributed/train_digits.py --single        # the same training in one process, no tuple

Every rank draws the same initial weights and batches from one seed (checked: check_replicated) and computes
its rows of each batch; the gradients' allreduce goes through the collectives provider. Rank 0 prints and
writes the loss curve. --local-data builds each batch from the rank's own rows only (local_rows, shard_local).
--die-at STEP --die-rank R makes rank R exit at that step (the fault tests).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import tolk_core
from tolk_core import Tensor
from tolk_core import distributed as dist
from tolk_core.demo import load_digits, mlp_sgd


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--jit", action="store_true", help="jit the training step")
    ap.add_argument("--single", action="store_true", help="one process, no device tuple (the reference)")
    ap.add_argument("--local-data", action="store_true", help="each rank builds its batch from its own rows")
    ap.add_argument("--out", default=None, help="rank 0 writes the losses (and seconds per step) here as JSON")
    ap.add_argument("--die-at", type=int, default=-1, help="a rank exits at this step (fault tests)")
    ap.add_argument("--die-rank", type=int, default=1)
    return ap.parse_args()


def main() -> None:
    a = _args()
    dist.init()
    devs = None if a.single else dist.devices("CPU")
    images, labels = load_digits()
    rng = np.random.default_rng(0)
    params, step = mlp_sgd(rng, devices=devs)  # the same draws on every rank (one seed): checked here
    if devs:
        dist.check_replicated(params)

    run = tolk_core.jit(step) if a.jit else step
    losses, seconds = [], []
    for i in range(a.steps):
        idx = rng.integers(0, len(images), a.batch)
        if devs and a.local_data:
            x = dist.shard_local(dist.local_rows(images[idx]), devs, a.batch).realize()
            y = dist.shard_local(dist.local_rows(labels[idx]), devs, a.batch).realize()
        else:
            x, y = Tensor(images[idx]), Tensor(labels[idx])
            if devs:
                x, y = x.shard(devs, axis=0).realize(), y.shard(devs, axis=0).realize()
        if i == a.die_at and dist.rank() == a.die_rank:  # a rank dies mid-run: the others meet it in the allreduce
            print(f"train_digits: rank {dist.rank()} exits at {time.time():.3f}", file=sys.stderr, flush=True)
            os._exit(7)
        t0 = time.perf_counter()
        losses.append(run(x, y).item())
        seconds.append(time.perf_counter() - t0)
        if i % 10 == 0 or i == a.steps - 1:
            dist.print0(f"step {i:3d} loss {losses[-1]:.4f} (rank 0 of {dist.world_size()})", flush=True)
    if a.out and dist.rank() == 0:
        with open(a.out, "w") as f:
            json.dump({"losses": losses, "seconds": seconds, "ranks": dist.world_size()}, f)


if __name__ == "__main__":
    main()
