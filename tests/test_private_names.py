"""A leading underscore means "this module's own": no module of tolk_core/ or plugins/ imports another module's
underscore name (`from m import _x`) or reaches one through an imported module (`m._x`). A helper two modules
share is public, with a docstring, in the module that owns it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tolk_core", "tolk_cpu", "tolk_opencl", "tolk_cuda")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def crossings(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line what` for every use in `path` of another module's underscore name."""
    tree = ast.parse(path.read_text(), str(path))
    modules: set[str] = set()  # local names bound to imported project modules (or to names imported from them)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            for a in node.names:
                if _private(a.name):
                    out.append(f"{path.relative_to(root)}:{node.lineno} from {node.module} import {a.name}")
                modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in PACKAGES)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and _private(node.attr)):
            out.append(f"{path.relative_to(root)}:{node.lineno} {node.value.id}.{node.attr}")
    return out


def test_no_module_uses_another_modules_private_names() -> None:
    paths = sorted(p for d in ("tolk_core", "plugins") for p in (ROOT / d).rglob("*.py"))
    assert paths
    found = [c for p in paths for c in crossings(p)]
    assert not found, "underscore names used outside their module:\n" + "\n".join(found)


def test_the_check_sees_both_forms(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("from tolk_core.ir import uop\nfrom tolk_core.ir.ops import _helper, Op\n"
                                   "x = uop._cache\ny = Op.__name__\n")
    assert crossings(tmp_path / "m.py", tmp_path) == ["m.py:2 from tolk_core.ir.ops import _helper",
                                                      "m.py:3 uop._cache"]
