"""viz_page: the recorded schedules (engine/viz.py) as one self-contained HTML page (docs/viz.md).

No script, no external resource: inline CSS and inline SVG only, so the file opens anywhere and nothing leaves
the machine. Graph layout is Graphviz's `dot -Tsvg` (the Debian package `graphviz`, installed by `make viz`);
without it the page says so and keeps the tables. Each schedule is a section `s<i>` with five views, shown one
at a time through CSS `:target`: a link, or the URL's fragment, picks one and hides the other schedules (the
graph view by default):

- `s<i>-graph`: the tensor graph before prepare and after it, each node coloured by its placement (hover: the
  placement and its provenance, and the kernels computing it);
- `s<i>-kernels`: one node per kernel (an edge where one kernel reads what another wrote), linking to its source;
- `s<i>-placements`: each prepared node's placement and provenance;
- `s<i>-rewrites`: the rewrite rules that fired, per pass;
- `s<i>-source`: each kernel's rendered source, the nodes it holds and its profile row.
"""
from __future__ import annotations

import html
import os
import shutil
import subprocess
from pathlib import Path

from tolk_core.engine.viz import Kernel, Node, Record
from tolk_core.runtime import cache_dir

MAX_LAYOUT_NODES = 1500  # a bigger graph is listed, not laid out (dot's time grows faster than the graph)
_MODE_COLOURS = {"Virtual": "#ffffff", "Local": "#fff4c2", "On-dev": "#cfe3ff", "Eff-const": "#e6e6e6",
                 "Never-virt": "#ffd9d9"}
# (fragment suffix, title) of each view, in page order
VIEWS = (("graph", "Graph"), ("kernels", "Kernels"), ("placements", "Placements"), ("rewrites", "Rewrites"),
          ("source", "Sources"))
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:rgb(32,48,64);color:#fff;padding:10px 18px}header h1{font-size:18px;margin:0}
main{padding:12px 18px}table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;vertical-align:top}th{background:#eef}section.schedule{background:#fff;border:1px solid #ddd;
margin:14px 0;padding:8px 14px}nav a{margin-right:14px}
.view{display:none;scroll-margin-top:600px}.view.default{display:block}
section.schedule:has(.view:target) .view.default:not(:target){display:none}.view:target{display:block}
body:has(.view:target) section.schedule:not(:has(.view:target)),body:has(.view:target) .overview{display:none}
pre{background:#f4f4f4;padding:8px;overflow:auto;max-height:520px;font-size:12px}
.graphs{display:flex;gap:16px;flex-wrap:wrap}.graphs>div{flex:1;min-width:300px;overflow:auto}
svg{max-width:100%;height:auto}.legend span{padding:1px 6px;border:1px solid #aaa;margin-right:6px}
.kernel{border-top:1px solid #ddd;padding-top:6px}code{font-size:12px}
"""


def default_path() -> Path:
    """Where VIZ=1 writes the page: viz/index.html in Tolk's cache directory."""
    return cache_dir() / "viz" / "index.html"


def layout(dot_source: str) -> str | None:
    """`dot_source` laid out by Graphviz as inline SVG; None when `dot` is not installed."""
    if (dot := shutil.which("dot")) is None:
        return None
    proc = subprocess.run([dot, "-Tsvg"], input=dot_source, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return f"<p>dot failed: {html.escape(proc.stderr[:500])}</p>"
    return proc.stdout[proc.stdout.find("<svg"):]  # the XML prologue and doctype do not belong inside HTML


def _q(text: str) -> str:
    """A Graphviz double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _mode(placement: str) -> str:
    return placement.split("/", 1)[0]


def _graph_dot(rec: Record, nodes: list[Node], which: str) -> str:
    lines = [f"digraph {which} {{", "rankdir=TB; node [shape=box, style=filled, fontname=Helvetica, fontsize=10];"]
    for n in nodes:
        label = f"{n.op}\n{n.shape} {n.dtype}" + (f"\n{n.arg}" if n.arg else "")
        tip = (n.placement or "no placement") + (f"; kernels {', '.join(f'k{k}' for k in n.kernels)}"
                                                 if n.kernels else "")
        colour = _MODE_COLOURS.get(_mode(n.placement), "#ffffff")
        lines.append(f"n{n.id} [id={_q(f's{rec.index}-{which}-n{n.id}')}, label={_q(label)}, "
                     f"tooltip={_q(tip)}, fillcolor={_q(colour)}];")
        lines += [f"n{s} -> n{n.id};" for s in n.src]
    return "\n".join(lines + ["}"])


def _kernels_dot(rec: Record) -> str:
    lines = ["digraph kernels {", "rankdir=TB; node [shape=box, style=\"rounded,filled\", fillcolor=\"#e8f0ff\", "
             "fontname=Helvetica, fontsize=11];"]
    writer: dict[int, int] = {}
    edges: set[tuple[int, int]] = set()
    for k in rec.kernels:
        timing = f"\n{k.seconds / max(k.launches, 1) * 1e6:.1f} us x{k.launches}" if k.launches else ""
        label = f"k{k.index} {k.name}\n{k.ops or '(code)'}{timing}"
        lines.append(f"k{k.index} [id={_q(f's{rec.index}-kernel-node-{k.index}')}, label={_q(label)}, "
                     f"URL={_q(f'#s{rec.index}-kernel-{k.index}')}];")
        edges |= {(writer[r], k.index) for r in k.reads if r in writer}
        writer |= dict.fromkeys(k.writes, k.index)
    return "\n".join(lines + [f"k{a} -> k{b};" for a, b in sorted(edges)] + ["}"])


def _svg(dot_source: str, count: int, missing: str) -> str:
    if count > MAX_LAYOUT_NODES:
        return f"<p>{count} nodes: too many to lay out (over {MAX_LAYOUT_NODES}); see the tables.</p>"
    svg = layout(dot_source)
    return svg if svg is not None else f"<p class='nodot'>{missing}</p>"


_NO_DOT = "Graphviz's <code>dot</code> is not installed: no graph layout (Debian: apt-get install graphviz)."


def _graph_view(rec: Record) -> str:
    legend = "".join(f"<span style='background:{c}'>{m}</span>" for m, c in _MODE_COLOURS.items())
    return (f"<p class='legend'>placement: {legend}</p><div class='graphs'>"
            f"<div><h3>before prepare ({len(rec.before)} nodes)</h3>"
            f"{_svg(_graph_dot(rec, rec.before, 'before'), len(rec.before), _NO_DOT)}</div>"
            f"<div><h3>after prepare ({len(rec.after)} nodes)</h3>"
            f"{_svg(_graph_dot(rec, rec.after, 'after'), len(rec.after), _NO_DOT)}</div></div>")


def _placements_view(rec: Record) -> str:
    rows = "".join(f"<tr class='placement'><td>n{n.id}</td><td>{n.op}</td><td>{n.shape} {n.dtype}</td>"
                   f"<td>{_mode(n.placement)}</td><td class='provenance'>{html.escape(n.placement)}</td>"
                   f"<td>{' '.join(f'k{k}' for k in n.kernels)}</td></tr>" for n in rec.after if n.placement)
    return ("<table><tr><th>node</th><th>op</th><th>shape</th><th>mode</th><th>placement/provenance</th>"
            f"<th>kernels</th></tr>{rows}</table>")


def _rewrites_view(rec: Record) -> str:
    if not rec.rewrites:
        return "<p>No rewrite rule fired.</p>"
    rows = "".join(f"<tr><td>{html.escape(p)}</td><td>{html.escape(rule)}</td><td>{n}</td></tr>"
                   for p, fired in rec.rewrites.items() for rule, n in fired.most_common())
    return f"<table><tr><th>pass</th><th>rule</th><th>fired</th></tr>{rows}</table>"


def _profile_row(k: Kernel) -> str:
    if not k.launches:
        return "<p>Not launched while recorded.</p>"
    gflops = k.flops / k.seconds / 1e9 if k.seconds > 0 else 0.0
    return ("<table class='profile'><tr><th>launches</th><th>total us</th><th>GFLOP/s</th><th>FLOPs</th>"
            f"<th>bytes</th><th>work ratio</th></tr><tr><td>{k.launches}</td><td>{k.seconds * 1e6:.1f}</td>"
            f"<td>{gflops:.2f}</td><td>{k.flops}</td><td>{k.bytes}</td><td>{k.work_ratio:.2f}</td></tr></table>")


def _source_view(rec: Record) -> str:
    parts = []
    for k in rec.kernels:
        held = ", ".join(f"n{n} {rec.after[n].op}" for n in k.nodes)
        parts.append(f"<div class='kernel' id='s{rec.index}-kernel-{k.index}'><h3>k{k.index} "
                     f"<code class='kernel-name'>{html.escape(k.name)}</code> on {k.device}</h3>"
                     f"<p>ops: {html.escape(k.ops or '(kernel given as code)')}; writes "
                     f"{' '.join(f'b{b}' for b in k.writes)}, reads {' '.join(f'b{b}' for b in k.reads) or '-'}; "
                     f"stores n{k.root}; holds: {html.escape(held) or '-'}</p>{_profile_row(k)}"
                     f"<pre class='source'>{html.escape(k.source)}</pre></div>")
    return "".join(parts)


def _section(rec: Record) -> str:
    i = rec.index
    nav = "<a href='#'>all schedules</a>" + "".join(f"<a href='#s{i}-{v}'>{title}</a>" for v, title in VIEWS)
    views = {"graph": _graph_view, "placements": _placements_view, "rewrites": _rewrites_view,
             "source": _source_view}
    body = "".join(
        f"<div class='view{' default' if v == 'graph' else ''}' id='s{i}-{v}'><h2>{title}</h2>"
        + (_svg(_kernels_dot(rec), len(rec.kernels), _NO_DOT) if v == "kernels" else views[v](rec)) + "</div>"
        for v, title in VIEWS)
    return (f"<section class='schedule' id='s{i}' data-kernels='{len(rec.kernels)}'><h2>schedule {i} on "
            f"{rec.device}: {len(rec.kernels)} kernel(s), ran {rec.runs}x</h2><nav>{nav}</nav>{body}</section>")


def page(records: list[Record], dropped: int = 0) -> str:
    """The HTML page of `records` (see the module docstring); `dropped`: schedules seen but not kept."""
    rows = "".join(f"<tr><td><a href='#s{r.index}-graph'>schedule {r.index}</a></td><td>{r.device}</td>"
                   f"<td>{len(r.kernels)}</td><td>{len(r.before)}</td><td>{len(r.after)}</td><td>{r.runs}</td>"
                   f"<td>{sum(k.seconds for k in r.kernels) * 1e6:.1f}</td></tr>" for r in records)
    more = f"<p>{dropped} more schedule(s) were not kept.</p>" if dropped else ""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>tolk viz</title>"
            f"<style>{_CSS}</style></head><body><header><h1>tolk viz: {len(records)} schedule(s)</h1></header>"
            "<main><div class='overview'><table id='overview'><tr><th>schedule</th><th>device</th><th>kernels</th>"
            f"<th>nodes before</th><th>nodes after</th><th>runs</th><th>kernel us</th></tr>{rows}</table>{more}</div>"
            + "".join(_section(r) for r in records) + "</main></body></html>")


def write_page(records: list[Record], path: str | os.PathLike[str], dropped: int = 0) -> Path:
    """Write the page of `records` to `path` (its folder created); returns the path, absolute."""
    out = Path(path).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(records, dropped))
    return out

