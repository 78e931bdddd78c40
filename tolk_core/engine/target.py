"""The Target of a device: its facts read once from the registry, then handed to the passes.

`target_for(name)` opens the device (or, for a disk, only asks its capabilities) and returns the frozen
`Target` (tolk_core/ir/target.py) that scheduling, codegen and the JIT's memory planner read: no pass asks the
registry anything itself. A device reopened by the registry (a reset) gets a new Target.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tolk_core.errors import PluginError
from tolk_core.ir.ops import Op
from tolk_core.ir.target import Target
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device
from tolk_core.runtime import Allocator

# canonical name -> (the opened device it was read from, its Target); None for a disk, which is not opened
_targets: dict[str, tuple[Any, Target]] = {}
_disk_names: dict[str, bool] = {}


def is_disk(name: str) -> bool:
    """Whether device `name` is a disk (its capabilities say `disk`: copy-only, no kernels)."""
    if (hit := _disk_names.get(name)) is None:
        hit = _disk_names[name] = Device.is_disk(name)
    return hit


def target_for(name: str) -> Target:
    """The Target of device `name` (opened on first use, unless it is a disk)."""
    if is_disk(name):
        if (hit := _targets.get(name)) is None:
            hit = _targets[name] = (None, Target(name, is_disk=True, view_alignment=None, local_arrays=False))
        return hit[1]
    dev = Device[name]
    if (hit := _targets.get(name)) is None or hit[0] is not dev:
        hit = _targets[name] = (dev, _read(dev))
    return hit[1]


def _read(dev: Any) -> Target:
    alloc, renderer = dev.allocator, dev.renderer
    if renderer is None:  # the registry attached no RendererSpec: nothing can generate this device's kernels
        raise PluginError(f"device {dev.name} ({Device.provider(dev.name)}) has no renderer: no installed plugin "
                          f"supplies a RendererSpec for {dev.name.partition(':')[0]}, so Tolk cannot generate its "
                          "kernels (contract tolk_renderers). Fix: yield RendererSpec(device="
                          f"{dev.name.partition(':')[0]!r}, ...) from a tolk_renderers hook (docs/plugins.md, "
                          "section 2)")
    makes_views = type(alloc).offset is not Allocator.offset
    return Target(dev.name, is_disk=False, view_alignment=int(alloc.offset_alignment) if makes_views else None,
                  local_arrays=renderer is None or renderer.local_arrays, renderer=renderer)


def reading(target: Target, nodes: Sequence[UOp]) -> Target:
    """`target` for scheduling a graph of `nodes`: it also knows which of the devices they name are disks."""
    disks = frozenset(u.arg for u in nodes if u.op is Op.DEVICE and u.arg != target.device and is_disk(u.arg))
    return target.reading(disks) if disks else target
