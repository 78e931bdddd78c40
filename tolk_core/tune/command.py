"""`tolk tune script.py`: run a script with every kernel's plan searched at its first launch (BEAM, jitted
functions run eagerly so each kernel goes through a launch), keeping the results in the tuning cache; `tolk tune
--show` lists what is tuned (docs/tuning.md)."""
from __future__ import annotations

import argparse
import runpy
import sys

from tolk_core import config
from tolk_core.counters import GlobalCounters
from tolk_core.tune import cache


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="search the plans of a script's kernels ahead of time; --show lists the results")
    p.add_argument("--show", action="store_true", help="list the tuned kernels, their gains and search times")
    p.add_argument("--beam", type=int, default=2, help="beam width of the search (default 2)")
    p.add_argument("script", nargs="?", help="a Python script to run with its kernels tuned")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    p.set_defaults(fn=run)


def show() -> int:
    rows = [cache.describe(e) for _, e in cache.entries()]
    if not rows:
        print(f"nothing tuned yet in {config.get('CACHE_DIR') or 'the default cache directory'}: "
              "run `tolk tune script.py`")
        return 0
    print(f"{'kernel':<40} {'device':<8} {'gain':>6} {'search s':>9}  choices")
    for r in rows:
        print(f"{r['kernel']:<40} {r['device']:<8} {r['gain']:>6.3f} {r['search_s']:>9.1f}  {r['choices']}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.show or not args.script:
        return show()
    before = GlobalCounters.tune_searches
    saved = sys.argv
    sys.argv = [args.script, *args.args]
    try:
        with config.override(BEAM=max(1, args.beam), JIT=0):
            runpy.run_path(args.script, run_name="__main__")
    finally:
        sys.argv = saved
    print(f"tolk tune: searched {GlobalCounters.tune_searches - before} kernel(s); `tolk tune --show` lists them",
          file=sys.stderr)
    return 0
