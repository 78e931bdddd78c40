"""`tolk new-plugin NAME [--graph]`: write a device plugin distribution that passes the conformance suite as
generated (docs/plugins.md, section 10).

The distribution `tolk-NAME` declares the device `NAME` (upper case): an entry module (import-light), a device
with host memory and its allocator, a C compiler and a Program calling kernels through ctypes, a renderer
subclassing CStyleRenderer, with ``--graph`` a Graph batching launches, its own test running the suite, and a CI
workflow. The files are `string.Template`s under ``templates/`` (``$pkg``, ``$NAME``, ...).
"""
from __future__ import annotations

import re
from pathlib import Path
from string import Template

from tolk_core.errors import ConfigError

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
TEMPLATES = Path(__file__).parent / "templates"

# template -> path in the distribution ({pkg}: the package); graph.py only with --graph
FILES = {"pyproject.toml": "pyproject.toml", "README.md": "README.md", "__init__.py": "{pkg}/__init__.py",
         "plugin.py": "{pkg}/plugin.py", "runtime.py": "{pkg}/runtime.py", "renderer.py": "{pkg}/renderer.py",
         "graph.py": "{pkg}/graph.py", "test_conformance.py": "tests/test_conformance.py",
         "conformance.yml": ".github/workflows/conformance.yml"}
TIERS = ("registration", "memory", "render", "runtime", "jit")

_GRAPH_HOOK = '''


@hookimpl
def tolk_graphs():
    yield GraphSpec(device="$NAME", graph="$pkg.graph:BatchGraph")
'''


def _values(name: str, graph: bool) -> dict[str, str]:
    from tolk_core.version import __version__
    major, minor = (int(x) for x in __version__.split(".")[:2])
    tiers = (*TIERS, "graph") if graph else TIERS
    return {"entry": name, "pkg": f"tolk_{name}", "dist": f"tolk-{name.replace('_', '-')}", "NAME": name.upper(),
            "core_version": __version__, "core_minor": f"{major}.{minor}", "core_next": f"{major}.{minor + 1}",
            "tiers": repr(tiers), "graph_import": "GraphSpec, " if graph else "",
            "graph_hook": Template(_GRAPH_HOOK).substitute(NAME=name.upper(), pkg=f"tolk_{name}") if graph else ""}


def new_plugin(name: str, where: Path, graph: bool = False) -> list[Path]:
    """Write the distribution for device `name` into `where`/tolk-NAME; the files written. Raises ConfigError
    for a bad name or an existing target directory."""
    if not NAME_RE.match(name):
        raise ConfigError(f"tolk new-plugin: {name!r} is not a plugin name: use lower-case letters, digits and _, "
                          "starting with a letter (e.g. 'mydev': distribution tolk-mydev, device MYDEV)")
    values = _values(name, graph)
    root = where / values["dist"]
    if root.exists():
        raise ConfigError(f"tolk new-plugin: {root} exists already; choose another name or directory (--dir)")
    written = []
    for template, rel in FILES.items():
        if template == "graph.py" and not graph:
            continue
        text = Template((TEMPLATES / f"{template}.tmpl").read_text()).substitute(values)
        path = root / rel.format(pkg=values["pkg"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
