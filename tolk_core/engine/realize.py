"""realize: schedule tensor graphs into a LINEAR of CALLs, compile its kernels together, and run it.

- `realize_tensors(tensors)` computes lazy Tensors into new storage and points them at it.
- `run_linear(linear, input_uops, var_vals)` launches each CALL's program on its buffers.
- `capturing` is the hook the JIT uses: while it holds a capturer, every LINEAR about to run is handed to the
  innermost capturer *instead of running* (seed 000: nothing executes during capture; the JIT compiles what it
  recorded and replays it, so the capturing call still returns real results).
- `to_program(kernel_sink, device)` is the compiled PROGRAM node of one kernel (what the JIT's lowering uses).

Schedules are cached by structure: a graph equal to an earlier one up to which storage it reads (BUFFERs are
numbered slots in the key), with the same variable values, scheduling settings and placements (the digest of
the current lineage's placement classes by graph position, `placements.digest`), reuses that schedule with this
call's buffers and fresh storage for its outputs and intermediates, so a repeated realize skips scheduling; the
placement decisions the cached compile made are replayed onto this graph's nodes in the current lineage. With
DEBUG>=3 (placement dumps) every realize schedules.

Kernels of one schedule that are not compiled yet are rendered into one translation unit (one C file, one
OpenCL program) and compiled by one compiler call; programs are cached in memory by (device, kernel AST),
and binaries on disk by the device's compiler.
"""
from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core import config
from tolk_core.codegen import KernelSource
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers
from tolk_core.engine.source_cache import generate_cached
from tolk_core.errors import DiskError, JitError
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.ir.uop import UOp, prod, sint
from tolk_core.render.cstyle import KernelParam
from tolk_core.schedule import placements as pm
from tolk_core.schedule import prepare
from tolk_core.schedule.linear import create_linear
from tolk_core.schedule.prepare import prepare_rangeify, storage_base, unbind

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

# the JIT's capture hook: callables taking (linear, var_vals) before the LINEAR runs
capturing: list[Callable[[UOp, dict[str, int]], None]] = []

# values already computed: value UOp -> the storage view holding it (lives as long as the value does)
_computed: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()

_programs: dict[tuple[Any, UOp], tuple[Any, KernelSource]] = {}

SCHEDULE_CACHE_SIZE = 512
# the settings scheduling reads: part of the schedule cache's key
_SCHEDULE_SETTINGS = ("PLACEMENT_STACK_THRESHOLD", "SPLIT_REDUCEOP", "REDUCEOP_SPLIT_SIZE", "REDUCEOP_SPLIT_THRESHOLD")
# structural key -> (LINEAR with slots for buffers, (size, dtype) of each new buffer's slot, output slots, the
# placement decisions the compile made, by graph position)
_schedules: dict[tuple, tuple[UOp, list[tuple[int, Any]], int, pm.Decisions]] = {}


def _device(name: str):
    from tolk_core.plugins import Device
    return Device[name]


def _is_disk(name: str) -> bool:
    from tolk_core.plugins import Device
    return Device.is_disk(name)


def _canonical(name: str) -> str:
    from tolk_core.plugins import Device
    return Device.canonicalize(name)


prepare.disk_checks.append(_is_disk)
prepare.canonical_device.append(_canonical)


def _refuse_disk(device: str, u: UOp) -> None:
    """A disk runs no kernels: computing `u` there raises DiskError naming the device and the operation."""
    if _is_disk(device):
        raise DiskError(f"{device} is a disk: a disk value can only be copied to another device (.to(...)), "
                        f"viewed or bitcast, but {u.op.name} was asked to be computed on it")


def _local_arrays(device: str) -> bool:
    """Whether `device`'s renderer can declare kernel-local arrays (`local_arrays`, default True): a loop-style
    kernel fills one per row, a GPU kernel one per work group (codegen.optimize)."""
    return getattr(_device(device).renderer, "local_arrays", True)


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


def schedule(device: str, values: Sequence[UOp]) -> tuple[UOp, list[UOp], dict[str, int]]:
    """Schedule `values` on `device` without running anything: (the LINEAR, the new BUFFER of each value,
    the bound Variables' values). Prepare, placements and rangeify run here, unless a structurally equal
    graph was scheduled before (see the module docstring): then its LINEAR is reused with these buffers."""
    sink, var_vals = unbind(UOp(Op.SINK, dtypes.void, tuple(values)))
    nodes = sink.toposort()
    inputs = [u for u in nodes if u.op is Op.BUFFER]
    lineage = pm.current()
    # DEBUG>=3 prints the placements: schedule anew
    key = (device, _structure(sink), tuple(sorted(var_vals.items())), tuple(config.get(k) for k in _SCHEDULE_SETTINGS),
           pm.digest(sink, lineage.placements, lineage.inline_preferences)) if config.get("DEBUG") < 3 else None
    if key is not None and (hit := _schedules.get(key)) is not None:
        template, fresh, n_out, decisions = hit
        pm.replay(nodes, decisions)
        bufs = inputs + [buffers.new_buffer(device, size, dt) for size, dt in fresh]
        linear = template.substitute({_slot(i, b.dtype): b for i, b in enumerate(bufs)})
        GlobalCounters.schedules += 1
        GlobalCounters.schedule_cache_hits += 1
        return linear, bufs[len(inputs):len(inputs) + n_out], var_vals
    made: list[UOp] = []

    def new_buffer(v: UOp) -> UOp:
        made.append(buffers.new_buffer(device, _concrete(prod(v.shape), var_vals), v.dtype))
        return made[-1]

    outs = [new_buffer(v) for v in sink.src]
    stores = tuple(UOp(Op.STORE, dtypes.void, (b, v)) for v, b in zip(sink.src, outs, strict=True))
    before = [lineage.placements.raw_entry(u) for u in nodes]
    linear = create_linear(prepare_rangeify(UOp(Op.SINK, dtypes.void, stores)), new_buffer, _local_arrays(device))
    GlobalCounters.schedules += 1
    if (debug := config.get("DEBUG")) >= 1:
        print(f"scheduled {len(linear.src)} kernel(s) on {device}" + (f":\n{linear}" if debug >= 3 else ""))
    slots = {b: _slot(i, b.dtype) for i, b in enumerate(inputs + made)}
    # only a LINEAR whose storage is all inputs or new buffers can be replayed with other buffers
    if key is not None and all(u in slots for u in linear.toposort() if u.op is Op.BUFFER):
        if len(_schedules) >= SCHEDULE_CACHE_SIZE:
            del _schedules[next(iter(_schedules))]
        _schedules[key] = (linear.substitute(slots), [(b.arg, b.dtype) for b in made], len(outs),
                           pm.recorded(nodes, before, lineage.placements))
    return linear, outs, var_vals


def _structure(sink: UOp) -> tuple:
    """`sink`'s graph as plain data, BUFFERs numbered in order of appearance: equal for structurally equal
    graphs, and holding no node of the graph (a key that held the user's nodes would keep their computed
    results alive in the value cache)."""
    index: dict[UOp, int] = {}
    nbuf = 0
    out = []
    for u in sink.toposort():
        if u.op is Op.BUFFER:
            out.append(("buffer", u.dtype, u.arg, nbuf))
            nbuf += 1
        elif u.op is Op.UNIQUE:  # a buffer's identity: what the slots abstract away
            out.append(("unique",))
        else:
            out.append((u.op, u.dtype, u.arg, tuple(index[s] for s in u.src)))
        index[u] = len(index)
    return tuple(out)


def _slot(i: int, dtype: Any) -> UOp:
    return UOp(Op.PARAM, dtype, (), ("schedule slot", i))


def _realize_on(device: str, todo: dict[UOp, list[Tensor]]) -> None:
    # reuse values computed by earlier realizes that these graphs still read
    sink = UOp(Op.SINK, dtypes.void, tuple(todo))
    if known := {u: _computed[u] for u in sink.toposort() if u in _computed}:
        sink = sink.substitute(known)
    sink = _copy_across_devices(sink)
    for u in sink.src:
        _refuse_disk(device, u)
    linear, outs, var_vals = schedule(device, sink.src)
    run_linear(linear, var_vals=var_vals)
    for (orig, ts), buf in zip(todo.items(), outs, strict=True):
        view = buffers.view_as(buf, tuple(_concrete(s, var_vals) for s in orig.shape))
        if not capturing:  # a capture fills the buffer only at replay, and each replay overwrites it
            _computed[orig] = view
        for t in ts:
            t.uop = view


def _copy_across_devices(sink: UOp) -> UOp:
    """Every COPY of a value living on another device, done: the value is computed on its own device and its
    bytes copied into new storage on the COPY's device (seed 001: "any other copy stores the value into new
    storage on the copy's device"). A COPY to the value's own device is the value (a prepare_rangeify rule).
    A copy from a disk reads one run of the file's bytes; its views are applied on the target, and a store
    across devices stores a copy of its value (prepare's rules, applied here first)."""
    sink = graph_rewrite(sink, prepare.pm_before_copies, name="disk copies, stores across devices")
    done: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u.op is not Op.COPY:
            continue
        src, target = u.src[0].substitute(done) if done else u.src[0], u.src[1].arg
        if src.device in (None, target):
            continue
        if capturing:
            raise JitError(f"a copy from {src.device} to {target} inside a jitted function: the JIT captures "
                           "kernels of one device; copy the input before calling the jitted function")
        if (run := prepare.disk_run(src)) is not None and _is_disk(src.device):
            disk, offset, nbytes, dt = run
            host, var_vals = np.empty(nbytes, np.uint8), {}
            if nbytes:
                buffers.runtime_buffer(disk).allocate().view(nbytes, dtypes.uint8, offset).copyout(memoryview(host))
            copied = buffers.new_buffer(target, nbytes // dt.itemsize, dt)
        else:
            _refuse_disk(src.device, src)
            linear, (buf,), var_vals = schedule(src.device, [src]) if buffers.base_buffer(src) is None else \
                (None, (buffers.base_buffer(src),), {})
            if linear is not None:
                run_linear(linear, var_vals=var_vals)
            host = np.empty(buf.arg * buf.dtype.itemsize, np.uint8)
            if host.size:
                buffers.runtime_buffer(buf).copyout(memoryview(host))
            copied = buffers.new_buffer(target, buf.arg, buf.dtype)
        if host.size:
            buffers.runtime_buffer(copied).copyin(memoryview(host))
        done[u] = buffers.view_as(copied, tuple(_concrete(s, var_vals) for s in src.shape))
    return sink.substitute(done) if done else sink


def realize_assign(device: str, target: UOp, value: UOp) -> None:
    """Store `value` into the storage that `target` views (a BUFFER seen through movements and bitcasts).

    prepare_rangeify refuses broadcast destinations and materialises a value that reads the destination
    through another view first. Cached results that read the storage are forgotten.
    """
    _refuse_disk(device, value)
    sink = _copy_across_devices(UOp(Op.SINK, dtypes.void, (UOp(Op.STORE, dtypes.void, (target, value)),)))
    sink, var_vals = unbind(sink)

    def new_buffer(v: UOp) -> UOp:
        return buffers.new_buffer(device, _concrete(prod(v.shape), var_vals), v.dtype)

    run_linear(create_linear(prepare_rangeify(sink), new_buffer, _local_arrays(device)), var_vals=var_vals)
    base = storage_base(target)
    for u in [u for u in list(_computed) if base in u.toposort()]:
        del _computed[u]


def realize_code_call(device: str, call: UOp) -> None:
    """Run a call of a kernel given as code (`prepare.KernelCode`) now. prepare's `code_call_arguments` puts
    its arguments in the form the call takes: values to materialise are computed into new storage first, and a
    run of storage that starts elsewhere is passed as a view at its byte offset. A run the device cannot view
    (OpenCL sub-buffers start on CL_DEVICE_MEM_BASE_ADDR_ALIGN) goes through new storage: copied in, and
    stored back after the call when the call writes it. Cached results that read storage the call writes are
    forgotten."""
    call = graph_rewrite(call, prepare.pm_code_calls, name="a kernel given as code: its arguments")
    align = int(getattr(_device(device).allocator, "offset_alignment", 1))
    bounced = [a for a in call.src[1:] if a.op is Op.SHRINK and (a.arg[0][0] * a.dtype.itemsize) % align]
    staged = [a for a in call.src[1:] if a.op not in (Op.BUFFER, Op.SHRINK) or a in bounced]
    linear, outs, var_vals = schedule(device, staged) if staged else (None, [], {})
    if linear is not None:
        run_linear(linear, var_vals=var_vals)
    made = dict(zip(staged, outs, strict=True))
    args = [made[a] if a in made else a if a.op is Op.BUFFER else
            UOp(Op.SLICE, a.dtype, (a.src[0],), (a.arg[0][0] * a.dtype.itemsize, a.arg[0][1] - a.arg[0][0], None))
            for a in call.src[1:]]
    run_linear(UOp(Op.LINEAR, dtypes.void, (UOp(Op.CALL, dtypes.void, (call.src[0], *args)),)))
    for a, w in zip(call.src[1:], call.src[0].arg.written, strict=True):
        if w and a in bounced:
            realize_assign(device, a, made[a])
    written = {storage_base(a) for a, w in zip(call.src[1:], call.src[0].arg.written, strict=True) if w}
    for u in [u for u in list(_computed) if any(b in written for b in u.toposort())]:
        del _computed[u]


def _code_source(code: prepare.KernelCode) -> KernelSource:
    """The KernelSource of a kernel given as code: its text as given, one buffer parameter per argument (of
    a type the text alone declares)."""
    params = tuple(KernelParam(i, dtypes.void, w) for i, w in enumerate(code.written))
    return KernelSource(code.name, code.source, code.global_size, code.local_size, params)


def _concrete(x: sint, var_vals: dict[str, int]) -> int:
    return x if isinstance(x, int) else int(x.eval(var_vals))


def arg_device(u: UOp) -> str:
    """The device of a CALL argument: a BUFFER, a JIT input PARAM (arg (slot, shape, device)) or a SLICE of one."""
    while u.op is Op.SLICE:
        u = u.src[0]
    return u.arg[2] if u.op is Op.PARAM else buffers.buffer_device(u)


def compile_linear(linear: UOp) -> list[tuple[Any, KernelSource]]:
    """The program of every CALL in `linear`; the missing ones are compiled together, one unit per device."""
    missing: dict[Any, list[UOp]] = {}
    for call in linear.src:
        # keyed by the opened device, not its name: a device reopened (registry reset) needs its own programs
        dev = arg_device(call.src[1])
        if _key(dev, call.src[0]) not in _programs and call.src[0] not in missing.get(dev, []):
            missing.setdefault(dev, []).append(call.src[0])
    for dev, asts in missing.items():
        _compile_together(dev, asts)
    return [_programs[_key(arg_device(c.src[1]), c.src[0])] for c in linear.src]


def _key(dev: str, ast: UOp) -> tuple[Any, UOp]:
    return (_device(dev), ast)


@dataclass(frozen=True)
class CompiledKernel:
    """The arg of a PROGRAM node: the loaded program and its rendered source facts (launch sizes, params)."""
    device: str
    program: Any
    source: KernelSource


def kernel_vals(ks: KernelSource, var_vals: dict[str, int]) -> tuple[int, ...]:
    """The scalar arguments of one launch: the kernel's variables' values, in parameter order."""
    return tuple(var_vals[v] for v in ks.vars)


def to_program(ast: UOp, device: str) -> UOp:
    """PROGRAM(ast) of kernel SINK `ast` on `device`, its arg a CompiledKernel (compiled alone if missing:
    `compile_linear` first compiles a whole schedule in one unit)."""
    if _key(device, ast) not in _programs:
        _compile_together(device, [ast])
    prg, ks = _programs[_key(device, ast)]
    return UOp(Op.PROGRAM, dtypes.void, (ast,), CompiledKernel(device, prg, ks))


def _compile_together(dev: str, asts: list[UOp]) -> None:
    device = _device(dev)
    renderer = device.renderer
    sources = [_code_source(ast.arg) if isinstance(ast.arg, prepare.KernelCode) else generate_cached(ast, renderer)
               for ast in asts]
    unique = {ks.name: ks for ks in sources}
    module = renderer.render_module([ks.source for ks in unique.values()])
    if config.get("DEBUG") >= 4:
        print(module)
    lib = device.compiler.compile_cached(module)
    for ast, ks in zip(asts, sources, strict=True):
        _programs[(device, ast)] = (device.runtime(device, ks.name, lib), ks)


def _runtime_arg(b: UOp, input_uops: Sequence[UOp]) -> Any:
    """The runtime Buffer of a CALL argument: a BUFFER, a JIT input PARAM, or a SLICE (byte offset, size) of one."""
    if b.op is Op.SLICE:
        return _runtime_arg(b.src[0], input_uops).view(b.arg[1], b.dtype, b.arg[0])
    return buffers.runtime_buffer(input_uops[b.arg[0]] if b.op is Op.PARAM else b)


def run_linear(linear: UOp, input_uops: Sequence[UOp] = (), var_vals: dict[str, int] | None = None) -> None:
    """Launch the CALLs of `linear` in order; `input_uops` bind its PARAMs (the JIT's slotted inputs).

    While a JIT captures (`capturing` is not empty) the LINEAR goes to the innermost capturer and nothing runs.
    """
    var_vals = var_vals or {}
    if capturing:
        capturing[-1](linear, var_vals)
        return
    programs = compile_linear(linear)
    debug = config.get("DEBUG")
    for call, (prg, ks) in zip(linear.src, programs, strict=True):
        handles = [_runtime_arg(b, input_uops).allocate().handle for b in call.src[1:]]
        vals = kernel_vals(ks, var_vals)
        gsize = ks.launch_dims(var_vals)
        st = time.perf_counter()
        et = prg(*handles, global_size=gsize, local_size=ks.local_size, vals=vals, wait=debug >= 2)
        GlobalCounters.kernels_launched += 1
        if debug >= 2:
            GlobalCounters.time_sum_s += et or 0.0
            print(f"*** {arg_device(call.src[1]):8s} {ks.name:40s} global={gsize} "
                  f"local={ks.local_size} {((et or 0.0) if et else time.perf_counter() - st) * 1e6:9.1f} us")
