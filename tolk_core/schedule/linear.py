"""linear: the kernels of a schedule, in dependency order, as one LINEAR of CALLs.

`LINEAR(CALL(kernel_sink, *buffers), ...)`: each CALL's buffers are BUFFER UOps bound to the kernel's PARAM
slots in order, and the CALL's arg is the kernel's `KernelInfo` (the tensor ops it implements and their nominal
operation count, what the profiler reads). Kernels come out of rangeify sources-first, so running the CALLs in
order is correct. In a schedule of assignments (`merge=True`) the elementwise store kernels that loop over the
same ranges are merged into one (schedule/merge.py).
"""
from __future__ import annotations

from collections.abc import Callable

from tolk_core.ir import spec
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.target import Target
from tolk_core.ir.uop import UOp
from tolk_core.schedule.merge import merge_stores
from tolk_core.schedule.rangeify import rangeify


def create_linear(sink: UOp, new_buffer: Callable[[UOp], UOp], target: Target | None = None,
                  merge: bool = False) -> UOp:
    """The LINEAR of a prepared `SINK(STORE(dest, value), ...)`; `new_buffer(value)` stores intermediates;
    kernel-local arrays are used where `target` allows them (`Target.local_arrays`; no target: none).
    `merge`: the stores are assignments into existing storage, each value read before any store lands
    (engine.realize.assign_all), so kernels storing over the same ranges may be merged (schedule/merge.py)."""
    local_arrays = target is not None and target.local_arrays
    stores = [s for s in sink.src if s.op is Op.STORE]
    kernels = rangeify([(s.src[1], s.src[0]) for s in stores], new_buffer, local_arrays, assignments=merge)
    if merge:
        kernels = merge_stores(kernels, {s.src[0].view_chain(GroupOp.View)[1] for s in stores})
    linear = UOp(Op.LINEAR, dtypes.void, tuple(UOp(Op.CALL, dtypes.void, (k.ast, *k.buffers), k.info) for k in kernels))
    return spec.check(linear, "linear", "rangeify")
