"""The engine's boundaries, checked on the source: what docs/architecture.md promises about who owns what.

- The engine works on UOps: no engine function takes or returns a Tensor (the front end points its Tensors at
  results itself), and nothing outside `frontend/` assigns `Tensor.uop`.
- Behaviour never depends on which modules were imported: no module mutates another module's list, dict or
  attribute while it is being imported.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "tolk_core"
SOURCES = sorted([*CORE.rglob("*.py"), *(ROOT / "plugins").rglob("*.py"), *(ROOT / "examples").rglob("*.py")])
_MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "pop", "remove", "clear", "__setitem__"}


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _tree(p: Path) -> ast.Module:
    return ast.parse(p.read_text(), filename=str(p))


def test_no_engine_function_takes_or_returns_a_tensor() -> None:
    bad = []
    for p in sorted((CORE / "engine").rglob("*.py")):
        for node in ast.walk(_tree(p)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            notes = [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                     if x is not None and x.annotation is not None] + [node.returns]
            if any(n is not None and re.search(r"\bTensor\b", ast.unparse(n)) for n in notes):
                bad.append(f"{_rel(p)}:{node.lineno} {node.name}")
    assert not bad, "engine functions mentioning Tensor in their signature: " + ", ".join(bad)


def _assigned_attrs(node: ast.AST) -> list[ast.Attribute]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    out: list[ast.Attribute] = []
    for t in targets:
        out.extend(x for x in ast.walk(t) if isinstance(x, ast.Attribute))
    return out


def test_only_the_front_end_assigns_tensor_uop() -> None:
    bad = [f"{_rel(p)}:{a.lineno}" for p in SOURCES if not _rel(p).startswith("tolk_core/frontend/")
           for node in ast.walk(_tree(p)) for a in _assigned_attrs(node) if a.attr == "uop"]
    assert not bad, "assignments to .uop outside tolk_core/frontend/: " + ", ".join(bad)


def _imported_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _import_time_nodes(body: list[ast.stmt]):
    """Every node that runs while the module is imported: module and class bodies, not function bodies."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from (d for dec in stmt.decorator_list for d in ast.walk(dec))
            continue
        if isinstance(stmt, ast.ClassDef):
            yield from _import_time_nodes(stmt.body)
            continue
        stack: list[ast.AST] = [stmt]
        while stack:
            node = stack.pop()
            yield node
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    if isinstance(child, ast.ClassDef):
                        yield from _import_time_nodes(child.body)
                    continue
                stack.append(child)


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _import_time_mutations(p: Path) -> list[str]:
    tree = _tree(p)
    foreign = _imported_names(tree)
    found = []
    for node in _import_time_nodes(tree.body):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS \
                and _root(node.func.value) in foreign:
            found.append(f"{_rel(p)}:{node.lineno} {ast.unparse(node.func)}(...)")
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        found += [f"{_rel(p)}:{t.lineno} {ast.unparse(t)} = ..." for t in targets
                  if isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in foreign]
    return found


def test_no_module_mutates_another_module_at_import_time() -> None:
    bad = [m for p in SOURCES for m in _import_time_mutations(p)]
    assert not bad, "import-time mutations of another module's state: " + "; ".join(bad)


@pytest.mark.parametrize("planted", ["from tolk_core.schedule import prepare\nprepare.disk_checks.append(len)\n",
                                     "from tolk_core.frontend import tensor\ntensor.read_checks += [len]\n",
                                     "import tolk_core.engine.run as run\nrun.HOOKS['x'] = len\n"])
def test_the_import_time_check_finds_a_planted_hook(tmp_path: Path, planted: str) -> None:
    global ROOT
    p = tmp_path / "planted.py"
    p.write_text(planted + "def later():\n    import json\n    json.x = 1\n")
    old, ROOT = ROOT, tmp_path
    try:
        found = _import_time_mutations(p)
    finally:
        ROOT = old
    assert len(found) == 1 and "planted.py:2" in found[0]
