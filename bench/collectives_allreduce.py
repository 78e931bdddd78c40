"""Allreduce latency and bandwidth: tolk-mpi's group, the TCP reference and mpi4py called directly, interleaved
in one mpiexec job (rank 0's time per call, median over REPS calls of each, float32 sum).

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec -n 2 --oversubscribe \\
        python -m bench.collectives_allreduce [--reps 200] [--sizes 256,1048576,4194304,16777216]

The TCP group joins beside MPI: rank 0 takes a free port and MPI broadcasts it. Each round runs every engine
once, in a rotating order, after a barrier, so that load on a shared host hits them alike.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def _tcp_group(comm, timeout: float):
    from tolk_core.collectives.launch import free_port
    from tolk_core.collectives.tcp import TcpGroup
    port = comm.bcast(free_port() if comm.Get_rank() == 0 else None, root=0)
    os.environ.update(TOLK_RANK=str(comm.Get_rank()), TOLK_WORLD_SIZE=str(comm.Get_size()),
                      TOLK_MASTER_ADDR="127.0.0.1", TOLK_MASTER_PORT=str(port))
    return TcpGroup.join(timeout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--sizes", default="256,1048576,4194304,16777216")
    a = ap.parse_args()
    from mpi4py import MPI
    from tolk_mpi.group import MpiGroup
    comm = MPI.COMM_WORLD
    mpi_g, tcp_g = MpiGroup.join(60.0), _tcp_group(comm, 60.0)
    for n in [int(s) for s in a.sizes.split(",")]:
        x, out = np.ones(n, np.float32), np.empty(n, np.float32)
        req = mpi_g.allreduce_init(x, "sum")  # the JIT's path: agreed once when bound (docs/distributed.md)

        def persistent(req=req) -> None:
            req.start()
            req.wait()
        engines = {"mpi4py": lambda x=x, out=out: comm.Allreduce(x, out, op=MPI.SUM),
                   "tolk-mpi": lambda x=x: mpi_g.allreduce(x, "sum"),
                   "tolk-mpi-persistent": persistent,
                   "tolk-tcp": lambda x=x: tcp_g.allreduce(x, "sum")}
        names = list(engines)
        times: dict[str, list[float]] = {k: [] for k in names}
        for name in names:  # warm-up
            engines[name]()
        for i in range(a.reps):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                comm.Barrier()
                t0 = time.perf_counter()
                engines[name]()
                times[name].append(time.perf_counter() - t0)
        if comm.Get_rank() == 0:
            med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
            print(f"ranks={comm.Get_size()} floats={n} ({n * 4 / 1024:g} KiB) reps={a.reps} median us: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in med.items())
                  + f"; tolk-mpi/mpi4py {med['tolk-mpi'] / med['mpi4py']:.2f}, persistent/mpi4py "
                  f"{med['tolk-mpi-persistent'] / med['mpi4py']:.2f}; load {os.getloadavg()[0]:.1f}", flush=True)
        req.close()
    tcp_g.close()
    mpi_g.close()


if __name__ == "__main__":
    main()
