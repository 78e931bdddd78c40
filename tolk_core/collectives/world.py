"""The process group of this process's job, once joined (tolk_core.distributed.init): the engine carries an
allreduce whose devices span ranks through it (engine/collective.py, docs/distributed.md)."""
from __future__ import annotations

from tolk_core.collectives.group import ProcessGroup
from tolk_core.errors import CollectiveError
from tolk_core.runtime import ranks

_world: ProcessGroup | None = None


def set_world(group: ProcessGroup | None) -> None:
    """Make `group` this process's job (its rank and size become runtime/ranks.py's place); None leaves it."""
    global _world
    _world = group
    ranks.set_place(group.rank, group.size) if group is not None else ranks.set_place(0, 1)


def world() -> ProcessGroup:
    """The joined group; CollectiveError naming the fix when none was joined or it was closed by a failure."""
    if _world is None:
        raise CollectiveError("no process group was joined in this process: call tolk_core.distributed.init() "
                              "first (under `tolk launch -n N`)")
    if _world.closed:
        raise CollectiveError(f"the process group {_world!r} is closed (an earlier collective failed): the job "
                              "cannot continue; restart it")
    return _world


def joined() -> ProcessGroup | None:
    """The joined group, or None."""
    return _world
