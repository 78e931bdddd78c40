"""tuning: the search (BEAM) at a kernel's first launch, on the kernel's real buffers (docs/tuning.md).

With BEAM=n (n the beam width) `run_linear` hands each kernel that has no tuning-cache entry yet to
`tune_linear` before launching it. The search (tolk_core/tune/search.py) starts from the heuristic's plan and
tries the plans one optimizer choice away (codegen/choices.py), at the kernel's real size on its device:

- a candidate whose generated kernel equals one already tried (same source and launch) is skipped; the new
  candidates of a round are rendered into one module and compiled in one compiler call;
- every run starts from the same data: the buffers the kernel writes are saved first and put back before each
  run whose output is compared (an in-place update, `p -= lr * g`, would otherwise see its own result) and once
  more when the search ends, before the real launch;
- a candidate's output must equal the heuristic kernel's: bit for bit for integers and booleans, within the
  reduction-order tolerance (relative 1e-4 of the output's largest magnitude) for floats;
- caps: TUNE_KERNEL_SECONDS per kernel, TUNE_PROGRAM_SECONDS for all searches of the process.

The result (the choices kept, or none) is stored in the tuning cache, so the kernel is planned from it in
every later compile, in this process and the next ones (engine/tuned.py), and is never searched again.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tolk_core import config
from tolk_core.codegen import KernelSource, choices, generate, optimize
from tolk_core.codegen.choices import Choices, using
from tolk_core.counters import GlobalCounters
from tolk_core.engine.compile import arg_device, kernel_vals, load, use_program
from tolk_core.engine.tuned import device_kind, start_choices, tune_key
from tolk_core.errors import CompileError
from tolk_core.ir.calls import KernelCode
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device
from tolk_core.tune import cache
from tolk_core.tune.search import Limits, program_timer, search

_searched = {"seconds": 0.0}  # this process's search time, against TUNE_PROGRAM_SECONDS
_tried: set[str] = set()      # kernels searched in this process (an entry that could not be written)
# (device, kernel) pairs already searched or found in the cache: later launches skip the key and the disk lookup
_settled: set[tuple[str | None, str, UOp]] = set()

Program = tuple[Any, KernelSource]


def tune_linear(linear: UOp, programs: Sequence[Program], bufs: Sequence[Sequence[Any]],
                var_vals: dict[str, int]) -> list[Program]:
    """`programs` (one per CALL of `linear`, launched on the runtime Buffers `bufs`) with each kernel not tuned
    before searched and, where the search found a faster plan, replaced by it (also for later launches)."""
    out = list(programs)
    for i, call in enumerate(linear.src):
        ast = call.src[0]
        if isinstance(ast.arg, KernelCode):
            continue
        name = arg_device(call.src[1])
        settled = (config.get("CACHE_DIR"), name, ast)
        if settled in _settled:
            continue
        device = Device[name]
        key = tune_key(ast, name, device)
        if key is None or key in _tried or cache.lookup(key) is not None:
            _settled.add(settled)
            continue
        left = config.get("TUNE_PROGRAM_SECONDS") - _searched["seconds"]
        if left <= 0:
            break
        _tried.add(key)
        _settled.add(settled)
        entry, best = _tune_kernel(name, device, ast, out[i], bufs[i], var_vals,
                                   min(config.get("TUNE_KERNEL_SECONDS"), left))
        cache.store(key, entry)
        GlobalCounters.tune_searches += 1
        if best is not None:
            out[i] = best
            use_program(device, ast, best)
    return out


def _tune_kernel(name: str, device: Any, ast: UOp, heuristic: Program, bufs: Sequence[Any],
                 var_vals: dict[str, int], seconds: float) -> tuple[cache.Entry, Program | None]:
    """Search kernel `ast`'s plan on `bufs`; the cache entry and the better program found (None: the heuristic's
    plan stays)."""
    ks = heuristic[1]
    written = [j for j, p in enumerate(ks.params) if p.var is None and p.written]
    saved = {j: _read(bufs[j]) for j in written}

    def restore() -> None:
        for j, data in saved.items():
            bufs[j].copyin(data)

    def bound(prg: Program) -> Callable[..., Any]:
        p, k = prg
        return functools.partial(p, *[b.handle for b in bufs], global_size=k.launch_dims(var_vals),
                                 local_size=k.local_size, vals=kernel_vals(k, var_vals))

    start = start_choices()  # the heuristics' plan, or TUNE_START's: `heuristic` was generated with it
    plans: dict[Choices, Program] = {start: heuristic}
    restore()
    bound(heuristic)(wait=True)
    reference = {j: _read(bufs[j]) for j in written}

    def same_output(c: Choices) -> bool:
        restore()
        bound(plans[c])(wait=True)
        return all(_close(reference[j], _read(bufs[j]), ks.params[j].dtype) for j in written)

    neighbours = _Neighbours(name, device, ast, plans)
    limits = Limits(width=max(1, config.get("BEAM")), seconds=seconds)
    outcome = search(start, neighbours, program_timer(lambda c: bound(plans[c])), same_output, limits)
    restore()
    _searched["seconds"] += outcome.seconds
    entry = cache.Entry(ks.name, device_kind(name), outcome.best.as_dict(), outcome.gain, outcome.seconds)
    return entry, (plans[outcome.best] if outcome.best != start else None)


class _Neighbours:
    """The plans one choice from a plan, compiled together per round; plans equal to one tried are left out."""

    def __init__(self, name: str, device: Any, ast: UOp, plans: dict[Choices, Program]):
        self.name, self.device, self.ast, self.plans = name, device, ast, plans
        self.kind = "gpu" if device.renderer.has_local else "cpu"
        self.defaults = {k: getattr(optimize, k) for k in choices.KNOBS}
        self.seen = {_launch_of(ks) for _, ks in plans.values()}

    def __call__(self, c: Choices) -> list[Choices]:
        fresh: list[tuple[Choices, KernelSource]] = []
        for n in choices.neighbours(c, self.defaults, self.kind):
            if n in self.plans:
                continue
            with using(n):
                ks = generate(self.ast, self.device.renderer)
            if (launch := _launch_of(ks)) not in self.seen:
                self.seen.add(launch)
                fresh.append((n, ks))
        if not fresh:
            return []
        module = self.device.renderer.render_module(list({ks.name: ks.source for _, ks in fresh}.values()))
        try:
            lib = self.device.compiler.compile_cached(module)
        except CompileError:  # a plan its compiler refuses is no candidate
            return []
        for (n, ks), prg in zip(fresh, load(self.device, [ks for _, ks in fresh], lib), strict=True):
            self.plans[n] = (prg, ks)
        return [n for n, _ in fresh]


def _launch_of(ks: KernelSource) -> tuple:
    return ks.source, ks.global_size, ks.local_size


def _read(buf: Any) -> bytes:
    out = bytearray(buf.nbytes)
    if buf.nbytes:
        buf.copyout(out)
    return bytes(out)


def _close(ref: bytes, got: bytes, dtype: Any) -> bool:
    """Whether a candidate's output `got` equals the heuristic's `ref`: bitwise, or for floats within the
    reduction-order tolerance (1e-4 of the output's largest magnitude; NaN where the reference has NaN)."""
    if ref == got:
        return True
    if not dtypes.is_float(dtype):
        return False
    npd = dtypes.to_np(dtype)
    r = np.frombuffer(ref, npd).astype(np.float64)
    g = np.frombuffer(got, npd).astype(np.float64)
    finite = np.isfinite(r)
    if not np.array_equal(np.isnan(r), np.isnan(g)) or not np.array_equal(r[~finite & ~np.isnan(r)],
                                                                          g[~finite & ~np.isnan(r)]):
        return False
    scale = float(np.max(np.abs(r[finite]), initial=0.0)) or 1.0
    return bool(np.all(np.abs(r[finite] - g[finite]) <= 1e-4 * scale))
