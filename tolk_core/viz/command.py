"""`tolk viz`: record a program or a built-in example, write the page, then optionally photograph its views
with headless Chromium or serve it on 127.0.0.1 (docs/viz.md)."""
from __future__ import annotations

import argparse
import functools
import http.server
import runpy
import sys
from pathlib import Path

from tolk_core.engine import viz
from tolk_core.engine.viz_page import VIEWS, default_path, write_page
from tolk_core.viz import browser
from tolk_core.viz.examples import EXAMPLES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("viz", help="record what the compiler did for a script or an example; write the HTML view")
    p.add_argument("--example", choices=sorted(EXAMPLES), help="record a built-in program instead of a script")
    p.add_argument("--device", default=None, help="the example's device (default: the configured default)")
    p.add_argument("-o", "--output", default=None, help="the page to write (default: viz/index.html in the cache)")
    p.add_argument("--screenshots", metavar="DIR", default=None,
                   help="save a PNG of each view of the largest schedule into DIR (headless Chromium)")
    p.add_argument("--serve", action="store_true", help="serve the page on 127.0.0.1 until interrupted")
    p.add_argument("--port", type=int, default=8000, help="the port --serve listens on (0: any free one)")
    p.add_argument("script", nargs="?", help="a Python script to run and record")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    p.set_defaults(fn=run)


def _record(args: argparse.Namespace) -> None:
    with viz.recording():
        if args.example:
            EXAMPLES[args.example](args.device)
            return
        saved = sys.argv
        sys.argv = [args.script, *args.args]
        try:
            runpy.run_path(args.script, run_name="__main__")
        finally:
            sys.argv = saved


def screenshot_views(page: Path, records: list[viz.Record], folder: str, stem: str) -> list[Path]:
    """A PNG of each view of the schedule with the most kernels (the later one of equals): `STEM-VIEW.png`."""
    main = max(records, key=lambda r: (len(r.kernels), r.index))
    return [browser.screenshot(browser.url(page, f"s{main.index}-{v}"), Path(folder) / f"{stem}-{v}.png")
            for v, _ in VIEWS]


def serve(page: Path, port: int) -> None:
    """Serve `page`'s folder on 127.0.0.1:`port` (only this machine can reach it) until interrupted."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(page.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"tolk viz: serving http://127.0.0.1:{server.server_address[1]}/{page.name} (Ctrl-C stops)",
              flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


def run(args: argparse.Namespace) -> int:
    if not args.example and not args.script:
        print("tolk viz: give a script to run (tolk viz prog.py ARGS) or --example NAME", file=sys.stderr)
        return 2
    viz.clear()
    _record(args)
    records = viz.records()
    page = write_page(records, args.output or default_path())
    print(f"tolk viz: {len(records)} schedule(s) -> {page}")
    if args.screenshots and records:
        for png in screenshot_views(page, records, args.screenshots, args.example or Path(args.script).stem):
            print(f"tolk viz: screenshot {png}")
    if args.serve:
        serve(page, args.port)
    return 0
