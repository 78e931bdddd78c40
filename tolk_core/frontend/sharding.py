"""Sharding: one tensor over several devices (docs/multi-device.md): `shard`, `shard_like`.

A sharded tensor's value is one MULTI node over its per-device shards (schedule/multi.py) and its `device` is
the tuple of their devices. `shard(devices, axis)` cuts the tensor along `axis` into one part per device
(ceil(n / len(devices)) elements each, the last part smaller), or with `axis=None` copies it whole to each
(replicates). A tensor without a device of its own yet (a constant, `arange` not realized) is cut where its
shards are computed. `t.to(devices)` replicates; `t.to(device)` of a sharded tensor gathers it there. Ops on
sharded tensors push through the shards when realized, with an allreduce where a reduction crosses them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tolk_core.errors import ShardingError
from tolk_core.schedule import multi

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def resolve_devices(devices: Sequence[str]) -> tuple[str, ...]:
    """The canonical names of `devices`, each checked available (UnknownDeviceError, DeviceUnavailableError
    name the device and the fix)."""
    from tolk_core.plugins import Device  # (the plugins load at first use, not when the front end is imported)
    if isinstance(devices, str) or not devices:
        raise ShardingError(f"shard needs a sequence of one or more device names, got {devices!r}")
    return tuple(Device.check(d) for d in devices)


class ShardingMixin:
    """`shard` and `shard_like` of Tensor (`Tensor.is_sharded` says whether a tensor is)."""

    __slots__ = ()

    def shard(self: Tensor, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """This tensor over `devices`: cut along `axis` into one part per device (the last part smaller when the
        size does not divide), or whole on each with `axis=None`. Lazy, like `to`. ShardingError for an axis
        the tensor does not have, more devices than the axis has elements, or a tensor sharded already."""
        if self.is_sharded:
            raise ShardingError(f"this tensor is sharded already (over {self.device}): gather it first with "
                                ".to(device), then shard it again")
        names = resolve_devices(devices)
        shape = self.shape
        if axis is not None:
            if not -len(shape) <= axis < len(shape) or not shape:
                raise ShardingError(f"cannot shard a tensor of shape {shape} on axis {axis}: it has axes "
                                    f"0 .. {len(shape) - 1} (or {-len(shape)} .. -1)")
            axis %= len(shape)
            try:
                bounds = multi.split_bounds(int(shape[axis]), len(names))
            except ShardingError as e:
                raise ShardingError(f"cannot shard a tensor of shape {shape} on axis {axis} over {len(names)} "
                                    f"devices: {e}") from None
            parts = [multi.copy_to(multi.shrink_axis(self.uop, axis, lo, hi), d)
                     for d, (lo, hi) in zip(names, bounds, strict=True)]
            return type(self)(multi.multi(parts, names, axis, bounds), names)
        parts = [multi.copy_to(self.uop, d) for d in names]
        return type(self)(multi.multi(parts, names, None, None), names)

    def shard_like(self: Tensor, other: Tensor) -> Tensor:
        """This tensor sharded as `other` is (same devices, same axis); `other` unsharded: moved to its device."""
        if not other.is_sharded:
            return self.to(other.device)
        return self.shard(other.device, multi.layout(other.uop)[1])
