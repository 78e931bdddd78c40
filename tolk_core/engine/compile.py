"""compile: kernel ASTs to loaded programs, rendered and compiled together, cached by (device, AST).

`render_together(asts, renderer)` renders kernels into one module in the renderer's dialect (one C file, one
OpenCL program): each distinct kernel once. `load(device, sources, lib)` loads each rendered kernel from a
compiled module with the device's Program class. `compile_linear(linear)` gives the program of every CALL of
a LINEAR, compiling the missing ones together, one compiler call per device; `to_program(ast, device)` is
the PROGRAM node of one kernel (what the JIT's lowering uses). Programs are cached in memory by (opened
device, kernel AST); binaries on disk by the device's compiler, rendered sources by `source_cache`.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tolk_core import config
from tolk_core.codegen import KernelSource, generate
from tolk_core.codegen.choices import Choices, using
from tolk_core.counters import GlobalCounters
from tolk_core.engine import buffers, progress
from tolk_core.engine.source_cache import generate_cached
from tolk_core.engine.tuned import planned_choices
from tolk_core.errors import CompileError, IndexWidthError, TolkError
from tolk_core.ir.calls import KernelCode
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device
from tolk_core.render.cstyle import KernelParam
from tolk_core.render.renderer import INT32_RANGE, Renderer

# (opened device, kernel AST) -> (loaded program, its rendered source)
_programs: dict[tuple[Any, UOp], tuple[Any, KernelSource]] = {}
# (renderer class, compiler identity, kernel AST) -> (the compiled module holding it, its rendered source): the
# devices of one backend that render and compile alike (virtual CPU devices, identical GPUs) share one compile
# per kernel, each loading its own program from the module (docs/multi-device.md)
_modules: dict[tuple[type, str, UOp], tuple[bytes, KernelSource]] = {}


@dataclass(frozen=True)
class CompiledKernel:
    """The arg of a PROGRAM node: the loaded program and its rendered source facts (launch sizes, params)."""
    device: str
    program: Any
    source: KernelSource


def kernel_vals(ks: KernelSource, var_vals: dict[str, int]) -> tuple[int, ...]:
    """The scalar arguments of one launch: the kernel's variables' values, in parameter order. Raises
    IndexWidthError for a value outside int32: integer kernel arguments are 32-bit (docs/dtypes.md, index width),
    and the runtimes would pass it wrapped."""
    vals = tuple(var_vals[v] for v in ks.vars)
    for name, v in zip(ks.vars, vals, strict=True):
        if not INT32_RANGE[0] <= v <= INT32_RANGE[1]:
            raise IndexWidthError(f"variable {name!r} is bound to {v}, past the 32-bit range of integer kernel "
                                  f"arguments (kernel {ks.name}): bind values below 2^31, or use a constant size")
    return vals


def arg_device(u: UOp) -> str:
    """The device of a CALL argument: a BUFFER, a JIT input PARAM (arg (slot, shape, device)) or a SLICE of one."""
    while u.op is Op.SLICE:
        u = u.src[0]
    return u.arg[2] if u.op is Op.PARAM else buffers.buffer_device(u)


def render_together(asts: Sequence[UOp], renderer: Renderer, cached: bool = True,
                    each: Callable[[], None] | None = None,
                    choices_of: Callable[[UOp], Choices | None] | None = None) -> tuple[str, list[KernelSource]]:
    """The module text holding every distinct kernel of `asts` once, and each AST's KernelSource, in
    `renderer`'s dialect. `cached=False` generates every source anew (the conformance suite checks exactly
    what codegen makes); `each()`, when given, is called after each kernel is rendered (progress);
    `choices_of(ast)`, when given, the optimizer choices to plan a kernel with (a tuned kernel's; None: the
    heuristics')."""
    make = generate_cached if cached else generate
    sources = []
    for ast in asts:
        if isinstance(ast.arg, KernelCode):
            sources.append(_code_source(ast.arg))
        else:
            picked = choices_of(ast) if choices_of is not None else None
            with using(picked) if picked is not None else contextlib.nullcontext():
                sources.append(make(ast, renderer))
        if each is not None:
            each()
    unique = {ks.name: ks.source for ks in sources}
    return renderer.render_module(list(unique.values())), sources


def load(device: Any, sources: Sequence[KernelSource], lib: bytes) -> list[Any]:
    """Each rendered kernel of `sources` loaded from the compiled module `lib` with `device`'s Program class."""
    return [device.runtime(device, ks.name, lib) for ks in sources]


def compile_linear(linear: UOp) -> list[tuple[Any, KernelSource]]:
    """The program of every kernel CALL in `linear` (COPY calls have none); the missing ones are compiled
    together, one unit per device."""
    missing: dict[str, list[UOp]] = {}
    # keyed by the opened device, not its name: a device reopened (registry reset) needs its own programs. Each
    # name is opened once per call (`Device[name]` checks availability every time)
    opened: dict[str, Any] = {}
    keys = []
    for call in linear.src:
        if call.src[0].op is Op.COPY:  # a copy between devices (a JIT capture's): nothing to compile
            continue
        dev = arg_device(call.src[1])
        if (handle := opened.get(dev)) is None:
            handle = opened[dev] = Device[dev]
        keys.append((handle, call.src[0]))
        if keys[-1] not in _programs and call.src[0] not in missing.get(dev, []):
            missing.setdefault(dev, []).append(call.src[0])
    if not missing:
        return [_programs[k] for k in keys]
    with progress.showing(sum(len(asts) for asts in missing.values()), next(iter(missing))) as shown:
        for dev, asts in missing.items():
            _compile_together(dev, asts, shown)
    return [_programs[(Device[arg_device(c.src[1])], c.src[0])] for c in linear.src if c.src[0].op is not Op.COPY]


def use_program(device: Any, ast: UOp, program: tuple[Any, KernelSource]) -> None:
    """Launch `program` (loaded program, rendered source) for kernel `ast` on the opened `device` from now on:
    a tuned plan replacing the heuristic's (engine/tuning.py)."""
    _programs[(device, ast)] = program
    _replaced[0] += 1


# how many programs `use_program` replaced: whoever keeps programs it looked up (`loaded`) looks again on change
_replaced = [0]


def replaced() -> int:
    """A count that changes whenever a kernel's program is replaced (a tuned plan): programs from `loaded`
    are current while it stays the same."""
    return _replaced[0]


def loaded(device: Any, asts: Sequence[UOp]) -> list[tuple[Any, KernelSource]] | None:
    """The loaded program and source of each kernel SINK of `asts` on the opened `device`, where every one is
    compiled already; None otherwise (nothing is compiled here)."""
    out = []
    for ast in asts:
        if ast.op is not Op.SINK or (p := _programs.get((device, ast))) is None:
            return None
        out.append(p)
    return out


def to_program(ast: UOp, device: str) -> UOp:
    """PROGRAM(ast) of kernel SINK `ast` on `device`, its arg a CompiledKernel (compiled alone if missing:
    `compile_linear` first compiles a whole schedule in one unit)."""
    if (Device[device], ast) not in _programs:
        _compile_together(device, [ast])
    prg, ks = _programs[(Device[device], ast)]
    return UOp(Op.PROGRAM, dtypes.void, (ast,), CompiledKernel(device, prg, ks))


def _shared_key(device: Any, ast: UOp) -> tuple[type, str, UOp]:
    """The key under which devices that render and compile alike share `ast`'s compiled module."""
    compiler = device.compiler
    if compiler._identity is None:  # the identity is read once per compiler (Compiler.cache_key)
        compiler._identity = compiler.identity()
    return type(device.renderer), compiler._identity, ast


def _compile_together(name: str, asts: list[UOp], shown: progress.Progress | None = None) -> None:
    device = Device[name]
    # another opened device may have compiled these kernels already (one device open: the common case, no lookups)
    if len(Device.opened()) > 1:
        for ast in [a for a in asts if _shared_key(device, a) in _modules]:
            lib, ks = _modules[_shared_key(device, ast)]
            _programs[(device, ast)] = (load(device, [ks], lib)[0], ks)
            GlobalCounters.programs_shared += 1
        if not (asts := [a for a in asts if (device, a) not in _programs]):
            return
    if shown is not None:
        shown.rendering(name)
    module, sources = render_together(asts, device.renderer, each=shown.kernel_rendered if shown else None,
                                      choices_of=lambda ast: planned_choices(ast, name, device))
    if config.get("DEBUG") >= 4:
        print(module)
    if shown is not None:
        shown.compiler_running()
    start = time.perf_counter()
    GlobalCounters.kernels_compiled += len({ks.name for ks in sources})
    lib = _compile_named(device, name, module, sources)
    if (took := time.perf_counter() - start) > config.get("COMPILE_WARN_SECONDS"):
        _warn_slow(name, took, sources)
    for ast, ks, prg in zip(asts, sources, load(device, sources, lib), strict=True):
        _programs[(device, ast)] = (prg, ks)
        _modules[_shared_key(device, ast)] = (lib, ks)


def _compile_named(device: Any, name: str, module: str, sources: Sequence[KernelSource]) -> bytes:
    """`device`'s compiler on `module`, its failures naming the device `name`, its plugin and the kernels: a
    CompileError (of any subclass) gets that prefix and is re-raised as it is; another TolkError passes; any
    other exception is a bug of the plugin's compiler, raised as a CompileError."""
    try:
        return device.compiler.compile_cached(module)
    except Exception as e:
        kernels = ", ".join(dict.fromkeys(ks.name for ks in sources))
        where = f"compiling kernel(s) {kernels} for {name} (plugin {Device.provider(name)})"
        if isinstance(e, CompileError):
            e.args = (f"{where}: {e.args[0] if e.args else ''}", *e.args[1:])
            raise
        if isinstance(e, TolkError):
            raise
        raise CompileError(f"{where}: the compiler raised {type(e).__name__}: {e}. This is a bug of the plugin's "
                           "compiler (it should raise CompileError): report it to the plugin's authors",
                           module) from e


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
