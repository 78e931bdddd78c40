"""Target: the facts about one device that the passes read, as one frozen value passed in explicitly.

`prepare_rangeify`, `create_linear` and codegen never ask the device registry anything: the engine builds a
Target for the device a schedule runs on (`tolk_core.engine.target.target_for`) and hands it down. A pass that
needs another device's facts (a copy from a disk) finds them in `disks`, which the engine fills with the
disks the scheduled graph reads.

Device names here are canonical (`OPENCL:0`, `CPU`, `DISK:/abs/path`): the front end canonicalizes every name
it puts into a graph, so two names denote one device exactly when they are equal.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tolk_core.render.renderer import Renderer


@dataclass(frozen=True)
class Target:
    """One device as the passes see it.

    - `device`: its canonical name.
    - `is_disk`: a copy-only device (no kernels: its values are only copied, viewed or bitcast).
    - `view_alignment`: the byte alignment a view into its storage must start on (OpenCL sub-buffers start on
      CL_DEVICE_MEM_BASE_ADDR_ALIGN), or None when its allocator makes no views at all (the JIT's memory planner
      then gives each intermediate its own storage).
    - `local_arrays`: its renderer can declare kernel-local arrays (a row of values kept in registers or
      work-group memory instead of a buffer: see docs/placements.md).
    - `renderer`: the renderer that generates its kernels (its declared capabilities steer codegen); None for a
      device without kernels.
    - `disks`: the other devices of the scheduled graph that are disks.
    """
    device: str
    is_disk: bool = False
    view_alignment: int | None = 1
    local_arrays: bool = True
    renderer: Renderer | None = field(default=None, compare=False)
    disks: frozenset[str] = frozenset()

    def on_disk(self, device: str | None) -> bool:
        """Whether `device` (a name from the graph; None for a constant) is a disk."""
        return device is not None and (device in self.disks or (device == self.device and self.is_disk))

    def reading(self, disks: frozenset[str]) -> Target:
        """This target for a graph that also reads the disks `disks`."""
        return self if disks <= self.disks else replace(self, disks=self.disks | disks)
