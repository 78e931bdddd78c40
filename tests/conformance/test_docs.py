"""docs/plugins.md's own plugins: the `file=` code blocks of the guide's device (tolk-mydev) and of its
Graph-only distribution (`dist=tolk-mydev-graph`), extracted into two packages and installed, pass the
conformance suite's registration, runtime, graph and jit tiers; the deprecation table of section 11 is
tolk_core/deprecations.py's."""
from __future__ import annotations

import json

from tests.conformance.helpers import REPO, fenced_blocks, pip_install, run_suite, summary

GUIDE = (REPO / "docs" / "plugins.md").read_text()


def extract(markdown: str) -> dict[str, dict[str, str]]:
    """{distribution: {relative path: text}} of every fenced block whose info string names a file; a block
    without `dist=` belongs to tolk-mydev."""
    named = [(info.get("dist", "tolk-mydev"), info["file"], body) for _, info, body in fenced_blocks(markdown)
             if "file" in info]
    out: dict[str, dict[str, str]] = {}
    for dist, rel, body in named:
        out.setdefault(dist, {})[rel] = body
    assert sum(map(len, out.values())) == len(named), "a file is given by two blocks"
    return out


def test_guide_plugins_pass_registration_runtime_graph_and_jit_tiers(tmp_path):
    dists = extract(GUIDE)
    assert {"pyproject.toml", "tolk_mydev/plugin.py", "tolk_mydev/runtime.py", "tolk_mydev/renderer.py"} <= \
        set(dists["tolk-mydev"])
    assert {"pyproject.toml", "tolk_mydev_graph/plugin.py", "tolk_mydev_graph/graph.py"} <= \
        set(dists["tolk-mydev-graph"])
    site = tmp_path / "site"
    for dist, files in dists.items():
        for rel, text in files.items():
            (tmp_path / dist / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / dist / rel).write_text(text)
        pip_install(tmp_path / dist, site)
    # of the jit tier only the tolk_core.jit tests: the batching the Graph-only distribution gives (the rest of the
    # tier is the example plugin's and the reference device's to cover, tests/conformance/test_suite.py)
    proc = run_suite("MYDEV", "-m", "registration or runtime or graph or jit", "-k", "not test_jit.py or jit_",
                     paths=(site,), cwd=tmp_path)
    line = summary(proc, "MYDEV")
    assert proc.returncode == 0 and " 0 failed" in line, proc.stdout[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())["MYDEV"]
    tiers = report["tiers"]
    assert tiers["registration"].get("passed", 0) >= 5 and tiers["runtime"].get("passed", 0) >= 10
    assert tiers["graph"] == {"passed": 6}  # the Graph-only distribution attached MyGraph to MYDEV
    batched = [t for t in report["tests"] if "test_jit_batches_replays_into_the_graph" in t["test"]]
    assert [t["outcome"] for t in batched] == ["passed"]


def test_deprecation_table_in_the_guide_is_the_code_table():
    from tolk_core.deprecations import DEPRECATED
    section = GUIDE[GUIDE.index("## 11."):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section else section  # section 11 alone
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| deprecated")]
    want = [[d.name, d.replacement, f"{d.since[0]}.{d.since[1]}", f"{d.until[0]}.{d.until[1]}", d.where]
            for d in DEPRECATED.values()]
    assert rows == want
