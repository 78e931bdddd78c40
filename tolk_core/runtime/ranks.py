"""Rank devices: the devices of the other processes of a job (docs/distributed.md).

A device tuple spanning processes names each process's device with its rank: ``"CPU@rank1"`` is rank 1's CPU.
In rank r's process, ``"<device>@rank<r>"`` canonicalizes to the local ``<device>`` (so every rank may spell the
tuple alike, and `tolk_core.distributed.devices` does), and every other rank's device stays a *remote* device:
a placeholder this process computes nothing on and allocates nothing for. The engine skips the work of a
remote device (realize and assign return at once), and an allreduce whose devices span ranks is carried by the
collectives provider (engine/collective.py). This module only keeps the place of this process in the job and
parses the names; `tolk_core.distributed.init` sets the place.
"""
from __future__ import annotations

import re

from tolk_core.errors import UnknownDeviceError

_NAME = re.compile(r"^(?P<device>[^@]+)@rank(?P<rank>\d+)$", re.IGNORECASE)
_place: tuple[int, int] = (0, 1)  # (rank, world size) of this process


def set_place(rank: int, size: int) -> None:
    """Record this process's rank in a job of `size` processes (tolk_core.distributed.init)."""
    global _place
    _place = (rank, size)


def place() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) when no job was joined."""
    return _place


def is_rank_name(name: str) -> bool:
    """Whether `name` names a device of a rank (``DEVICE@rankN``)."""
    return "@" in name and _NAME.match(name) is not None


def split(name: str) -> tuple[str, int]:
    """(device, rank) of a rank device name; UnknownDeviceError for a malformed one or a rank past the job."""
    m = _NAME.match(name.strip())
    if m is None:
        raise UnknownDeviceError(f"bad rank device {name!r}: expected DEVICE@rankN, e.g. 'CPU@rank1'")
    rank, size = int(m["rank"]), _place[1]
    if rank >= size:
        raise UnknownDeviceError(f"device {name!r} names rank {rank}, but this job has {size} rank(s) (ranks 0.."
                                 f"{size - 1}); launch with `tolk launch -n N` and call tolk_core.distributed.init()")
    return m["device"], rank


def rank_name(device: str, rank: int) -> str:
    """The name of `device` (canonical) on `rank`: the local name on this process's own rank."""
    return device if rank == _place[0] else f"{device}@rank{rank}"


def is_remote(device: object) -> bool:
    """Whether `device` is another rank's device (a canonical name: the own rank's are local names)."""
    return isinstance(device, str) and "@rank" in device


def local_of(devices: tuple[str, ...]) -> str:
    """The first device of `devices` this process computes on; a tuple of remote devices only is an error."""
    for d in devices:
        if not is_remote(d):
            return d
    raise UnknownDeviceError(f"none of the devices {devices} is on this process (rank {_place[0]} of "
                             f"{_place[1]}): a tuple spanning ranks must name one of this rank's devices")
