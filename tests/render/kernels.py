"""Kernel ASTs of lazy Tensors, scheduled but never run: what the renderer tests render for other devices."""
from __future__ import annotations

from collections.abc import Iterable

from tolk_core.engine import buffers
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.uop import UOp


def kernel_asts(tensors: Iterable[Tensor]) -> list[UOp]:
    """The distinct kernel ASTs computing `tensors` (unrealized ones; realized tensors need no kernel), in
    schedule order. Schedules on the tensors' own devices; nothing is compiled or launched."""
    todo: dict[str, list[UOp]] = {}
    for t in tensors:
        if buffers.base_buffer(t.uop) is None and t.uop not in todo.setdefault(t.device, []):
            todo[t.device].append(t.uop)
    asts: dict[UOp, None] = {}
    for device, values in todo.items():
        linear, _, _ = schedule(target_for(device), values)
        asts.update((call.src[0], None) for call in linear.src)
    return list(asts)
