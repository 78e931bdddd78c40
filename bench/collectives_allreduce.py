"""Allreduce latency and bandwidth: tolk-mpi's group, the TCP reference and mpi4py called directly, interleaved
in one mpiexec job (rank 0's time per call, median over REPS calls of each, float32 sum).

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec -n 2 --oversubscribe \\
        python -m bench.collectives_allreduce [--reps 200] [--big-reps N] [--sizes 256,1048576,4194304,16777216]

Engines (each reuses one input and one result array across calls, as mpi4py's own call does):
  mpi4py      comm.Allreduce(x, out) on COMM_WORLD
  tolk-mpi    group.allreduce(x, out=out): agreement, then MPI on the caller's buffers
  tolk-mpi-new  group.allreduce(x): the same, returning a new array each call
  persistent  allreduce_init(x) once, start()/wait() per call (what a jitted step replays)
  tolk-tcp    the reference provider, group.allreduce(x, out=out)

The TCP group joins beside MPI: rank 0 takes a free port and MPI broadcasts it. Each round runs every engine
once, in a shuffled order, each call after a barrier, so that load on a shared host hits them alike. Rank 0 prints one
line per size and, at the end, markdown rows (docs/performance.md, "Collectives").
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _tcp_group(comm: Any, timeout: float) -> Any:
    from tolk_core.collectives.launch import free_port
    from tolk_core.collectives.tcp import TcpGroup
    port = comm.bcast(free_port() if comm.Get_rank() == 0 else None, root=0)
    os.environ.update(TOLK_RANK=str(comm.Get_rank()), TOLK_WORLD_SIZE=str(comm.Get_size()),
                      TOLK_MASTER_ADDR="127.0.0.1", TOLK_MASTER_PORT=str(port))
    return TcpGroup.join(timeout)


def _engines(comm: Any, mpi_g: Any, tcp_g: Any, n: int) -> tuple[dict[str, Callable[[], Any]], Callable[[], None]]:
    """The engines for n float32 elements, and a function that frees what they bound."""
    from mpi4py import MPI
    x, out = np.ones(n, np.float32), np.empty(n, np.float32)
    req = mpi_g.allreduce_init(x, "sum")  # the JIT's path: agreed once when bound (docs/distributed.md)

    def persistent() -> None:
        req.start()
        req.wait()
    return {"mpi4py": lambda: comm.Allreduce(x, out, op=MPI.SUM),
            "tolk-mpi": lambda: mpi_g.allreduce(x, "sum", out=out),
            "tolk-mpi-new": lambda: mpi_g.allreduce(x, "sum"),
            "persistent": persistent,
            "tolk-tcp": lambda: tcp_g.allreduce(x, "sum", out=out)}, req.close


def _time(comm: Any, engines: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Median seconds per call of each engine over `reps` interleaved rounds (barrier before each call). Each
    round's order is a permutation drawn from the round's number, the same on every rank: with a rotation each
    engine always follows the same one, and the engine after mpi4py measured ~10% slower at 1 KiB than the
    same engine elsewhere in the round."""
    names = list(engines)
    times: dict[str, list[float]] = {k: [] for k in names}
    for name in names:  # warm-up
        engines[name]()
    for i in range(reps):
        order = names.copy()
        random.Random(i).shuffle(order)
        for name in order:
            comm.Barrier()
            t0 = time.perf_counter()
            engines[name]()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _fmt(s: float) -> str:
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--sizes", default="256,1048576,4194304,16777216", help="float32 elements (1 KiB, 4, 16, 64 MiB)")
    ap.add_argument("--big-reps", type=int, default=None,
                    help="reps at sizes of 64 MiB and more (default --reps; the TCP star is slow there)")
    a = ap.parse_args()
    from mpi4py import MPI
    from tolk_mpi.group import MpiGroup
    comm = MPI.COMM_WORLD
    mpi_g, tcp_g = MpiGroup.join(60.0), _tcp_group(comm, 60.0)
    rows = []
    for n in [int(s) for s in a.sizes.split(",")]:
        engines, free = _engines(comm, mpi_g, tcp_g, n)
        reps = a.big_reps if a.big_reps is not None and n * 4 >= 1 << 26 else a.reps
        med = _time(comm, engines, reps)
        free()
        load = os.getloadavg()[0]
        if comm.Get_rank() == 0:
            size = f"{n * 4 / 1024:g} KiB" if n * 4 < 1 << 20 else f"{n * 4 / (1 << 20):g} MiB"
            ratio = {k: v / med["mpi4py"] for k, v in med.items()}
            print(f"ranks={comm.Get_size()} {size} reps={reps} load={load:.1f} median: "
                  + ", ".join(f"{k} {_fmt(v)} ({ratio[k]:.2f})" for k, v in med.items()), flush=True)
            rows.append(f"| {comm.Get_size()} | {size} | {reps} | " + " | ".join(
                f"{_fmt(v)}" + ("" if k == "mpi4py" else f" ({ratio[k]:.2f})") for k, v in med.items())
                + f" | {load:.1f} |")
    if comm.Get_rank() == 0:
        print("| ranks | size | calls | " + " | ".join(engines) + " | load |")
        print("|---" * (len(engines) + 4) + "|")
        print("\n".join(rows), flush=True)
    tcp_g.close()
    mpi_g.close()


if __name__ == "__main__":
    main()
