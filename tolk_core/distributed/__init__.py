"""Tolk across processes and machines (docs/distributed.md): one process per rank, started by `tolk launch`.

    from tolk_core import distributed as dist
    dist.init()                                  # size 1 when the script was not launched
    DEVS = dist.devices("CPU")                   # ("CPU@rank0", "CPU@rank1", ...): one device per rank
    w.to_(DEVS)                                  # replicated; dist.broadcast_parameters([w]) copies rank 0's
    x = Tensor(batch).shard(DEVS, axis=0)        # each rank computes only its own rows
    loss.backward()                              # the gradients' ALLREDUCE runs through the collectives provider

The device tuple is the data-parallel program's only change from one process with several devices
(docs/multi-device.md): a tuple whose devices are other ranks' (runtime/ranks.py) is computed by each rank on
its own device only, and the allreduce the scheduler inserts is carried by the joined process group
(tolk_core.collectives). `all_reduce` reduces a Tensor directly; `part` and `local_rows` give a rank its share
of the data, `shard_local` builds a sharded batch from it; `print0` and `save` act on rank 0 only.
"""
from __future__ import annotations

import atexit
import builtins
import os
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from tolk_core.collectives import ProcessGroup, init_process_group
from tolk_core.collectives.world import joined, set_world, world
from tolk_core.engine import buffers
from tolk_core.errors import ArgumentTypeError, CollectiveError, ShapeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.runtime import ranks
from tolk_core.schedule import multi

# what a launcher sets in each rank's environment: tolk's own launcher (TCP), Open MPI, PMIx (Slurm's srun), PMI
LAUNCHED_BY = {"TOLK_WORLD_SIZE": "TCP", "OMPI_COMM_WORLD_SIZE": "MPI", "PMIX_RANK": "MPI", "PMI_SIZE": "MPI"}
REDUCE_OPS = ("sum", "mean", "max", "min")


def _launcher_provider() -> tuple[bool, str]:
    """Whether this process was launched as a rank, and the provider its launcher implies."""
    for var, name in LAUNCHED_BY.items():
        if var in os.environ:
            return True, name
    return False, ""


def init(provider: str | None = None, *, timeout: float | None = None) -> ProcessGroup | None:
    """Join the job this process was launched into (idempotent) and return its process group; a process not
    launched as a rank is a job of one (rank 0, size 1, no group). `provider` (else TOLK_COLLECTIVES, else the
    launcher's: MPI under mpiexec or srun, TCP under tolk's own launcher) and `timeout` as in
    tolk_core.collectives.init_process_group."""
    if (g := joined()) is not None and not g.closed:
        return g
    launched, implied = _launcher_provider()
    if not launched:
        ranks.set_place(0, 1)
        return None
    name = provider or os.environ.get("TOLK_COLLECTIVES") or implied
    g = init_process_group(name, timeout=timeout)
    set_world(g)
    atexit.register(g.close)
    return g


def rank() -> int:
    """This process's rank (0 when not launched)."""
    return ranks.place()[0]


def world_size() -> int:
    """The number of ranks of the job (1 when not launched)."""
    return ranks.place()[1]


def devices(device: str = "CPU") -> tuple[str, ...]:
    """One `device` per rank, rank order: ``("CPU@rank0", "CPU@rank1", ...)`` canonicalized, so this rank's
    entry is its local device (``"CPU"``) and the others are remote (runtime/ranks.py). Size 1: ``(device,)``.
    Name a local index where a rank has several devices of a kind (``devices("CUDA:0")``)."""
    from tolk_core.frontend.sharding import resolve_devices
    return resolve_devices([f"{device}@rank{r}" for r in range(world_size())])


def all_reduce(tensor: Tensor, op: str = "sum") -> Tensor:
    """A new Tensor (on `tensor`'s device) holding `op` ("sum", "mean", "max", "min") of every rank's `tensor`,
    elementwise; every rank must call it with the same shape and dtype (a mismatch raises CollectiveError on
    every rank). Without a job it is a copy of `tensor`."""
    if op not in REDUCE_OPS:
        raise ArgumentTypeError(f"all_reduce: op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")
    host = tensor.numpy()
    if joined() is not None:
        host = world().allreduce(host, "sum" if op == "mean" else op)
        if op == "mean":  # integers: C's division, toward zero, as the allreduce's mean (docs/multi-device.md)
            host = (host / world_size() if host.dtype.kind == "f" else np.trunc(host / world_size())).astype(host.dtype)
    return Tensor(np.array(host, copy=True), device=tensor.device)


def broadcast_parameters(tensors: Sequence[Tensor], root: int = 0) -> None:
    """Overwrite every tensor of `tensors` with rank `root`'s values (in place: optimizers holding them follow):
    the initial weights of a job whose ranks did not draw them from one seed."""
    if joined() is None:
        return
    for t in tensors:
        t.assign(Tensor(world().broadcast(t.numpy(), root), device=_host_device(t)))


def check_replicated(tensors: Sequence[Tensor]) -> None:
    """Raise CollectiveError on every rank, naming the first tensor (by position) and a rank that differs from
    rank 0, unless every rank holds the same bytes in each of `tensors` (one seed on every rank, checked)."""
    if joined() is None:
        return
    mine = np.array([zlib.crc32(np.ascontiguousarray(t.numpy()).tobytes()) for t in tensors], np.int64)
    every = world().allgather(mine)
    if (odd := np.argwhere(every != every[0])).size:
        r, i = (int(v) for v in odd[0])
        raise CollectiveError(f"tensor {i} of {len(tensors)} differs between rank 0 and rank {r}: seed every rank "
                              "alike, or call tolk_core.distributed.broadcast_parameters")


def part(n: int, axis_rank: int | None = None) -> tuple[int, int]:
    """The rows [lo, hi) of `n` that rank `axis_rank` (default: this rank) holds when a value of `n` rows is
    sharded over the ranks: the bounds `Tensor.shard` cuts (ceil(n / size) each, the last part smaller)."""
    r = rank() if axis_rank is None else axis_rank
    return multi.split_bounds(n, world_size())[r]


def local_rows(array: Any, axis: int = 0) -> Any:
    """This rank's part of `array` (anything numpy can slice) along `axis`: what it reads of a data set."""
    lo, hi = part(int(np.shape(array)[axis]))
    return array[(slice(None),) * axis + (slice(lo, hi),)]


def shard_local(local: np.ndarray, devs: tuple[str, ...], total: int, axis: int = 0) -> Tensor:
    """The Tensor sharded over `devs` (one device per rank, `devices()`) along `axis`, of `total` rows there,
    built from this rank's rows `local` only (the other ranks' parts are theirs: placeholders here).
    ShapeError when `local` is not this rank's part of `total` (`part(total)`)."""
    local = np.ascontiguousarray(local)
    bounds = multi.split_bounds(total, len(devs))
    lo, hi = bounds[rank()]
    if local.ndim <= axis or local.shape[axis] != hi - lo:
        raise ShapeError(f"shard_local: rank {rank()} holds rows [{lo}, {hi}) of {total} along axis {axis}, got an "
                         f"array of shape {local.shape}; pass local_rows(data) (or rows part({total}))")
    mine = Tensor(local, device=devs[rank()])
    parts = []
    for r, (d, (a, b)) in enumerate(zip(devs, bounds, strict=True)):
        shape = tuple(b - a if i == axis else s for i, s in enumerate(local.shape))
        parts.append(mine.uop if r == rank() else
                     buffers.view_as(buffers.new_buffer(d, int(np.prod(shape)), mine.dtype), shape))
    return Tensor(multi.multi(parts, devs, axis, bounds), devs)


def local_shard(t: Tensor) -> np.ndarray:
    """This rank's shard of `t` (sharded over a tuple spanning ranks, or unsharded: all of it) as numpy;
    `t.numpy()` of a value sharded along an axis would have to read the other ranks' parts."""
    if not isinstance(t.device, tuple):
        return t.numpy()
    t.realize()
    mine = ranks.local_of(t.device)
    return Tensor(t.uop.src[t.device.index(mine)], device=mine).numpy()


def print0(*args: Any, **kwargs: Any) -> None:
    """`print` on rank 0 only (progress of a job is printed once)."""
    if rank() == 0:
        builtins.print(*args, **kwargs)


def save(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> bool:
    """`nn.state.safe_save` on rank 0 only (a checkpoint is written once); returns whether this rank wrote it."""
    if rank() != 0:
        return False
    from tolk_core.nn.state import safe_save
    safe_save(tensors, path, metadata)
    return True


def barrier() -> None:
    """Return once every rank has called it (nothing without a job)."""
    if joined() is not None:
        world().barrier()


def _host_device(t: Tensor) -> str:
    d = t.device
    return ranks.local_of(d) if isinstance(d, tuple) else d


__all__ = ["all_reduce", "barrier", "broadcast_parameters", "check_replicated", "devices", "init", "local_rows",
           "local_shard", "part", "print0", "rank", "save", "shard_local", "world_size"]
