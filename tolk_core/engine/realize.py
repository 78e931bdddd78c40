"""realize: schedule tensor graphs into a LINEAR of CALLs, compile its kernels together, and run it.

- `realize_tensors(tensors)` computes lazy Tensors into new storage and points them at it.
- `run_linear(linear, input_uops, var_vals)` launches each CALL's program on its buffers.
- `capturing` is the hook the JIT uses: while it holds a capturer, every LINEAR about to run is handed to it
  first (the capturer records it; the schedule still runs, so a capturing call returns real results).

Kernels of one schedule that are not compiled yet are rendered into one translation unit (one C file, one
OpenCL program) and compiled by one compiler call; programs are cached in memory by (device, kernel AST),
and binaries on disk by the device's compiler.
"""
from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tolk_core import config
from tolk_core.codegen import KernelSource, generate
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, prod, sint
from tolk_core.schedule.linear import create_linear
from tolk_core.schedule.prepare import prepare_rangeify, storage_base, unbind

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

# the JIT's capture hook: callables taking (linear, var_vals) before the LINEAR runs
capturing: list[Callable[[UOp, dict[str, int]], None]] = []

# values already computed: value UOp -> the storage view holding it (lives as long as the value does)
_computed: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()

_programs: dict[tuple[str, UOp], tuple[Any, KernelSource]] = {}


def _device(name: str):
    from tolk_core.plugins import Device
    return Device[name]


def _is_stored(u: UOp) -> bool:
    return buffers.base_buffer(u) is not None


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    """Compute every lazy tensor in `tensors` into new storage and point the tensor at it."""
    by_device: dict[str, dict[UOp, list[Tensor]]] = {}
    for t in tensors:
        if (done := _computed.get(t.uop)) is not None:
            t.uop = done
        if not _is_stored(t.uop):
            by_device.setdefault(t.device, {}).setdefault(t.uop, []).append(t)
    for device, todo in by_device.items():
        _realize_on(device, todo)


def _realize_on(device: str, todo: dict[UOp, list[Tensor]]) -> None:
    # reuse values computed by earlier realizes that these graphs still read
    sink = UOp(Op.SINK, dtypes.void, tuple(todo))
    if known := {u: _computed[u] for u in sink.toposort() if u in _computed}:
        sink = sink.substitute(known)
    sink, var_vals = unbind(sink)

    def new_buffer(v: UOp) -> UOp:
        return buffers.new_buffer(device, _concrete(prod(v.shape), var_vals), v.dtype)

    outputs = [(v, new_buffer(v)) for v in sink.src]
    stores = tuple(UOp(Op.STORE, dtypes.void, (b, v)) for v, b in outputs)
    linear = create_linear(prepare_rangeify(UOp(Op.SINK, dtypes.void, stores)), new_buffer)
    GlobalCounters.schedules += 1
    if (debug := config.get("DEBUG")) >= 1:
        print(f"scheduled {len(linear.src)} kernel(s) on {device}" + (f":\n{linear}" if debug >= 3 else ""))
    run_linear(linear, var_vals=var_vals)
    for (orig, ts), (_, buf) in zip(todo.items(), outputs, strict=True):
        view = buffers.view_as(buf, tuple(_concrete(s, var_vals) for s in orig.shape))
        _computed[orig] = view
        for t in ts:
            t.uop = view


def realize_assign(device: str, target: UOp, value: UOp) -> None:
    """Store `value` into the storage that `target` views (a BUFFER seen through movements and bitcasts).

    prepare_rangeify refuses broadcast destinations and materialises a value that reads the destination
    through another view first. Cached results that read the storage are forgotten.
    """
    sink, var_vals = unbind(UOp(Op.SINK, dtypes.void, (UOp(Op.STORE, dtypes.void, (target, value)),)))

    def new_buffer(v: UOp) -> UOp:
        return buffers.new_buffer(device, _concrete(prod(v.shape), var_vals), v.dtype)

    run_linear(create_linear(prepare_rangeify(sink), new_buffer), var_vals=var_vals)
    base = storage_base(target)
    for u in [u for u in list(_computed) if base in u.toposort()]:
        del _computed[u]


def _concrete(x: sint, var_vals: dict[str, int]) -> int:
    return x if isinstance(x, int) else int(x.eval(var_vals))


def compile_linear(linear: UOp) -> list[tuple[Any, KernelSource]]:
    """The program of every CALL in `linear`; the missing ones are compiled together, one unit per device."""
    missing: dict[str, list[UOp]] = {}
    for call in linear.src:
        dev = buffers.buffer_device(call.src[1])
        if (dev, call.src[0]) not in _programs and call.src[0] not in missing.get(dev, []):
            missing.setdefault(dev, []).append(call.src[0])
    for dev, asts in missing.items():
        device = _device(dev)
        renderer = device.renderer
        sources = [generate(ast, renderer) for ast in asts]
        unique = {ks.name: ks for ks in sources}
        module = renderer.render_module([ks.source for ks in unique.values()])
        if config.get("DEBUG") >= 4:
            print(module)
        lib = device.compiler.compile_cached(module)
        for ast, ks in zip(asts, sources, strict=True):
            _programs[(dev, ast)] = (device.runtime(device, ks.name, lib), ks)
    return [_programs[(buffers.buffer_device(c.src[1]), c.src[0])] for c in linear.src]


def run_linear(linear: UOp, input_uops: Sequence[UOp] = (), var_vals: dict[str, int] | None = None) -> None:
    """Launch the CALLs of `linear` in order; `input_uops` bind its PARAMs (the JIT's slotted inputs)."""
    var_vals = var_vals or {}
    for capture in capturing:
        capture(linear, var_vals)
    programs = compile_linear(linear)
    debug = config.get("DEBUG")
    for call, (prg, ks) in zip(linear.src, programs, strict=True):
        handles = [buffers.runtime_buffer(b).allocate().handle for b in call.src[1:]]
        vals = tuple(var_vals[v] for v in ks.vars)
        gsize = ks.launch_dims(var_vals)
        st = time.perf_counter()
        et = prg(*handles, global_size=gsize, local_size=ks.local_size, vals=vals, wait=debug >= 2)
        GlobalCounters.kernels_launched += 1
        if debug >= 2:
            GlobalCounters.time_sum_s += et or 0.0
            print(f"*** {buffers.buffer_device(call.src[1]):8s} {ks.name:40s} global={gsize} "
                  f"local={ks.local_size} {((et or 0.0) if et else time.perf_counter() - st) * 1e6:9.1f} us")
