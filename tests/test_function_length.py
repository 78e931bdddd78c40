"""No function or method in tolk_core/ or plugins/ is longer than 80 lines (from its `def` line to its last line,
decorators not counted): a longer one does several jobs that deserve names of their own."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80


def long_functions(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line name length` (file relative to `root`) for every function of `paths`, nested ones included,
    longer than LIMIT lines."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > LIMIT:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} {length}")
    return out


def test_no_function_is_longer_than_the_limit() -> None:
    paths = sorted(p for d in ("tolk_core", "plugins") for p in (ROOT / d).rglob("*.py"))
    assert paths
    too_long = long_functions(paths)
    assert not too_long, f"functions over {LIMIT} lines:\n" + "\n".join(too_long)


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions([tmp_path / "m.py"], tmp_path) == [f"m.py:5 long {LIMIT + 1}"]
