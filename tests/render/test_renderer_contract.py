"""The renderer contract (tolk_core.render.renderer.Renderer): every capability the optimizer, the engine and the
JIT read from a renderer is declared on `Renderer` with a type and a default, readers in codegen use plain
attribute access, every shipped renderer is a `Renderer`, and every plain capability keys the source cache."""
from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tests.conformance.helpers import REPO
from tolk_core.plugins import get_registry, resolve_ref
from tolk_core.render.python import PythonRenderer
from tolk_core.render.renderer import Renderer

CORE = REPO / "tolk_core"
# where core reads renderers: the optimizer (codegen), the engine, and the JIT
READERS = sorted({*(CORE / "codegen").glob("*.py"), *(CORE / "engine").glob("*.py"), CORE / "engine" / "jit.py",
                  CORE / "frontend" / "jit.py"})
RENDERER_NAMES = {"renderer", "ren"}
# reads whose attribute name is computed: only the source cache, which keys on every attribute (`dir`)
DYNAMIC_OK = {"source_cache.py"}


def _is_renderer(node: ast.expr) -> bool:
    """Whether `node` denotes a renderer object: a variable `renderer`/`ren`, or any `<x>.renderer`
    (self.renderer, dev.renderer, device.renderer, _device(d).renderer)."""
    return isinstance(node, ast.Name) and node.id in RENDERER_NAMES or \
        isinstance(node, ast.Attribute) and node.attr == "renderer"


def renderer_reads(path: Path) -> tuple[dict[str, list[int]], list[int]]:
    """({attribute name: lines} read on renderer objects in `path`, lines of getattr/hasattr with a computed
    name). Reads are `r.x` (loaded, method calls included) and `getattr(r, "x", ...)` / `hasattr(r, "x")`."""
    reads: dict[str, list[int]] = {}
    dynamic: list[int] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _is_renderer(node.value):
            reads.setdefault(node.attr, []).append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args and _is_renderer(node.args[0]):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                reads.setdefault(name.value, []).append(node.lineno)
            else:
                dynamic.append(node.lineno)
    return reads, dynamic


def all_reads() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in READERS:
        reads, dynamic = renderer_reads(path)
        assert not dynamic or path.name in DYNAMIC_OK, f"{path}:{dynamic}: a renderer read no test can check"
        for name, lines in reads.items():
            out.setdefault(name, []).extend(f"{path.relative_to(REPO)}:{n}" for n in lines)
    return out


def declared(name: str) -> bool:
    """Whether `name` is declared on Renderer: an annotated class attribute, or a method or property whose
    signature is annotated."""
    if name in typing.get_type_hints(Renderer):
        return True
    attr = inspect.getattr_static(Renderer, name, None)
    fn = attr.fget if isinstance(attr, property) else attr
    return inspect.isfunction(fn) and "return" in fn.__annotations__


def test_every_renderer_read_in_core_is_declared_on_renderer():
    reads = all_reads()
    # the collector sees the reads it must (else this test would pass by finding nothing)
    assert {"has_local", "local_max", "shared_bytes", "max_lanes", "vector_bytes", "cpu_threads", "local_arrays",
            "render_kernel", "render_module"} <= reads.keys(), sorted(reads)
    missing = {name: where for name, where in reads.items() if not declared(name)}
    assert not missing, f"read from a renderer but not declared on Renderer: {missing}"


def test_codegen_reads_renderers_without_defaults():
    """getattr(renderer, "x", default) hides a missing declaration: codegen reads capabilities plainly."""
    for path in sorted((CORE / "codegen").glob("*.py")):
        tree = ast.parse(path.read_text())
        calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id in ("getattr", "hasattr") and n.args and _is_renderer(n.args[0])]
        assert not calls, f"{path}:{calls}"


def test_render_modules_read_their_own_capabilities_plainly():
    for path in [*sorted((CORE / "render").glob("*.py")), *sorted(REPO.glob("plugins/*/*/renderer.py"))]:
        tree = ast.parse(path.read_text())
        calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id in ("getattr", "hasattr") and n.args and isinstance(n.args[0], ast.Name)
                 and n.args[0].id == "self"]
        assert not calls, f"{path}:{calls}"


def test_every_capability_has_a_default_and_a_docstring():
    """Each annotated attribute of Renderer has a class-level default and a docstring right after it (what it
    changes in generated code): parsed from the class body, as documentation tools read attribute docstrings."""
    tree = ast.parse(inspect.getsource(Renderer))
    body = tree.body[0].body
    documented = {stmt.target.id for stmt, nxt in zip(body, body[1:], strict=False)
                  if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr)
                  and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)}
    hints = typing.get_type_hints(Renderer)
    assert set(hints) == documented, set(hints) ^ documented
    for name in hints:
        assert name in vars(Renderer), f"{name} has no default"


def test_render_kernel_is_abstract():
    class NoKernel(Renderer):
        pass
    with pytest.raises(TypeError, match="render_kernel"):
        NoKernel()


def test_every_registered_renderer_is_a_renderer_subclass(tolk_env, example_renderer):
    refs = {b.name: b.renderer.spec.renderer for b in get_registry().backends if b.renderer is not None}
    assert {"CPU", "OPENCL", "CUDA", "PYTHON"} <= refs.keys()
    refs["EXAMPLE"] = example_renderer
    for name, ref in refs.items():
        cls = resolve_ref(ref)
        assert isinstance(cls, type) and issubclass(cls, Renderer), f"{name}: {ref}"
        r = cls(None)  # constructible without a device (renderer_for, CI without the hardware)
        assert r.device_obj is None and r.target.endswith("(no device)")


def test_a_renderer_that_is_not_a_renderer_is_refused_by_generate():
    from tolk_core.codegen import generate
    from tolk_core.ir.dtype import dtypes
    from tolk_core.ir.ops import Op
    from tolk_core.ir.uop import UOp

    class DuckTyped:
        has_local = False

    with pytest.raises(TypeError, match="DuckTyped is not a tolk_core.render.renderer.Renderer"):
        generate(UOp(Op.SINK, dtypes.void, ()), DuckTyped())


def test_each_instance_owns_its_unsupported_table():
    a, b = PythonRenderer(), PythonRenderer()
    from tolk_core.ir.dtype import dtypes
    a.unsupported[dtypes.float64] = "no doubles here"
    assert not a.supports(dtypes.float64) and b.supports(dtypes.float64) and Renderer.unsupported == {}


# ---- the source cache keys on renderer attributes (tolk_core/engine/source_cache.py)

def _plain_capabilities(r: Renderer) -> list[str]:
    return [n for n in typing.get_type_hints(Renderer)
            if isinstance(getattr(r, n), (bool, int, str, frozenset)) and n != "device_obj"]


def test_every_plain_capability_is_in_the_source_cache_key():
    from tolk_cpu.renderer import CRenderer
    from tolk_opencl.renderer import OpenCLRenderer

    from tolk_core.engine.source_cache import _renderer_identity
    for r in (CRenderer(), OpenCLRenderer(), PythonRenderer()):
        ident = _renderer_identity(r)
        names = _plain_capabilities(r)
        assert {"has_local", "vector_bytes", "local_arrays", "cpu_threads"} <= set(names)
        assert all(f"('{n}'," in ident for n in names), (names, ident)


IDENTITY = """
import sys
from tolk_core.engine.source_cache import _renderer_identity
from tolk_core.render.python import PythonRenderer
from tolk_core.render.renderer import LoopKind
class Kinds(PythonRenderer):
    favourite = LoopKind.PARALLEL_SIMD
    kinds = frozenset(LoopKind)
print(_renderer_identity(Kinds()))
"""


def test_loop_kinds_key_the_source_cache_alike_in_every_process():
    """A LoopKind (or a set of them) as a renderer attribute gives the same key text under different string
    hash seeds (set order follows them)."""
    def identity(seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, "-c", IDENTITY], env=env, capture_output=True, text=True,
                              check=True).stdout
    first = identity("1")
    assert first == identity("2") and "LoopKind.PARALLEL_SIMD" in first and "LoopKind.PARALLEL_REDUCE" in first
