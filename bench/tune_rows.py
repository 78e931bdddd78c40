"""Tuned against untuned: the bench's matmul, conv2d, softmax and model rows, each with its kernels' plans
searched (BEAM) and without, timed in interleaved pairs (docs/tuning.md, docs/performance.md "Autotuning").

For each row and device:

1. a *tune* child runs the row once with `TOLK_BEAM=n` in a fresh cache directory T: every kernel of the row is
   searched at its first launch on its real buffers, the results stored in T's tuning cache; the child reports
   the searches, each kernel's gain and search seconds (against the TUNE_KERNEL_SECONDS cap);
2. an *untuned* child (a fresh cache directory, no tuning entries) and a *tuned* child (directory T, BEAM still
   set: a kernel it had to search again would show in its `searches` count, which must be 0) build the row and
   check it against numpy;
3. the two are timed in `--pairs` interleaved pairs (the order alternating; each side's sample the minimum of
   `--calls` calls), and the row's ratio is untuned's median over tuned's (> 1: the tuning helped).

`--start KNOB=V,...` measures the search from a deliberately poor plan instead: TUNE_START makes every kernel
without an entry plan with those choices, the tune child searches from them, and a third child (the heuristics,
no TUNE_START) joins the pairs; the row then reports how much of the heuristics' speed the search recovered.

Usage: python -m bench.tune_rows [--device CPU] [--rows matmul softmax ...] [--pairs 20] [--calls 3]
       [--beam 2] [--start KNOB=V,...] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

from bench.rounds import Child, ChildFailed, serve
from bench.rows import Row, rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the rows of bench/rows.py this bench tunes, by a short name: a prefix of the row's name
ROWS = {"matmul512": "matmul N=512", "matmul1024": "matmul N=1024", "conv2d": "conv2d 3x3",
        "softmax": "softmax (4096x1024", "mlp": "demo MLP forward"}


def _row(device: str, short: str) -> Row:
    return next(r for r in rows(device) if r.name.startswith(ROWS[short]))


# ---- the child: one row, built, checked, timed on request

def child(device: str, short: str) -> None:
    """Build row `short` on `device`, run it once (searching its kernels when BEAM is set), check it against
    numpy, then serve `time call REPS ...` commands (bench/rounds.py)."""
    from tolk_core.counters import GlobalCounters
    from tolk_core.tune import cache
    row = _row(device, short)
    inp = row.setup(np.random.default_rng(0))
    call = row.tolk(inp)
    t0 = time.perf_counter()
    got = np.asarray(call())
    first_s = time.perf_counter() - t0
    want = np.asarray(row.numpy(inp)())
    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    entries = [cache.describe(e) for _, e in cache.entries()]
    ready = {"row": row.name, "first_s": first_s, "rel_err": err, "ok": err <= row.rtol,
             "searches": GlobalCounters.tune_searches, "hits": GlobalCounters.tune_cache_hits, "entries": entries}

    def timer(reps: int, _min_s: float, _budget_s: float) -> dict[str, Any]:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        return {"times": times, "per_step": {}}
    serve(ready, {"call": timer}, lambda: {"searches": GlobalCounters.tune_searches})


# ---- the parent

def _env(cache_dir: str, device: str, beam: int, start: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TOLK_BEAM", "TOLK_TUNE_START", "TOLK_CACHE_DIR")}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(TOLK_CACHE_DIR=cache_dir, TOLK_DEVICE=device)
    if beam:
        env["TOLK_BEAM"] = str(beam)
    if start:
        env["TOLK_TUNE_START"] = start
    return env


def _spawn(device: str, short: str, env: dict[str, str], timeout_s: float) -> tuple[Child, dict[str, Any]]:
    c = Child("bench.tune_rows", [device, short], env, ROOT, timeout_s)
    try:
        return c, c.read()["ready"]
    except ChildFailed:
        c.close()
        raise


def _tune(device: str, short: str, tdir: str, a: argparse.Namespace) -> dict[str, Any]:
    c, ready = _spawn(device, short, _env(tdir, device, a.beam, a.start), a.timeout)
    c.ask("finish")
    c.close()
    return ready


def _pairs(sides: dict[str, Child], a: argparse.Namespace) -> dict[str, list[float]]:
    """`a.pairs` samples per side, the sides timed one after the other in an order reversed every pair; a sample
    is the minimum of `a.calls` calls."""
    names = list(sides)
    out: dict[str, list[float]] = {n: [] for n in names}
    for i in range(a.pairs):
        for n in (names if i % 2 == 0 else names[::-1]):
            out[n].append(min(sides[n].ask(f"time call {a.calls} 0 0")["times"]))
    return out


def measure(device: str, short: str, a: argparse.Namespace) -> dict[str, Any]:
    """One row on one device: the tune child's report, then the sides timed in pairs (see the module doc)."""
    with tempfile.TemporaryDirectory() as tdir, tempfile.TemporaryDirectory() as udir, \
            tempfile.TemporaryDirectory() as hdir:
        tuned_report = _tune(device, short, tdir, a)
        envs = {"untuned": _env(udir, device, 0, a.start), "tuned": _env(tdir, device, a.beam, a.start)}
        if a.start:
            envs["heuristic"] = _env(hdir, device, 0, None)
        sides: dict[str, Child] = {}
        readies: dict[str, dict[str, Any]] = {}
        try:
            for name, env in envs.items():
                sides[name], readies[name] = _spawn(device, short, env, a.timeout)
            samples = _pairs(sides, a)
        finally:
            for c in sides.values():
                c.close()
    med = {n: statistics.median(s) for n, s in samples.items()}
    entries = tuned_report["entries"]
    rec = {"row": tuned_report["row"], "device": device, "start": a.start, "median_s": med,
           "ratio": med["untuned"] / med["tuned"], "pairs": a.pairs, "calls": a.calls,
           "searched": tuned_report["searches"], "search_s_max": max((e["search_s"] for e in entries), default=0.0),
           "search_s_total": sum(e["search_s"] for e in entries), "gains": [round(e["gain"], 3) for e in entries],
           "tuned_searches": readies["tuned"]["searches"], "tuned_hits": readies["tuned"]["hits"],
           "ok": all(r["ok"] for r in readies.values()),
           "rel_err": max(r["rel_err"] for r in readies.values())}
    if a.start:
        rec["recovered"] = med["heuristic"] / med["tuned"]
    return rec


def _header(start: str | None) -> None:
    cols = ["row", "device", "untuned ms", "tuned ms", "untuned/tuned", "kernels searched", "gains",
            "search s (max/total)", "2nd process searches/hits", "max rel err"]
    if start:
        cols += ["heuristic ms", "recovered (heuristic/tuned)"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols), flush=True)


def _print(r: dict[str, Any]) -> None:
    m = r["median_s"]
    line = (f"| {r['row']} | {r['device']} | {m['untuned'] * 1e3:.3f} | {m['tuned'] * 1e3:.3f} | "
            f"{r['ratio']:.3f} | {r['searched']} | {' '.join(map(str, r['gains']))} | "
            f"{r['search_s_max']:.1f}/{r['search_s_total']:.1f} | {r['tuned_searches']}/{r['tuned_hits']} | "
            f"{r['rel_err']:.1e} |")
    if r["start"]:
        line += f" {m['heuristic'] * 1e3:.3f} | {r['recovered']:.3f} |"
    print(line, flush=True)


def main(argv: list[str]) -> None:
    if argv[:1] == ["child"]:
        child(argv[1], argv[2])
        return
    p = argparse.ArgumentParser(prog="python -m bench.tune_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="CPU")
    p.add_argument("--rows", nargs="+", default=["matmul512", "conv2d", "softmax", "mlp"], choices=sorted(ROWS))
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--beam", type=int, default=2)
    p.add_argument("--start", default=None, help="KNOB=V,...: search from this plan (TUNE_START) instead")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.2f}, "
          f"device {a.device}, beam {a.beam}, {a.pairs} pairs of min-of-{a.calls} calls", flush=True)
    _header(a.start)
    recs = []
    for short in a.rows:
        try:
            recs.append(measure(a.device, short, a))
        except ChildFailed as e:
            print(f"# {short}: {e.record['error']}", flush=True)
            continue
        _print(recs[-1])
    print(f"# done, load average {os.getloadavg()[0]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
