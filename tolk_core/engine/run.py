"""run: launch a LINEAR's programs on their buffers, and the capture point the JIT records through.

`run_linear(linear, input_uops, var_vals)` compiles what is missing (`compile.compile_linear`) and launches
each CALL in order. Inside `capture()` nothing runs: every LINEAR about to run is recorded instead (the JIT
compiles what it recorded and replays it, so the capturing call still returns real results). Captures nest
per thread of control (a context variable), innermost first. With DEBUG>=2, or inside `profile.profile()`, every
launch waits and is timed: DEBUG=2 prints one line per launch, a profile records it (engine/profile.py).
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, concurrent, profile
from tolk_core.engine.compile import arg_device, compile_linear, kernel_vals
from tolk_core.engine.scoped import Scopes
from tolk_core.engine.tuning import tune_linear
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


class Capture:
    """What one `capture()` recorded: the LINEARs that would have run, in order, and the Variable values
    they were scheduled with."""

    def __init__(self) -> None:
        self.linears: list[UOp] = []
        self.var_vals: dict[str, int] = {}


_captures: Scopes[Capture] = Scopes("tolk_captures")


def capturing() -> bool:
    """Whether a capture is in progress (LINEARs are recorded, not run)."""
    return bool(_captures.open())


def capture() -> contextlib.AbstractContextManager[Capture]:
    """Record every LINEAR that would run inside the block instead of running it."""
    return _captures.enter(Capture())


def _runtime_arg(b: UOp, input_uops: Sequence[UOp]) -> Any:
    """The runtime Buffer of a CALL argument: a BUFFER, a JIT input PARAM, or a SLICE (byte offset, size) of one."""
    if b.op is Op.SLICE:
        return _runtime_arg(b.src[0], input_uops).view(b.arg[1], b.dtype, b.arg[0])
    return buffers.runtime_buffer(input_uops[b.arg[0]] if b.op is Op.PARAM else b)


def run_linear(linear: UOp, input_uops: Sequence[UOp] = (), var_vals: dict[str, int] | None = None) -> None:
    """Launch the CALLs of `linear` in order; `input_uops` bind its PARAMs (the JIT's slotted inputs).
    Inside `capture()` the LINEAR is recorded by the innermost capture and nothing runs."""
    var_vals = var_vals or {}
    if captures := _captures.open():
        captures[-1].linears.append(linear)
        captures[-1].var_vals.update(var_vals)
        return
    # every buffer is allocated before anything compiles: a size the device cannot hold fails at once
    # (OutOfMemoryError), not after a compile
    all_bufs = [[_runtime_arg(b, input_uops).allocate() for b in call.src[1:]] for call in linear.src]
    all_handles = [[b.handle for b in bufs] for bufs in all_bufs]
    programs = compile_linear(linear)
    if config.get("BEAM"):  # kernels not tuned before are searched on these buffers first (docs/tuning.md)
        programs = tune_linear(linear, programs, all_bufs, var_vals)
    debug = config.get("DEBUG")
    if not (debug >= 2 or profile.profiling()):
        launches = [(prg, handles, ks.launch_dims(var_vals), ks.local_size, kernel_vals(ks, var_vals))
                    for (prg, ks), handles in zip(programs, all_handles, strict=True)]
        GlobalCounters.kernels_launched += len(launches)
        # the buffers stay referenced until the launches ran (queued on the device inside together())
        concurrent.defer(arg_device(linear.src[0].src[1]) if linear.src else "",
                         lambda: launch_all(launches, all_bufs))
        return
    for call, (prg, ks), handles in zip(linear.src, programs, all_handles, strict=True):
        vals = kernel_vals(ks, var_vals)
        gsize = ks.launch_dims(var_vals)
        seconds = profile.timed(prg, *handles, global_size=gsize, local_size=ks.local_size, vals=vals)
        GlobalCounters.kernels_launched += 1
        cost = profile.launch_cost(call, var_vals)
        profile.record(device := arg_device(call.src[1]), ks.name, seconds, call, var_vals, cost)
        if debug >= 2:
            GlobalCounters.time_sum_s += seconds
            print(profile.launch_line(device, ks.name, gsize, ks.local_size, seconds, cost))


def launch_all(launches: list[tuple[Any, list[Any], Any, Any, tuple[int, ...]]], keep: list[Any]) -> None:
    """Launch each (program, handles, global size, local size, values) in order; `keep` holds their Buffers."""
    for prg, handles, gsize, lsize, vals in launches:
        prg(*handles, global_size=gsize, local_size=lsize, vals=vals)
