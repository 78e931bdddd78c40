"""tiny_jit: warm up, capture, replay (the user face is `@tolk_core.jit`, docs/jit.md).

Phases, by the call counter `cnt`:
- 0, warmup: the function runs eagerly (lazy state settles into real buffers).
- 1, capture: inside `run.capture()` every LINEAR the function schedules is recorded (nothing runs);
  the records are lowered once (`jit_lower`): concatenated; input buffers become slotted PARAMs; every kernel is
  compiled (one unit per device); intermediates are planned into per-device arenas (`schedule.memory`);
  consecutive graph-compatible calls are batched (`batch_graphs`). Non-input buffers are bound through the
  caller's resolver, the replay steps are built, and the capture call replays at once (it returns real results).
- 2+, replay: inputs are validated (count, element count, dtype, device: `JitError`) and the precomputed steps
  run with the new input handles: no graph rewrite, no lookup by UOp per kernel, no allocation, no compile.

`JIT=0` runs every call eagerly. `JIT>=2` captures but never batches into graphs. Inside `tolk_core.profile()` a
replay waits for and records every launch, and a graph batch launches its kernels one by one so each gets its
own time (engine/profile.py).
Variable values (`var_vals`) travel per call into the kernels' scalar arguments and the graphs' values.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from tolk_core import config
from tolk_core.collectives.world import world
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers as storage
from tolk_core.engine import concurrent, direct_fold, profile, run
from tolk_core.engine.compile import CompiledKernel, arg_device, compile_linear, kernel_vals, to_program
from tolk_core.engine.target import target_for
from tolk_core.errors import JitError
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.runtime import Buffer, CopyProgram, Launch, ranks
from tolk_core.schedule.memory import plan_memory, written_slots

T = TypeVar("T")
Resolver = Callable[[UOp], Buffer | None]
ToProgram = Callable[[UOp, str], UOp]


def _device(name: str) -> Any:
    from tolk_core.plugins import Device
    return Device[name]


def view_alignment(device: str) -> int | None:
    """Byte alignment of sub-buffer offsets on `device`, or None when its allocator makes no views (the planner
    then leaves the device's buffers alone). OpenCL reports CL_DEVICE_MEM_BASE_ADDR_ALIGN."""
    return target_for(device).view_alignment


# ---------------------------------------------------------------------------------------------- graph batching
def _batch_device(call: UOp) -> str | None:
    """The device whose Graph a call could join: a kernel's (its first argument's), a copy's destination."""
    body = call.src[0]
    return arg_device(call.src[1]) if body.op in (Op.PROGRAM, Op.COPY) and len(call.src) > 1 else None


def _graphable(call: UOp, device: str, supports_copy: bool) -> bool:
    """Whether `call` may join a batch of `device`'s Graph: a kernel whose every argument lives there and whose
    launch size does not depend on a variable, or a copy into it when the Graph takes copies (a COPY with an
    arg, a collective across ranks or an in-place fold across devices, is never batched)."""
    body = call.src[0]
    if body.op is Op.COPY:
        return supports_copy and body.arg is None and arg_device(call.src[1]) == device
    if body.op is not Op.PROGRAM:
        return False
    if not isinstance(body.arg, str) and any(not isinstance(g, int) for g in body.arg.source.global_size):
        return False  # Graph updates rebind buffers and values, not launch sizes
    return all(arg_device(a) == device for a in call.src[1:])


def _input_params(calls: Sequence[UOp]) -> tuple[UOp, ...]:
    """The distinct JIT input PARAMs the calls take, in first-use order."""
    return tuple(dict.fromkeys(a for c in calls for a in c.src[1:] if a.op is Op.PARAM))


def _graph_of(device: str) -> tuple[Any, bool] | None:
    """`device`'s Graph class and whether it takes copies (docs/plugins.md), or None without a Graph."""
    dev = _device(device)
    return None if dev.graph is None else (dev.graph, dev.graph_takes_copies)


def batch_graphs(device: str, linear: UOp) -> UOp:
    """Group the graph-compatible calls of compiled `linear` into CALL(CUSTOM_FUNCTION "graph"), one batch per
    device (`device`, the JIT's, is where a capture started; every call batches on its own device).

    Compatible (`_graphable`): a kernel whose every argument lives on one device with a Graph capability and
    whose launch size does not depend on a variable (Graph updates rebind buffers and values only); a copy
    into a device whose Graph takes copies (`GraphSpec.supports_copy`). Kernels of different devices touch
    different buffers, so each device's batch gathers its kernels across the others'; a call that is not
    compatible, and a copy (the only call that reads another device), first closes every open batch, in the
    order they were opened. SLICE calls are dropped (views are call arguments here). JIT_BATCH_SIZE caps a
    device's first batch and the cap doubles per batch of that device (0: unlimited); a batch of one call stays
    a plain call. The identity when JIT >= 2 or no call can batch.
    """
    if config.get("JIT") >= 2:
        return linear
    graphs: dict[str, tuple[Any, bool] | None] = {}
    caps: dict[str, int] = {}
    out: list[UOp] = []
    open_: dict[str, list[UOp]] = {}  # device -> its open batch (insertion order: the order they opened)

    def close(d: str) -> None:
        batch = open_.pop(d)
        if len(batch) > 1:
            fn = UOp(Op.CUSTOM_FUNCTION, dtypes.void, (UOp(Op.LINEAR, dtypes.void, tuple(batch)),), "graph")
            out.append(UOp(Op.CALL, dtypes.void, (fn, *_input_params(batch))))
            caps[d] = caps.get(d, config.get("JIT_BATCH_SIZE")) * 2
        else:
            out.extend(batch)

    def close_all() -> None:
        for d in list(open_):
            close(d)

    for call in linear.src:
        if call.src[0].op is Op.SLICE:
            continue
        d = _batch_device(call)
        if d is not None and d not in graphs:
            graphs[d] = _graph_of(d)
        g = graphs.get(d) if d is not None else None
        if d is None or g is None or not _graphable(call, d, g[1]):
            close_all()
            out.append(call)
            continue
        if call.src[0].op is Op.COPY:
            close_all()
        if (cap := caps.get(d, config.get("JIT_BATCH_SIZE"))) and len(open_.get(d, ())) >= cap:
            close(d)
        open_.setdefault(d, []).append(call)
    close_all()
    return linear if tuple(out) == linear.src else linear.replace(src=tuple(out))


# ---------------------------------------------------------------------------------------------- lowering
def _param(slot: int, buf: UOp) -> UOp:
    return UOp(Op.PARAM, buf.dtype, (), (slot, (buf.arg,), storage.buffer_device(buf)))


def jit_lower(device: str, to_program: ToProgram, linears: Sequence[UOp], input_uops: Sequence[UOp],
              held: Sequence[UOp]) -> UOp:
    """The replayable LINEAR of a capture: inputs slotted, every kernel compiled, memory planned, batched."""
    calls = [c for lin in linears for c in (lin.src if lin.op is Op.LINEAR else (lin,))]
    combined = UOp(Op.LINEAR, dtypes.void, tuple(calls))
    compile_linear(combined)  # every kernel of the capture in one compile per device
    params = {u: _param(i, u) for i, u in enumerate(input_uops)}
    linear = combined.replace(src=tuple(c.replace(src=(c.src[0], *(params.get(a, a) for a in c.src[1:])))
                                        for c in calls))
    linear = plan_memory(linear, [*held, *input_uops], view_alignment)
    linear = linear.replace(src=tuple(c.replace(src=(to_program(c.src[0], arg_device(c.src[1])), *c.src[1:]))
                                      if c.src[0].op is Op.SINK else c for c in linear.src))
    return batch_graphs(device, linear)


# ---------------------------------------------------------------------------------------------- replay steps
def _nbytes(a: UOp) -> int:
    """The bytes of a CALL argument: a BUFFER (arg its size), a JIT input PARAM (arg (slot, (size,), device)) or
    a SLICE of an arena (arg (byte offset, size, id))."""
    size = a.arg if a.op is Op.BUFFER else a.arg[1][0] if a.op is Op.PARAM else a.arg[1]
    return int(size) * a.dtype.itemsize


class _CopyStep:
    """One copy between devices, CALL(COPY, dest, src): the source's bytes into the destination, host memory
    to host memory where both devices have it, else through a staging array (both handles bound, an input's
    patched per call)."""
    __slots__ = ("src", "dest", "handles", "patches", "host")

    def __init__(self, call: UOp, handles: list[Any], patches: tuple[tuple[int, int], ...]):
        dest, src = call.src[1:]
        self.dest, self.src = _device(arg_device(dest)).allocator, _device(arg_device(src)).allocator
        self.handles, self.patches = handles, patches
        self.host = np.empty(_nbytes(src), np.uint8)

    def __call__(self, inputs: list[Any], var_vals: dict[str, int], wait: bool) -> None:
        for pos, slot in self.patches:
            self.handles[pos] = inputs[slot]
        storage.copy_handles(self.dest, self.handles[0], self.src, self.handles[1], self.host.size, self.host)

    def profiled(self, inputs: list[Any], var_vals: dict[str, int]) -> None:
        self(inputs, var_vals, True)


class _CollectiveStep:
    """An allreduce across processes, CALL(COPY arg ("allreduce", op), dest, src) (engine/collective.py): the
    source's bytes into a host array bound once to a persistent allreduce of the joined process group (its
    agreement made at bind, when every rank binds the same capture), the result into the destination."""
    __slots__ = ("src", "dest", "handles", "patches", "host", "req", "op")

    def __init__(self, call: UOp, handles: list[Any], patches: tuple[tuple[int, int], ...]):
        dest, src = call.src[1:]
        self.dest, self.src = _device(arg_device(dest)).allocator, _device(arg_device(src)).allocator
        self.handles, self.patches, self.op = handles, patches, call.src[0].arg[1]
        self.host = np.empty(_nbytes(src) // src.dtype.itemsize, dtypes.to_np(src.dtype))
        group = world()
        self.req = group.allreduce_init(self.host, self.op) if group.persistent else None

    def __call__(self, inputs: list[Any], var_vals: dict[str, int], wait: bool) -> None:
        for pos, slot in self.patches:
            self.handles[pos] = inputs[slot]
        if not self.host.size:
            return
        self.src.copyout(self.host.view(np.uint8).data, self.handles[1])
        if self.req is not None:
            self.req.start()
            out = self.req.wait()
        else:
            out = world().allreduce(self.host, self.op)
        self.dest.copyin(self.handles[0], out.reshape(-1).view(np.uint8).data)

    def profiled(self, inputs: list[Any], var_vals: dict[str, int]) -> None:
        self(inputs, var_vals, True)


class _FoldStep:
    """An allreduce folded in place, CALL(COPY arg ("fold", devices, plan), *results, *partials)
    (engine/direct_fold.py): the kernels planned at capture launched on the bound handles, no copy."""
    __slots__ = ("devices", "plan", "handles", "patches", "allocs", "itemsize")

    def __init__(self, call: UOp, handles: list[Any], patches: tuple[tuple[int, int], ...]):
        _, self.devices, self.plan = call.src[0].arg
        self.handles, self.patches = handles, patches
        self.allocs = [_device(arg_device(a)).allocator for a in call.src[1:]]
        self.itemsize = call.src[1].dtype.itemsize

    def __call__(self, inputs: list[Any], var_vals: dict[str, int], wait: bool) -> None:
        for pos, slot in self.patches:
            self.handles[pos] = inputs[slot]
        refs = list(zip(self.allocs, self.handles, strict=True))
        n = len(self.devices)
        direct_fold.launch(self.plan, self.devices, refs[:n], refs[n:], self.itemsize)

    def profiled(self, inputs: list[Any], var_vals: dict[str, int]) -> None:
        self(inputs, var_vals, True)


# steps that read another device's memory (or another process's): run once every queued launch has run
_SYNC_STEPS = (_CopyStep, _CollectiveStep, _FoldStep)


class _KernelStep:
    """One launch: bound handles, and the (argument position, input slot) pairs patched per call; `call` is
    the compiled CALL it launches (what a profile records)."""
    __slots__ = ("prg", "handles", "patches", "gs", "ls", "ks", "has_vars", "symbolic", "call", "device")

    def __init__(self, ck: CompiledKernel, handles: list[Any], patches: tuple[tuple[int, int], ...], call: UOp):
        self.prg, self.handles, self.patches, self.ks = ck.program, handles, patches, ck.source
        self.gs, self.ls = ck.source.global_size, ck.source.local_size
        self.has_vars = bool(ck.source.vars)
        self.symbolic = any(not isinstance(g, int) for g in self.gs)
        self.call, self.device = call, ck.device

    def __call__(self, inputs: list[Any], var_vals: dict[str, int], wait: bool) -> float | None:
        hs = self.handles
        for pos, slot in self.patches:
            hs[pos] = inputs[slot]
        vals = kernel_vals(self.ks, var_vals) if self.has_vars else ()
        gs = self.ks.launch_dims(var_vals) if self.symbolic else self.gs
        et = self.prg(*hs, global_size=gs, local_size=self.ls, vals=vals, wait=wait)
        GlobalCounters.kernels_launched += 1
        return et

    def profiled(self, inputs: list[Any], var_vals: dict[str, int]) -> None:
        """Launch, wait, and record the launch in the open profiles."""
        profile.record(self.device, self.ks.name, profile.timed(self, inputs, var_vals), self.call, var_vals)


class _GraphStep:
    """A batch replayed by the device's Graph: only launches whose inputs or values changed are updated.
    `calls` are the compiled CALLs of its launches (what a profile records)."""
    __slots__ = ("graph", "bufs", "vals", "patches", "var_launches", "n", "launches", "calls", "device")

    def __init__(self, graph: Any, launches: list[Launch], patches: list[tuple[int, tuple[tuple[int, int], ...]]],
                 var_launches: list[tuple[int, Any]], calls: Sequence[UOp], device: str):
        self.graph, self.patches, self.var_launches = graph, patches, var_launches
        self.n = sum(not isinstance(ln.program, CopyProgram) for ln in launches)  # kernels (not copies)
        self.bufs = [list(ln.bufs) for ln in launches]
        self.vals = [tuple(ln.vals) for ln in launches]
        self.launches, self.calls, self.device = launches, tuple(calls), device

    def __call__(self, inputs: list[Any], var_vals: dict[str, int], wait: bool) -> None:
        self._update(inputs, var_vals)
        self.graph(wait=wait)
        GlobalCounters.kernels_launched += self.n
        GlobalCounters.graph_replays += 1
        GlobalCounters.graph_kernels += self.n
        if config.get("DEBUG") >= 2:  # one line per batched replay (docs/jit.md, seeing the batching)
            print(f"graph {self.device}: replayed {self.n} kernels in one batch ({type(self.graph).__name__})")

    def profiled(self, inputs: list[Any], var_vals: dict[str, int]) -> None:
        """Launch the batch's kernels one by one (the Graph contract: the same results), each waited for and
        recorded in the open profiles; the graph is kept up to date for the replays after the profile."""
        self._update(inputs, var_vals)
        for ln, bufs, vals, call in zip(self.launches, self.bufs, self.vals, self.calls, strict=True):
            if isinstance(ln.program, CopyProgram):  # a copy the Graph takes (GraphSpec.supports_copy)
                ln.program(*bufs, vals=vals)
                continue
            seconds = profile.timed(ln.program, *bufs, global_size=ln.global_size, local_size=ln.local_size,
                                    vals=vals)
            GlobalCounters.kernels_launched += 1
            profile.record(self.device, call.src[0].arg.source.name, seconds, call, var_vals)

    def _update(self, inputs: list[Any], var_vals: dict[str, int]) -> None:
        for li, patches in self.patches:
            bufs, changed = self.bufs[li], False
            for pos, slot in patches:
                if bufs[pos] is not (h := inputs[slot]):
                    bufs[pos], changed = h, True
            if changed:
                self.graph.update(li, bufs=bufs)
        for li, ks in self.var_launches:
            if (vals := kernel_vals(ks, var_vals)) != self.vals[li]:
                self.vals[li] = vals
                self.graph.update(li, vals=vals)


class CapturedJit(Generic[T]):
    """A compiled LINEAR with the binding it replays through (`captured` of a tiny_jit).

    `ret` is what the captured function returned; `input_info` the (element count, dtype, device) per input.
    Intermediates live in arena Buffers this object owns (`free_intermediates` releases them; the next call
    binds again). Buffers the program writes and that a caller may pass back as an input (a ring buffer) are
    copied into a per-slot scratch buffer first, so a kernel never reads an input it also writes.
    """

    def __init__(self, ret: T, linear: UOp, input_info: list[tuple[int, Any, str]], device: str):
        self.ret, self.linear, self.input_info, self.device = ret, linear, input_info, device
        self.written = frozenset(a for c in self._flat_calls() for s, a in enumerate(c.src[1:])
                                 if a.op is Op.BUFFER and s in written_slots(c.src[0]))
        self._steps: list[Any] | None = None
        self._owned: list[Buffer] = []
        self._scratch: dict[int, tuple[Buffer, np.ndarray]] = {}

    def _flat_calls(self) -> list[UOp]:
        out: list[UOp] = []
        for c in self.linear.src:
            out.extend(c.src[0].src[0].src if c.src[0].op is Op.CUSTOM_FUNCTION else (c,))
        return out

    @property
    def arenas(self) -> list[UOp]:
        """The arena BUFFERs of the memory plan."""
        return list(dict.fromkeys(a.src[0] for c in self._flat_calls() for a in c.src[1:] if a.op is Op.SLICE))

    def free_intermediates(self) -> None:
        """Release the arenas and the bound steps; the next replay binds again (allocating new arenas)."""
        self._steps, self._owned = None, []
        self._scratch.clear()

    def bind(self, resolve: Resolver, inputs: list[Any], var_vals: dict[str, int]) -> None:
        """Build the replay steps: resolve every non-input argument once, allocate the arenas."""
        arenas: dict[UOp, Buffer] = {}
        owned: list[Buffer] = []

        def handle(a: UOp) -> Any:
            if a.op is Op.SLICE:
                if (base := arenas.get(a.src[0])) is None:
                    base = arenas[a.src[0]] = Buffer(storage.buffer_device(a.src[0]), a.src[0].arg, dtypes.uint8)
                    owned.append(base)
                view = base.view(a.arg[1], a.dtype, a.arg[0])
                owned.append(view)
                return view.handle
            if (buf := resolve(a)) is None:
                raise JitError(f"JIT: the captured buffer {a.dtype.name}[{a.arg}] on {storage.buffer_device(a)} "
                               "has no backing buffer")
            return buf.handle

        def args(call: UOp) -> tuple[list[Any], tuple[tuple[int, int], ...]]:
            hs, patches = [], []
            for pos, a in enumerate(call.src[1:]):
                if a.op is Op.PARAM:
                    hs.append(inputs[a.arg[0]])
                    patches.append((pos, a.arg[0]))
                else:
                    hs.append(handle(a))
            return hs, tuple(patches)

        steps: list[Any] = []
        for call in self.linear.src:
            body = call.src[0]
            if body.op is Op.PROGRAM:
                hs, patches = args(call)
                steps.append(_KernelStep(body.arg, hs, patches, call))
                continue
            if body.op is Op.COPY:
                hs, patches = args(call)
                kind = _CopyStep if body.arg is None else _FoldStep if body.arg[0] == "fold" else _CollectiveStep
                steps.append(kind(call, hs, patches))
                continue
            steps.append(self._graph_step(body.src[0].src, args, var_vals))
        self._steps, self._owned = steps, owned

    def _graph_step(self, calls: Sequence[UOp], args: Callable[[UOp], tuple[list[Any], tuple]],
                    var_vals: dict[str, int]) -> _GraphStep:
        """The replay step of one graph batch: its launches (a copy's program a `CopyProgram`, its size
        the one value) built into the Graph of the batch's device."""
        device = arg_device(calls[0].src[1])
        dev = _device(device)
        launches, gpatches, var_launches = [], [], []
        for li, inner in enumerate(calls):
            hs, patches = args(inner)
            if inner.src[0].op is Op.COPY:
                launches.append(Launch(CopyProgram(dev, _device(arg_device(inner.src[2])).allocator), hs,
                                       [_nbytes(inner.src[2])]))
            else:
                ck: CompiledKernel = inner.src[0].arg
                launches.append(Launch(ck.program, hs, list(kernel_vals(ck.source, var_vals)),
                                       ck.source.launch_dims(var_vals), ck.source.local_size, ck.source.source))
                if ck.source.vars:
                    var_launches.append((li, ck.source))
            if patches:
                gpatches.append((li, patches))
        return _GraphStep(dev.graph(dev, launches), launches, gpatches, var_launches, calls, device)

    def input_handles(self, input_uops: Sequence[UOp], resolve: Resolver) -> list[Any]:
        """Validate the inputs against the capture and return their handles (aliased ones via scratch copies)."""
        if len(input_uops) != len(self.input_info):
            raise JitError(f"JIT input mismatch: captured with {len(self.input_info)} input(s), called with "
                           f"{len(input_uops)}")
        handles: list[Any] = []
        for i, (u, (size, dtype, device)) in enumerate(zip(input_uops, self.input_info, strict=True)):
            if u.op is Op.BUFFER and u.arg == size and u.dtype is dtype and u.src[1].arg == device and \
                    u not in self.written and not ranks.is_remote(device) and (buf := resolve(u)) is not None:
                # the common case (a local input as captured, not written by the capture), checked at once
                handles.append(buf.handle)
                continue
            if u.op is not Op.BUFFER:
                raise JitError(f"JIT input {i} must be a BUFFER node, got {u.op.name}")
            if ranks.is_remote(device):  # another rank's shard (runtime/ranks.py): no call of this process reads it
                handles.append(None)
                continue
            for what, want, got in (("element count", size, u.arg), ("dtype", dtype, u.dtype),
                                    ("device", device, storage.buffer_device(u))):
                if want != got:
                    raise JitError(f"JIT input {i} mismatch: {what} {_show(got)} differs from the capture's "
                                   f"{_show(want)}")
            if (buf := resolve(u)) is None:
                raise JitError(f"JIT input {i} ({u.dtype.name}[{u.arg}] on {device}) has no backing buffer")
            handles.append(self._copy_aliased(i, buf) if u in self.written else buf.handle)
        return handles

    def _copy_aliased(self, slot: int, buf: Buffer) -> Any:
        if (hit := self._scratch.get(slot)) is None:
            hit = self._scratch[slot] = (Buffer(buf.device, buf.size, buf.dtype), np.empty(buf.nbytes, np.uint8))
        scratch, host = hit
        buf.copyout(host.data)
        scratch.copyin(host.data)
        return scratch.handle

    def replay(self, inputs: list[Any], var_vals: dict[str, int], wait: bool = False) -> T:
        steps = self._steps
        assert steps is not None, "bind() before replay()"
        if profile.profiling():  # every launch waited for, timed and recorded
            for step in steps:
                step.profiled(inputs, var_vals)
            return self.ret
        if wait or len({s.device for s in steps if not isinstance(s, _SYNC_STEPS)}) < 2:
            last = len(steps) - 1
            for i, step in enumerate(steps):
                step(inputs, var_vals, wait and i == last)
            return self.ret
        # several devices: each device's launches from its own thread (engine/concurrent.py); a step that reads
        # another device (a copy, a collective, a Graph batch holding a copy) runs here once every queued launch
        # has run, before any later launch may overwrite what it reads
        with concurrent.together():
            for step in steps:
                if isinstance(step, _SYNC_STEPS) or (isinstance(step, _GraphStep) and step.n < len(step.launches)):
                    concurrent.settle()
                    step(inputs, var_vals, False)
                else:
                    concurrent.defer(step.device, functools.partial(step, inputs, var_vals, False))
        return self.ret


def _show(v: Any) -> str:
    return v.name if hasattr(v, "name") and not isinstance(v, str) else str(v)


# ---------------------------------------------------------------------------------------------- the wrapper
class TinyJit(Generic[T]):
    """The JIT wrapper, tiny_jit. Build with `create`; run with `call`."""

    def __init__(self, device: str, to_program: ToProgram, fxn: Callable[[list[UOp], dict[str, int]], T] | None,
                 captured: CapturedJit[T] | None, prune: bool):
        if fxn is None and captured is None:
            raise ValueError("tiny_jit.create needs fxn (the function to JIT) or captured (a captured schedule)")
        self.device, self.to_program, self.fxn, self.prune = device, to_program, fxn, prune
        self._captured = captured
        self.cnt = 0 if captured is None else 2

    @property
    def captured(self) -> CapturedJit[T] | None:
        return self._captured

    def reset(self) -> None:
        """Back to warmup; the captured schedule is dropped."""
        if self.fxn is None:
            raise ValueError("tiny_jit.reset: this JIT was created from a captured schedule, without a function")
        self.cnt, self._captured = 0, None

    def call(self, input_uops: Sequence[UOp], var_vals: dict[str, int] | None = None,
             buffers: Resolver = storage.runtime_buffer, held_buffers: Callable[[], Sequence[UOp]] | None = None,
             wait: bool = False) -> T:
        """Run one call (see the module docstring for the phases)."""
        var_vals = dict(var_vals or {})
        if self.fxn is not None and (config.get("JIT") == 0 or (self.cnt == 0 and self._captured is None)):
            ret = self.fxn(list(input_uops), var_vals)
            if config.get("JIT") != 0:
                self.cnt = 1
            return ret
        if self._captured is None:
            self._captured = self._capture(input_uops, var_vals, held_buffers)
        cap = self._captured
        inputs = cap.input_handles(input_uops, buffers)
        if cap._steps is None:  # just captured, loaded, or freed: bind with this call's inputs
            cap.bind(buffers, inputs, var_vals)
        ret = cap.replay(inputs, var_vals, wait)
        self.cnt += 1
        return ret

    def _capture(self, input_uops: Sequence[UOp], var_vals: dict[str, int],
                 held_buffers: Callable[[], Sequence[UOp]] | None) -> CapturedJit[T]:
        if run.capturing():
            raise JitError("nested JIT capture: a jitted function was called while another JIT was capturing; "
                           "call the inner function directly instead")
        assert self.fxn is not None
        with run.capture() as rec:
            ret = self.fxn(list(input_uops), var_vals)
        var_vals.update(rec.var_vals)
        linears = rec.linears
        if not linears:
            raise JitError("didn't JIT anything: the function ran no kernels while capturing (is everything it "
                           "returns already computed?)")
        held = list(held_buffers()) if held_buffers is not None else []
        linear = jit_lower(self.device, self.to_program, linears, input_uops, held)
        info = [(u.arg, u.dtype, storage.buffer_device(u)) for u in input_uops]
        return CapturedJit(ret, linear, info, self.device)


def create(device: str, to_program: ToProgram = to_program,
           fxn: Callable[[list[UOp], dict[str, int]], T] | None = None, captured: CapturedJit[T] | None = None,
           prune: bool = False) -> TinyJit[T]:
    """A JIT wrapper over `fxn(input_uops, var_vals)`, or over a `captured` schedule (starts at replay).

    `to_program(kernel_sink, device)` compiles one kernel into a PROGRAM node. `prune` is accepted for
    compatibility and ignored. Raises ValueError when neither fxn nor captured is given."""
    return TinyJit(device, to_program, fxn, captured, prune)


def call(t: TinyJit[T], input_uops: Sequence[UOp], var_vals: dict[str, int] | None = None,
         buffers: Resolver = storage.runtime_buffer, held_buffers: Callable[[], Sequence[UOp]] | None = None,
         wait: bool = False) -> T:
    """`t.call(...)` (the function form of the method)."""
    return t.call(input_uops, var_vals, buffers=buffers, held_buffers=held_buffers, wait=wait)


def reset(t: TinyJit[Any]) -> None:
    """`t.reset()` (the function form of the method)."""
    t.reset()


def captured(t: TinyJit[T]) -> CapturedJit[T] | None:
    """`t.captured` (the function form of the method)."""
    return t.captured
