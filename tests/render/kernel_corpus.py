"""The kernel corpus: rendered kernel sources of a fixed set of programs, stored per renderer, so a refactor of
the engine or the IR can prove that the code it generates is unchanged (tests/render/test_kernel_corpus.py
regenerates every entry and compares it byte for byte).

    python -m tests.render.kernel_corpus           # compare with the stored corpus, print what differs
    python -m tests.render.kernel_corpus --write   # (re)write tests/fixtures/kernel_corpus/<renderer>.json

Regenerating is only for INTENDED codegen changes. It must be its own commit, whose message says which
change of the generated code it records and why that change is wanted; a refactor that is meant to leave
codegen alone never regenerates.

What is recorded: tests/fixtures/kernel_corpus/<renderer>.json maps each program's name to {"module": the module
text (`renderer.render_module` over the program's distinct kernels, each from `tolk_core.codegen.generate`, not
the disk-cached path) split into lines, "calls": one line per CALL of the schedule in launch order (kernel
name, global and local size)}, or to {"error": [the exception]} where the renderer refuses the program (the
example device has no float16). One JSON string per line, so a change shows in `git diff` as the lines it
changed.

The programs (`programs()`): every case of tolk_core.testing.programs.PROGRAMS, the Tensor programs of the
benchmark rows (bench/rows.py, bench/suite.py) at the bench's sizes, the seeded random programs of
tests/engine/test_random_programs.py, and a training step (forward, backward, SGD update) of the demo's digits
MLP. Inputs are `Tensor.empty` on PYTHON: nothing is uploaded, allocated or run.

Nothing depends on the machine: each renderer is built with fixed capabilities and every attribute the
optimizer or the engine reads from a renderer is pinned in `RENDERERS`; the scheduling and codegen settings are
pinned in `SETTINGS`. Every use of the engine's scheduling APIs is in `schedule_kernels`, the one function to
update when those APIs change.
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tolk_core import config
from tolk_core.codegen import KernelSource, generate
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.uop import UOp

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "kernel_corpus"
DEVICE = "PYTHON"  # where the graphs are built: core's own device, present everywhere

# scheduling and codegen settings, pinned against the environment and config files
SETTINGS = {"NOOPT": 0, "SPLIT_REDUCEOP": 1, "REDUCEOP_SPLIT_SIZE": 22, "REDUCEOP_SPLIT_THRESHOLD": 32768,
            "PLACEMENT_STACK_THRESHOLD": 16384, "DEBUG": 0, "SPEC": 0}

# Every attribute the optimizer (tolk_core.codegen.optimize) and the engine (tolk_core.engine.realize) read from
# a renderer, pinned per renderer. A real OpenCL device sets `cpu_threads` (a CPU-type PoCL device's compute
# units) and the extension set (which decides float64 and native half) from its hardware: here they are fixed,
# as on a 2-core PoCL CPU device with fp16 and fp64. The rest are class constants, pinned so the corpus says
# what it assumed.
PINNED_ATTRS = ("has_local", "local_max", "shared_bytes", "vector_bytes", "vector_registers", "max_lanes",
                "cpu_threads", "local_arrays")
OPENCL_EXTENSIONS = ("cl_khr_fp16", "cl_khr_fp64")
RENDERERS: dict[str, tuple[str, dict[str, Any]]] = {
    "cpu": ("tolk_cpu.renderer:CRenderer", dict(
        has_local=False, local_max=0, shared_bytes=0, vector_bytes=64, vector_registers=32, max_lanes=0, cpu_threads=0,
        local_arrays=True)),
    "opencl": ("tolk_opencl.renderer:OpenCLRenderer", dict(
        has_local=True, local_max=256, shared_bytes=32768, vector_bytes=0, vector_registers=32, max_lanes=16,
        cpu_threads=2, local_arrays=True)),
    "cuda": ("tolk_cuda.renderer:CUDARenderer", dict(
        has_local=True, local_max=256, shared_bytes=49152, vector_bytes=0, vector_registers=32, max_lanes=0,
        cpu_threads=0, local_arrays=True)),
    "python": ("tolk_core.render.python:PythonRenderer", dict(
        has_local=False, local_max=0, shared_bytes=0, vector_bytes=0, vector_registers=32, max_lanes=0, cpu_threads=0,
        local_arrays=False)),
    "example": ("examples/tolk_example_device/tolk_example_device/renderer.py:ExampleRenderer", dict(
        has_local=False, local_max=0, shared_bytes=0, vector_bytes=0, vector_registers=32, max_lanes=0, cpu_threads=0,
        local_arrays=True)),
}


@functools.cache
def _load_class(where: str) -> type:
    """`module:Class`, or `path/to/file.py:Class` (relative to the repository) for a plugin that may not be
    installed: the example device's renderer is always the repository's own file."""
    mod_name, _, cls_name = where.partition(":")
    if not mod_name.endswith(".py"):
        return getattr(importlib.import_module(mod_name), cls_name)
    spec = importlib.util.spec_from_file_location("kernel_corpus_" + Path(mod_name).stem, ROOT / mod_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, cls_name)


def make_renderer(name: str) -> Any:
    """Renderer `name` of RENDERERS with its pinned capabilities (no device behind it)."""
    where, attrs = RENDERERS[name]
    cls = _load_class(where)
    renderer = cls(None, extensions=OPENCL_EXTENSIONS) if name == "opencl" else cls(None)
    for attr in PINNED_ATTRS:
        setattr(renderer, attr, attrs[attr])
    return renderer


# ---------------------------------------------------------------- the adapter to the engine's scheduling APIs
def schedule_kernels(outputs: Sequence[UOp], local_arrays: bool) -> list[UOp]:
    """The kernel AST of every CALL (in launch order) computing the lazy values `outputs` into new buffers,
    scheduled as `realize` schedules them for a renderer with this `local_arrays`, in a fresh placements
    lineage (no decision of an earlier program or test leaks in). Nothing is allocated, compiled or run.

    The ONLY place this module uses the engine's and scheduler's APIs: a refactor that renames them updates
    this function alone."""
    from tolk_core.engine import buffers
    from tolk_core.engine.schedule import concrete, lower
    from tolk_core.ir.dtype import dtypes
    from tolk_core.ir.ops import Op
    from tolk_core.ir.target import Target
    from tolk_core.ir.uop import prod
    from tolk_core.schedule import placements
    from tolk_core.schedule.prepare import unbind

    with placements.Lineage():
        sink, var_vals = unbind(UOp(Op.SINK, dtypes.void, tuple(outputs)))

        def new_buffer(v: UOp) -> UOp:
            return buffers.new_buffer(DEVICE, concrete(prod(v.shape), var_vals), v.dtype)
        stores = tuple(UOp(Op.STORE, dtypes.void, (new_buffer(v), v)) for v in sink.src)
        linear = lower(Target(DEVICE, local_arrays=local_arrays), UOp(Op.SINK, dtypes.void, stores), new_buffer)
    return [call.src[0] for call in linear.src]


# ---------------------------------------------------------------- programs
Program = Callable[[], Sequence[Tensor]]


def _empty(*specs: tuple[tuple[int, ...], Any]) -> list[Tensor]:
    return [Tensor.empty(*shape, dtype=dt, device=DEVICE) for shape, dt in specs]


def _f32(*shapes: tuple[int, ...]) -> list[Tensor]:
    return _empty(*((s, "float32") for s in shapes))


def _on(fn: Callable[..., Tensor], *shapes: tuple[int, ...]) -> Program:
    """The program computing `fn` of float32 inputs of these shapes."""
    return lambda: [fn(*_f32(*shapes))]


def _case_programs() -> dict[str, Program]:
    from tolk_core.testing.programs import PROGRAMS
    return {f"case/{name}": (lambda c=case: [c.fn(*_empty(*((s, np.dtype(c.dtype).name) for s in c.shapes)))])
            for name, case in PROGRAMS.items()}


def _schedule_chain(layers: int) -> list[Tensor]:
    """bench.suite's schedule row: `layers` of (x @ w + b).relu() on 64x64."""
    x, = _f32((64, 64))
    for _ in range(layers):
        w, b = _f32((64, 64), (64,))
        x = (x @ w + b).relu()
    return [x]


def _bench_programs() -> dict[str, Program]:
    """The Tensor graph of each bench row (bench/rows.py) at its sizes, and the schedule rows (bench/suite.py)."""
    from bench.rows import _attention, _conv_tolk, _layernorm, _mlp
    ew = [(1 << 24,)] * 3
    out: dict[str, Program] = {
        "bench/elementwise_fma": _on(lambda a, b, c: a * b + c, *ew),
        "bench/elementwise_relu_sum": _on(lambda a, b, c: (a * b + c).relu().sum(), *ew),
        "bench/row_sum": _on(lambda a: a.sum(axis=1), (4096, 4096)),
        "bench/softmax": _on(lambda x: x.softmax(-1), (4096, 1024)),
        "bench/layernorm": _on(_layernorm, (4096, 1024), (1024,), (1024,)),
        "bench/conv2d": _on(_conv_tolk, (8, 32, 34, 34), (64, 32, 3, 3)),
        "bench/mlp_forward": _on(_mlp, (64, 784), (784, 256), (256,), (256, 10), (10,)),
        "bench/attention": _on(_attention, *[(1, 128, 64)] * 3),
    }
    for n in (256, 512, 1024, 2048):
        out[f"bench/matmul_N{n}"] = _on(lambda a, b: a @ b, (n, n), (n, n))
    for layers in (100, 200):
        out[f"bench/schedule_chain_{layers}"] = lambda layers=layers: _schedule_chain(layers)
    return out


def _random_programs() -> dict[str, Program]:
    from tests.engine.test_random_programs import N_PROGRAMS, SHAPE, make_program

    def build(seed: int) -> list[Tensor]:
        ret = make_program(seed)(*_f32(SHAPE, SHAPE))
        return list(ret) if isinstance(ret, tuple) else [ret]
    return {f"random/seed{seed:02d}": (lambda s=seed: build(s)) for seed in range(N_PROGRAMS)}


@contextlib.contextmanager
def _nn_generator_kept() -> Iterator[None]:
    """Leave nn's parameter generator as it was: building the model draws from it, and other tests seed it."""
    from tolk_core import nn
    generator = nn._rng[0]
    saved = generator.bit_generator.state
    try:
        yield
    finally:
        generator.bit_generator.state = saved


def _training_step(batch: int = 32, lr: float = 0.1) -> list[Tensor]:
    """One step of the demo's digits MLP (tolk_core.demo.DigitsNet): cross-entropy loss, backward, and each
    parameter's SGD update p - lr * grad, computed together (the loss and every new parameter)."""
    from tolk_core.demo import DigitsNet
    from tolk_core.nn import F
    with _nn_generator_kept():
        model = DigitsNet(DEVICE)
    x, y = _empty(((batch, 64), "float32"), ((batch,), "int32"))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    params = model.parameters()
    assert all(p.grad is not None for p in params)
    return [loss, *(p.detach() - lr * p.grad for p in params)]


def programs() -> dict[str, Program]:
    """Every program of the corpus by name: a builder of its output Tensors (lazy; on PYTHON)."""
    return {**_case_programs(), **_bench_programs(), **_random_programs(), "train/digits_sgd_step": _training_step}


# ---------------------------------------------------------------- rendering
def _call_line(ks: KernelSource) -> str:
    local = ",".join(map(str, ks.local_size)) if ks.local_size is not None else "-"
    return f"{ks.name} global={','.join(map(str, ks.global_size))} local={local}"


def render_program(asts: Sequence[UOp], renderer: Any) -> dict[str, list[str]]:
    """{"calls": one line per CALL, "module": the module text's lines} of one scheduled program; a program the
    renderer cannot render (a dtype it lacks) is {"error": the exception's type and message}."""
    sources: dict[UOp, KernelSource] = {}
    try:
        for ast in asts:
            if ast not in sources:
                sources[ast] = generate(ast, renderer)
    except Exception as e:  # noqa: BLE001 - recorded: which programs a renderer refuses, and how, is codegen too
        return {"error": [f"{type(e).__name__}: {e}"]}
    calls = [sources[a] for a in asts]
    unique = {ks.name: ks.source for ks in calls}
    module = renderer.render_module(list(unique.values()))
    return {"calls": [_call_line(ks) for ks in calls], "module": module.split("\n")}


class _Schedules:
    """Each program's kernel ASTs, scheduled once per `local_arrays` value and shared by the renderers."""

    def __init__(self) -> None:
        self._progs = programs()
        self._done: dict[tuple[str, bool], list[UOp]] = {}

    def names(self) -> list[str]:
        return list(self._progs)

    def asts(self, name: str, local_arrays: bool) -> list[UOp]:
        if (key := (name, local_arrays)) not in self._done:
            with config.override(**SETTINGS):
                self._done[key] = schedule_kernels([t.uop for t in self._progs[name]()], local_arrays)
        return self._done[key]


_shared: list[_Schedules] = []


def corpus(renderer_name: str) -> dict[str, dict[str, list[str]]]:
    """The corpus entries of one renderer, freshly generated: {program name: render_program(...)}."""
    if not _shared:
        _shared.append(_Schedules())
    schedules = _shared[0]
    renderer = make_renderer(renderer_name)
    local_arrays = RENDERERS[renderer_name][1]["local_arrays"]
    with config.override(**SETTINGS):
        return {name: render_program(schedules.asts(name, local_arrays), renderer) for name in schedules.names()}


# ---------------------------------------------------------------- storage and comparison
def path(renderer_name: str) -> Path:
    return FIXTURES / f"{renderer_name}.json"


def load(renderer_name: str) -> dict[str, dict[str, list[str]]]:
    with open(path(renderer_name)) as f:
        return json.load(f)


def write(renderer_name: str, entries: dict[str, dict[str, list[str]]]) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with open(path(renderer_name), "w") as f:
        json.dump(entries, f, indent=0, sort_keys=True)
        f.write("\n")


def differences(renderer_name: str, stored: dict, fresh: dict, max_lines: int = 60) -> list[str]:
    """One report per program whose stored and regenerated entries differ (or that only one side has): the
    program, the renderer and a unified diff of its first `max_lines` lines."""
    out = []
    for name in sorted(stored.keys() | fresh.keys()):
        if name not in fresh:
            out.append(f"[{renderer_name}] {name}: stored but no longer generated")
        elif name not in stored:
            out.append(f"[{renderer_name}] {name}: generated but not in the stored corpus")
        elif stored[name] != fresh[name]:
            diff: list[str] = []
            for part in ("error", "calls", "module"):
                diff += difflib.unified_diff(stored[name].get(part, []), fresh[name].get(part, []), f"stored {part}",
                                             f"regenerated {part}", lineterm="")
            more = f"\n... ({len(diff) - max_lines} more diff lines)" if len(diff) > max_lines else ""
            out.append(f"[{renderer_name}] {name}: generated code differs\n" + "\n".join(diff[:max_lines]) + more)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.render.kernel_corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the stored corpus (intended codegen changes only)")
    ap.add_argument("renderers", nargs="*", default=list(RENDERERS), help="renderers (default: all)")
    args = ap.parse_args(argv)
    failed = False
    for name in args.renderers:
        fresh = corpus(name)
        if args.write:
            write(name, fresh)
            print(f"{name}: wrote {len(fresh)} programs to {path(name).relative_to(ROOT)}")
            continue
        problems = differences(name, load(name), fresh)
        failed |= bool(problems)
        print("\n\n".join(problems) if problems else f"{name}: {len(fresh)} programs match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
