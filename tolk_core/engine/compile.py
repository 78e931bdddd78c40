"""compile: kernel ASTs to loaded programs, rendered and compiled together, cached by (device, AST).

`render_together(asts, renderer)` renders kernels into one module in the renderer's dialect (one C file, one
OpenCL program): each distinct kernel once. `load(device, sources, lib)` loads each rendered kernel from a
compiled module with the device's Program class. `compile_linear(linear)` gives the program of every CALL of
a LINEAR, compiling the missing ones together, one compiler call per device; `to_program(ast, device)` is
the PROGRAM node of one kernel (what the JIT's lowering uses). Programs are cached in memory by (opened
device, kernel AST); binaries on disk by the device's compiler, rendered sources by `source_cache`.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tolk_core import config
from tolk_core.codegen import KernelSource, generate
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers
from tolk_core.engine.source_cache import generate_cached
from tolk_core.errors import CompileTimeoutError
from tolk_core.ir.calls import KernelCode
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device
from tolk_core.render.cstyle import KernelParam
from tolk_core.render.renderer import Renderer

# (opened device, kernel AST) -> (loaded program, its rendered source)
_programs: dict[tuple[Any, UOp], tuple[Any, KernelSource]] = {}


@dataclass(frozen=True)
class CompiledKernel:
    """The arg of a PROGRAM node: the loaded program and its rendered source facts (launch sizes, params)."""
    device: str
    program: Any
    source: KernelSource


def kernel_vals(ks: KernelSource, var_vals: dict[str, int]) -> tuple[int, ...]:
    """The scalar arguments of one launch: the kernel's variables' values, in parameter order."""
    return tuple(var_vals[v] for v in ks.vars)


def arg_device(u: UOp) -> str:
    """The device of a CALL argument: a BUFFER, a JIT input PARAM (arg (slot, shape, device)) or a SLICE of one."""
    while u.op is Op.SLICE:
        u = u.src[0]
    return u.arg[2] if u.op is Op.PARAM else buffers.buffer_device(u)


def render_together(asts: Sequence[UOp], renderer: Renderer, cached: bool = True) -> tuple[str, list[KernelSource]]:
    """The module text holding every distinct kernel of `asts` once, and each AST's KernelSource, in
    `renderer`'s dialect. `cached=False` generates every source anew (the conformance suite checks exactly
    what codegen makes)."""
    make = generate_cached if cached else generate
    sources = [_code_source(ast.arg) if isinstance(ast.arg, KernelCode) else make(ast, renderer) for ast in asts]
    unique = {ks.name: ks.source for ks in sources}
    return renderer.render_module(list(unique.values())), sources


def load(device: Any, sources: Sequence[KernelSource], lib: bytes) -> list[Any]:
    """Each rendered kernel of `sources` loaded from the compiled module `lib` with `device`'s Program class."""
    return [device.runtime(device, ks.name, lib) for ks in sources]


def compile_linear(linear: UOp) -> list[tuple[Any, KernelSource]]:
    """The program of every CALL in `linear`; the missing ones are compiled together, one unit per device."""
    missing: dict[str, list[UOp]] = {}
    for call in linear.src:
        # keyed by the opened device, not its name: a device reopened (registry reset) needs its own programs
        dev = arg_device(call.src[1])
        if (Device[dev], call.src[0]) not in _programs and call.src[0] not in missing.get(dev, []):
            missing.setdefault(dev, []).append(call.src[0])
    for dev, asts in missing.items():
        _compile_together(dev, asts)
    return [_programs[(Device[arg_device(c.src[1])], c.src[0])] for c in linear.src]


def to_program(ast: UOp, device: str) -> UOp:
    """PROGRAM(ast) of kernel SINK `ast` on `device`, its arg a CompiledKernel (compiled alone if missing:
    `compile_linear` first compiles a whole schedule in one unit)."""
    if (Device[device], ast) not in _programs:
        _compile_together(device, [ast])
    prg, ks = _programs[(Device[device], ast)]
    return UOp(Op.PROGRAM, dtypes.void, (ast,), CompiledKernel(device, prg, ks))


def _compile_together(name: str, asts: list[UOp]) -> None:
    device = Device[name]
    module, sources = render_together(asts, device.renderer)
    if config.get("DEBUG") >= 4:
        print(module)
    start = time.perf_counter()
    GlobalCounters.kernels_compiled += len({ks.name for ks in sources})
    try:
        lib = device.compiler.compile_cached(module)
    except CompileTimeoutError as e:  # the compiler knows the limit; the kernels are named here
        kernels = ", ".join(dict.fromkeys(ks.name for ks in sources))
        raise CompileTimeoutError(f"compiling kernel(s) {kernels} for {name}: {e.args[0]}", e.source, e.log) from None
    if (took := time.perf_counter() - start) > config.get("COMPILE_WARN_SECONDS"):
        _warn_slow(name, took, sources)
    for ast, ks, prg in zip(asts, sources, load(device, sources, lib), strict=True):
        _programs[(device, ast)] = (prg, ks)


def _warn_slow(device: str, seconds: float, sources: Sequence[KernelSource]) -> None:
    """Warn that compiling `sources` for `device` took `seconds`, naming the largest kernels (by source size),
    which are usually the cause; KERNEL_MAX_OPS splits kernels smaller."""
    largest = sorted({ks.name: ks for ks in sources}.values(), key=lambda ks: -len(ks.source))[:3]
    names = ", ".join(f"{ks.name} ({ks.source.count(chr(10)) + 1} lines)" for ks in largest)
    warnings.warn(f"compiling {len(sources)} kernel(s) for {device} took {seconds:.1f} s; the largest: {names}. "
                  "A smaller KERNEL_MAX_OPS splits fused kernels before they get this big", CompileTimeWarning,
                  stacklevel=4)


class CompileTimeWarning(UserWarning):
    """A compile took longer than COMPILE_WARN_SECONDS."""


def _code_source(code: KernelCode) -> KernelSource:
    """The KernelSource of a kernel given as code: its text as given, one buffer parameter per argument (of
    a type the text alone declares)."""
    params = tuple(KernelParam(i, dtypes.void, w) for i, w in enumerate(code.written))
    return KernelSource(code.name, code.source, code.global_size, code.local_size, params)
