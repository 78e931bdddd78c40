"""Guard rails import-linter does not express, read from the source with `ast`:

- no import cycle among the modules of one package, counting module-level imports only (an import inside a
  function runs when it is called, after both modules are loaded; annotations-only imports never run);
- no RANGE built with a string kind: ranges carry `AxisType` members;
- no dead vocabulary: every `Op` and `AxisType` member is named somewhere outside its declaration and the spec.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tolk_core.ir.ops import AxisType, Op

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = [ROOT / "tolk_core", *sorted((ROOT / "plugins").glob("tolk_*/tolk_*"))]
PACKAGES = sorted(p for r in SOURCE_ROOTS for p in [r, *r.rglob("*")] if (p / "__init__.py").is_file()
                  and "__pycache__" not in p.parts)


def _module_name(path: Path) -> str:
    top = next(r for r in SOURCE_ROOTS if path.is_relative_to(r))
    parts = [top.name, *path.relative_to(top).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_statements(body: list[ast.stmt]):
    """The statements of `body` that run at import: module and class level, through if/try/with blocks, but not
    function bodies or `if TYPE_CHECKING:` blocks."""
    for st in body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(st, ast.If) and "TYPE_CHECKING" in ast.unparse(st.test):
            yield from _runtime_statements(st.orelse)
            continue
        yield st
        blocks = [getattr(st, f, []) for f in ("body", "orelse", "finalbody")]
        for block in [*blocks, *(h.body for h in getattr(st, "handlers", []))]:
            yield from _runtime_statements(block)


def module_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules (among `known`) that module `name`, at `path`, imports when it is imported."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for st in _runtime_statements(ast.parse(path.read_text()).body):
        if isinstance(st, ast.Import):
            out |= {a.name for a in st.names}
        elif isinstance(st, ast.ImportFrom):
            base = st.module or ""
            if st.level:
                anchor = package.split(".")[:len(package.split(".")) - st.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in st.names:  # `from pkg import mod` imports the module pkg.mod; `from mod import x` imports mod
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return out & known


def _graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports at import time."""
    files = sorted(package.glob("*.py"))
    names = {_module_name(f): f for f in files}
    return {n: module_imports(f, n, set(names)) - {n} for n, f in names.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that starts and ends at the same module, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m)) is not None:
                return found
        path.pop()
        state[n] = 2
        return None

    return next((c for n in sorted(graph) if n not in state and (c := visit(n)) is not None), None)


def test_cycle_finder_finds_a_planted_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_module_level_imports_only(tmp_path) -> None:
    pkg = tmp_path / "fake"
    pkg.mkdir()
    src = ("from typing import TYPE_CHECKING\nfrom tolk_core.fake import b\nif TYPE_CHECKING:\n"
           "    from tolk_core.fake.c import X\ndef f():\n    from tolk_core.fake import d\n"
           "try:\n    from . import e\nexcept ImportError:\n    pass\n")
    (pkg / "a.py").write_text(src)
    known = {"tolk_core.fake.b", "tolk_core.fake.c", "tolk_core.fake.d", "tolk_core.fake.e"}
    assert module_imports(pkg / "a.py", "tolk_core.fake.a", known) == {"tolk_core.fake.b", "tolk_core.fake.e"}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: _module_name(p / "__init__.py"))
def test_no_import_cycle_within_a_package(package: Path) -> None:
    assert (cycle := find_cycle(_graph(package))) is None, " -> ".join(cycle)


def _sources() -> list[Path]:
    return sorted(p for r in SOURCE_ROOTS for p in r.rglob("*.py") if "__pycache__" not in p.parts)


def _is_op_range(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "RANGE" and ast.unparse(node.value) == "Op"


def string_kind_ranges(source: str) -> list[int]:
    """Lines that build a RANGE with a string in its arg: `UOp(Op.RANGE, dtype, src, arg)` (arg positional or
    keyword), or a string kind handed to a range maker (`new_range(size, "loop")`, `kind="loop"`)."""
    kinds = {m.value for m in AxisType}
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        fn = ast.unparse(node.func)
        if fn.endswith("UOp") and node.args and _is_op_range(node.args[0]):
            args = node.args[3:4] + [k.value for k in node.keywords if k.arg == "arg"]
            if any(isinstance(c, ast.Constant) and isinstance(c.value, str) for a in args for c in ast.walk(a)):
                lines.append(node.lineno)
        elif fn.rpartition(".")[2] == "new_range" or any(k.arg == "kind" for k in node.keywords):
            vals = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(v, ast.Constant) and v.value in kinds for v in vals):
                lines.append(node.lineno)
    return lines


def test_string_kind_finder_finds_planted_ranges() -> None:
    planted = ('r = UOp(Op.RANGE, dtypes.index, (n,), (0, "loop"))\n'
               'q = UOp(Op.RANGE, dtypes.index, (n,), arg=(1, "reduce"))\n'
               'p = self.new_range(s, "lane")\n'
               'ok = UOp(Op.RANGE, dtypes.index, (n,), (2, AxisType.LOOP))\n')
    assert string_kind_ranges(planted) == [1, 2, 3]


def test_no_range_is_built_with_a_string_kind() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in _sources() if (lines := string_kind_ranges(p.read_text()))}
    assert not found, f"RANGEs built with string kinds (use AxisType members): {found}"


@pytest.mark.parametrize("enum_type", [Op, AxisType], ids=lambda e: e.__name__)
def test_every_member_is_used_outside_its_declaration(enum_type) -> None:
    skip = {ROOT / "tolk_core" / "ir" / "ops.py", ROOT / "tolk_core" / "ir" / "spec.py"}
    text = "\n".join(p.read_text() for p in _sources() if p not in skip)
    unused = [m.name for m in enum_type if not re.search(rf"\b{enum_type.__name__}\.{m.name}\b", text)]
    assert not unused, f"{enum_type.__name__} members named nowhere outside ops.py and spec.py: {unused}"
