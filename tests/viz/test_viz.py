"""`tolk viz` and VIZ=1 (docs/viz.md): the records of a schedule, the page written at exit, serving on
127.0.0.1, and the page in headless Chromium for a softmax and an MLP training step (DOM and screenshots)."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from tests.conformance.helpers import REPO
from tolk_core import Tensor, cli
from tolk_core.counters import GlobalCounters
from tolk_core.engine import viz, viz_page
from tolk_core.engine.compile import to_program
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.ir.pattern import rewrite_stats
from tolk_core.viz import browser

BUILD = REPO / "build" / "viz"
needs_browser = pytest.mark.skipif(browser.find() is None or viz_page.layout("digraph{}") is None,
                                   reason="headless Chromium and Graphviz's dot are not installed (make viz)")


def test_a_softmax_record_holds_its_graph_kernel_placements_and_launch():
    x = Tensor(np.random.default_rng(0).standard_normal((8, 16), dtype=np.float32), device="CPU").realize()
    viz.clear()
    start, rewrites = GlobalCounters.kernels_launched, rewrite_stats.rewrites
    with viz.recording() as records:
        got = x.softmax(axis=1).numpy()
    e = np.exp(x.numpy() - x.numpy().max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-6)
    (rec,) = records
    # one kernel on CPU (docs/architecture.md), launched once, as the launch counter saw
    assert len(rec.kernels) == GlobalCounters.kernels_launched - start == 1
    (k,) = rec.kernels
    assert k.launches == 1 and k.seconds > 0 and k.flops > 0
    ops = {rec.after[n].op for n in k.nodes}
    assert {"REDUCE_AXIS", "EXP2", "FDIV"} <= ops and "BUFFER" not in ops
    root = rec.after[k.root]
    assert root.op == "FDIV" and root.placement == "On-dev/42:realize-output"
    assert any(n.op == "EXP2" and n.placement.startswith("Local/47:row-scratch") for n in rec.after)
    # every rule firing the rewrite counter saw is in the record, by pass
    assert sum(sum(c.values()) for c in rec.rewrites.values()) == rewrite_stats.rewrites - rewrites


def test_viz_setting_writes_the_page_at_exit(tmp_path):
    page = tmp_path / "page.html"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLK_")}
    env.update(VIZ="1", TOLK_VIZ_PATH=str(page), TOLK_CACHE_DIR=os.environ.get("TOLK_CACHE_DIR", str(tmp_path)))
    code = "from tolk_core import Tensor; print((Tensor([1.0, 2.0]) * 3).numpy().tolist())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[3.0, 6.0]\n"
    assert proc.stderr == f"tolk viz: 1 schedule(s) -> {page}\n"
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<code class='kernel-name'>" in text and "MUL" in text


def test_page_without_graphviz_keeps_the_tables(monkeypatch, tmp_path):
    with viz.recording() as records:
        viz.clear()
        (Tensor([1.0, 2.0], device="CPU") + 1).numpy()
    monkeypatch.setattr(viz_page.shutil, "which", lambda name: None)
    text = viz_page.page(records)
    assert "<svg" not in text and text.count("class='nodot'") == 3  # before, after, kernels
    assert "<td class='provenance'>On-dev/42:realize-output</td>" in text


def test_serve_answers_on_localhost(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tolk_core", "viz", "--example", "softmax", "-o",
                             str(tmp_path / "p.html"), "--serve", "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = ""
        while "serving" not in line:
            line = proc.stdout.readline()
            assert line, "tolk viz exited before serving"
        url = re.search(r"http://127\.0\.0\.1:\d+/p\.html", line)
        assert url is not None, line
        with urllib.request.urlopen(url.group(0), timeout=30) as r:
            assert r.read().decode() == (tmp_path / "p.html").read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _sections(dom: str) -> list[tuple[int, int, str]]:
    """(index, runs, html) of each schedule section of a dumped DOM."""
    parts = re.split(r'(?=<section class="schedule" id="s\d+")', dom)[1:]
    out = []
    for part in parts:
        m = re.match(r'<section class="schedule" id="s(\d+)"[^>]*><h2>schedule \d+ on \S+: \d+ kernel\(s\), '
                     r'ran (\d+)x', part)
        assert m is not None, part[:300]
        out.append((int(m.group(1)), int(m.group(2)), part))
    return out


def _kernel_nodes(section: str, i: int) -> int:
    return len(re.findall(rf'<g id="s{i}-kernel-node-\d+" class="node">', section))


@needs_browser
@pytest.mark.parametrize("example", ["softmax", "mlp"])
def test_page_in_a_browser(example, capsys):
    page = BUILD / f"{example}.html"
    start = GlobalCounters.kernels_launched
    # the command docs/viz.md's screenshots come from
    assert cli.main(["viz", "--example", example, "--device", "CPU", "-o", str(page), "--screenshots",
                     str(BUILD)]) == 0
    launched = GlobalCounters.kernels_launched - start
    dom = browser.dump_dom(browser.url(page))
    sections = _sections(dom)
    # one SVG node per kernel: over every schedule (equal ones share a section), as many as were launched
    assert sum(_kernel_nodes(sec, i) * runs for i, runs, sec in sections) == launched > 0
    i, _, main = max(sections, key=lambda s: (_kernel_nodes(s[2], s[0]), s[0]))
    # a kernel's source: the same text the compiler was given for that kernel
    name = html.unescape(re.search(r'<code class="kernel-name">([^<]+)</code>', main).group(1))
    shown = html.unescape(re.search(r'<pre class="source">(.*?)</pre>', main, re.S).group(1))
    assert f"void {name}(" in shown
    if example == "softmax":
        x = Tensor(np.random.default_rng(0).standard_normal((32, 64), dtype=np.float32), device="CPU")
        (call,) = schedule(target_for("CPU"), [x.softmax(axis=1).uop]).linear.src
        assert to_program(call.src[0], "CPU").arg.source.source == shown
        # a placement's provenance: the output is stored (realize-output), the row kept kernel-local
        assert re.search(r"<td>FDIV</td><td>32x64 float32</td><td>On-dev</td><td class=\"provenance\">"
                         r"On-dev/42:realize-output</td>", main)
        assert re.search(r"<td>EXP2</td>.*?<td class=\"provenance\">Local/47:row-scratch", main)
    else:
        assert re.search(r'<td class="provenance">On-dev/\d+:[a-z-]+', main)
        assert _kernel_nodes(main, i) >= 10  # forward and backward of two layers and the loss
    out = capsys.readouterr().out
    from PIL import Image
    for view, _ in viz_page.VIEWS:
        png = BUILD / f"{example}-{view}.png"
        assert f"tolk viz: screenshot {png}" in out
        with Image.open(png) as im:
            rgb = im.convert("RGB")
            colours = rgb.getcolors(maxcolors=1 << 20)
            assert rgb.size == (1280, 900) and colours is not None and len(colours) > 16, (png, colours)
            background = max(colours)[0] / (1280 * 900)
            assert background < 0.97, f"{png}: {background:.1%} of it is one colour"


def test_tolk_viz_runs_a_script_with_its_arguments(tmp_path, capsys):
    script = tmp_path / "prog.py"
    script.write_text("import sys\nfrom tolk_core import Tensor\n"
                      "print('args', sys.argv[1:], (Tensor([1.0, 2.0], device='CPU') * int(sys.argv[2])).tolist())\n")
    page = tmp_path / "prog.html"
    assert cli.main(["viz", "-o", str(page), str(script), "--scale", "4"]) == 0
    out = capsys.readouterr().out
    assert "args ['--scale', '4'] [4.0, 8.0]" in out and f"tolk viz: 1 schedule(s) -> {page}" in out
    text = page.read_text()
    assert text.count("<section class='schedule'") == 1 and "<code class='kernel-name'>" in text
