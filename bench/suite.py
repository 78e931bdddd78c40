"""`python -m bench --device D [--quick] [--json PATH]`: Tolk next to numpy, torch and tinygrad, one run.
(`python -m bench --models ...` runs the model workloads against torch instead: bench.models.)

Each throughput row prints Tolk's number, every importable peer's, and the ratio Tolk/peer (> 1: Tolk is
faster). Memory-bound rows also print the fraction of the bandwidth baseline: `np.copyto` of an output-sized
array, measured in this run. Each peer runs in its own child process (bench.peer_child: no thread pool of one
library spins on the cores while another is timed); numpy's runs without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE
and records the BLAS kernel. Process rows (first call cold and warm, schedule
time) run in child processes. The exit status is 1 when Tolk's result differs from numpy's on any row.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from bench.rows import Row, rows
from bench.timing import best_time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _have(mod: str) -> bool:
    """Whether `mod` is installed (not imported here: a peer's thread pools stay out of this process)."""
    return importlib.util.find_spec(mod) is not None


def _peer_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def peer_times(peer: str, device: str, names: list[str], reps: int, min_total: float) -> dict[str, Any]:
    """Run bench.peer_child for `peer` over the rows `names` of Tolk device `device`; its JSON result."""
    proc = subprocess.run([sys.executable, "-m", "bench.peer_child", peer, device, str(reps), str(min_total), *names],
                          capture_output=True, text=True, env=_peer_env(), cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{peer} child failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def copy_bandwidth(elems: int, reps: int, min_total: float) -> float:
    """GB/s of np.copyto between two float32 arrays of `elems` elements (bytes read + written)."""
    src, dst = np.random.default_rng(1).random(elems, dtype=np.float32), np.empty(elems, np.float32)
    return 8 * elems / best_time(lambda: np.copyto(dst, src), reps, min_total) / 1e9


def _result(fn) -> np.ndarray:
    out = fn()
    return np.asarray(out.numpy() if hasattr(out, "numpy") else out, dtype=np.float64)


def run_row(row: Row, reps: int, min_total: float) -> dict[str, Any]:
    """Tolk's result (checked against numpy's) and best time on one row."""
    inp = row.setup(np.random.default_rng(0))
    want = np.asarray(row.numpy(inp)(), dtype=np.float64)
    rec: dict[str, Any] = {"row": row.name, "unit": row.unit, "work": row.work, "times": {}}
    tolk_fn = row.tolk(inp)
    got = _result(tolk_fn)
    err = float(np.max(np.abs(got - want) / (np.abs(want) + 1))) if want.size else 0.0
    rec["max_rel_error"], rec["ok"] = err, bool(got.shape == want.shape and err <= row.rtol)
    rec["times"]["tolk"] = best_time(tolk_fn, reps, min_total)
    return rec


def _rate(rec: dict[str, Any], who: str) -> float | None:
    t = rec["times"].get(who)
    return rec["work"] / t / 1e9 if t else None


_CHILD_MLP = """
import time; t0 = time.perf_counter()
import json, sys, numpy as np
from bench.rows import mlp_inputs, _mlp
inp = mlp_inputs(np.random.default_rng(0))
t1 = time.perf_counter()
if sys.argv[1] == "tolk":
    from tolk_core.frontend.tensor import Tensor
    ts = {k: Tensor(v, device=sys.argv[2]) for k, v in inp.items()}
else:
    from tinygrad import Tensor
    from bench.rows import tiny_device
    ts = {k: Tensor(v, device=tiny_device(sys.argv[2])) for k, v in inp.items()}
t2 = time.perf_counter()
out = _mlp(**ts).numpy()
t3 = time.perf_counter()
print(json.dumps({"numpy_s": t1 - t0, "import_s": t2 - t1, "first_call_s": t3 - t2, "own_s": t3 - t1}))
"""

WARM_RUNS = 5


def first_calls(device: str, peers: dict[str, bool]) -> list[dict[str, Any]]:
    """MLP forward in fresh processes: cold (empty compile caches), then warm (the same caches again; the median
    of WARM_RUNS processes). `own_s` is the library's share: its import, device probing and tensor creation
    (`import_s`) plus the call; `numpy_s` is importing numpy and making the inputs, which a user's program pays
    before it calls either library. Children write bytecode, as an installed package has it."""
    out = []
    for who in ["tolk"] + (["tinygrad"] if peers["tinygrad"] else []):
        with tempfile.TemporaryDirectory(prefix="tolk-bench-") as d:
            env = _peer_env() | {"TOLK_CACHE_DIR": os.path.join(d, "tolk"), "POCL_CACHE_DIR": os.path.join(d, "pocl"),
                                 "CACHEDB": os.path.join(d, "tinygrad.db")}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            for phase, runs in (("cold", 1), ("warm", WARM_RUNS)):
                recs = []
                for _ in range(runs):
                    st = time.perf_counter()
                    proc = subprocess.run([sys.executable, "-c", _CHILD_MLP, who, device], capture_output=True,
                                          text=True, env=env, cwd=ROOT)
                    wall = time.perf_counter() - st
                    if proc.returncode != 0:
                        recs = [{"error": proc.stderr[-300:]}]
                        break
                    recs.append({"process_wall_s": wall, **json.loads(proc.stdout.strip().splitlines()[-1])})
                if "error" in recs[0]:
                    out.append({"row": f"MLP first call {phase}", "who": who, **recs[0]})
                    continue
                out.append({"row": f"MLP first call {phase}", "who": who,
                            **{k: statistics.median(r[k] for r in recs) for k in recs[0]}})
    return out


_CHILD_SCHEDULE = """
import json, sys, time, numpy as np
layers, who, device = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = np.random.default_rng(0)
ws = [(rng.standard_normal((64, 64)).astype(np.float32) * 0.1, rng.standard_normal(64).astype(np.float32))
      for _ in range(layers)]
if who == "tolk":
    from tolk_core.frontend.tensor import Tensor
    from tolk_core.engine.schedule import schedule
    from tolk_core.engine.target import target_for
    mk = lambda a: Tensor(a, device=device)
else:
    from tinygrad import Tensor
    from bench.rows import tiny_device
    mk = lambda a: Tensor(a, device=tiny_device(device))
x = mk(rng.standard_normal((64, 64)).astype(np.float32))
for w, b in ws:
    x = (x @ mk(w) + mk(b)).relu()
st = time.perf_counter()
if who == "tolk":
    n = len(schedule(target_for(device), [x.uop])[0].src)
else:
    n = len(x.schedule_linear().src)
print(json.dumps({"schedule_s": time.perf_counter() - st, "kernels": n}))
"""


def schedule_times(device: str, peers: dict[str, bool]) -> list[dict[str, Any]]:
    out = []
    for who in ["tolk"] + (["tinygrad"] if peers["tinygrad"] else []):
        for layers in (100, 200):
            proc = subprocess.run([sys.executable, "-c", _CHILD_SCHEDULE, str(layers), who, device],
                                  capture_output=True, text=True, env=_peer_env(), cwd=ROOT)
            rec = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else \
                {"error": proc.stderr[-300:]}
            out.append({"row": f"schedule {layers}-layer graph", "who": who, "layers": layers, **rec})
    return out


_CHILD_FRONTEND = """
import json, sys, time, numpy as np
who, device, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
a = np.ones((4, 4), np.float32)
if who == "tolk":
    from tolk_core.frontend.tensor import Tensor
    x, w = Tensor(a, device=device).realize(), Tensor(a, device=device).realize()
elif who == "tinygrad":
    from tinygrad import Tensor
    from bench.rows import tiny_device
    x, w = Tensor(a, device=tiny_device(device)).realize(), Tensor(a, device=tiny_device(device)).realize()
else:
    import torch
    torch.set_num_threads(1)
    x, w = torch.from_numpy(a), torch.from_numpy(a.copy())
def build(n):
    y = x
    for _ in range(n):
        y = (y * 2 + w).relu() @ w
    return y
build(20)
times = []
for _ in range(5):
    st = time.perf_counter()
    build(iters)
    times.append((time.perf_counter() - st) / (4 * iters))
print(json.dumps({"us_per_op": sorted(times)[2] * 1e6}))
"""


def frontend_times(device: str, peers: dict[str, bool]) -> list[dict[str, Any]]:
    """The eager front end's cost per Tensor op: `y = (y * 2 + w).relu() @ w` on 4x4 tensors, four ops a step,
    median of 5 runs of 500 steps, each library in a child process. Tolk and tinygrad only build the graph
    (nothing is realized: what a user pays per op before any kernel); torch computes each op eagerly."""
    out = []
    for who in ["tolk"] + [p for p in ("tinygrad", "torch") if peers[p]]:
        proc = subprocess.run([sys.executable, "-c", _CHILD_FRONTEND, who, device, "500"],
                              capture_output=True, text=True, env=_peer_env(), cwd=ROOT)
        rec = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else \
            {"error": proc.stderr[-300:]}
        out.append({"row": "front end per Tensor op", "who": who, **rec})
    return out


_CHILD_REGISTRY = """
import json, time
t0 = time.perf_counter()
import tolk_core.plugins as plugins
t1 = time.perf_counter()
reg = plugins.get_registry()
rows = {}
for b in reg.backends:
    s = time.perf_counter()
    b.state
    rows[b.name] = {"dist": b.plugin.dist, "import_s": b.plugin.import_s, "probe_s": time.perf_counter() - s}
print(json.dumps({"core_import_s": t1 - t0, "backends": rows}))
"""


def registry_costs() -> list[dict[str, Any]]:
    """Each shipped plugin's entry-point import plus probe in fresh processes (the median of WARM_RUNS), what
    every process resolving the default device pays; docs/plugins.md section 7 keeps it under 50 ms each."""
    runs = []
    for _ in range(WARM_RUNS):
        proc = subprocess.run([sys.executable, "-c", _CHILD_REGISTRY], capture_output=True, text=True,
                              env=_peer_env(), cwd=ROOT)
        if proc.returncode != 0:
            return [{"row": "plugin import + probe", "who": "tolk", "error": proc.stderr[-300:]}]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    out = [{"row": "import tolk_core.plugins", "who": "tolk",
            "seconds_s": statistics.median(r["core_import_s"] for r in runs)}]
    for name in runs[0]["backends"]:
        per = [r["backends"][name] for r in runs]
        out.append({"row": f"plugin import + probe {name}", "who": per[0]["dist"],
                    "import_s": statistics.median(p["import_s"] for p in per),
                    "probe_s": statistics.median(p["probe_s"] for p in per),
                    "total_s": statistics.median(p["import_s"] + p["probe_s"] for p in per)})
    return out


def jit_replay(device: str, reps: int, peers: dict[str, bool]) -> dict[str, Any]:
    """The demo MLP through each JIT: best replay time. Tolk's row needs `tolk_core.jit`."""
    from bench.rows import _mlp, mlp_inputs
    inp = mlp_inputs(np.random.default_rng(0))
    rec: dict[str, Any] = {"row": "jitted MLP replay", "times": {}}
    import tolk_core
    if (jit := getattr(tolk_core, "jit", None)) is not None:
        from tolk_core.frontend.tensor import Tensor
        from tolk_core.plugins import Device
        ts = [Tensor(v, device=device).realize() for v in inp.values()]
        f, dev = jit(lambda *a: _mlp(*a)), Device[ts[0].device]
        want = _mlp(*inp.values())
        for _ in range(3):  # warm-up, capture, first replay: each must compute the forward
            got = f(*ts).numpy()
            rec["ok"] = bool(np.allclose(got, want, rtol=1e-3, atol=1e-3))
        rec["times"]["tolk"] = best_time(lambda: (f(*ts), dev.synchronize()), reps)
    else:
        rec["tolk"] = "n/a (no JIT yet)"
    if peers["tinygrad"]:
        from tinygrad import Device as TD
        from tinygrad import Tensor as TT
        from tinygrad import TinyJit

        from bench.rows import tiny_device
        tdev = TD[tiny_device(device)]
        tts = [TT(v, device=tiny_device(device)).realize() for v in inp.values()]
        tf = TinyJit(lambda *a: _mlp(*a).realize())
        rec["times"]["tinygrad"] = best_time(lambda: (tf(*tts), tdev.synchronize()), reps)
    if peers["torch"]:
        import torch
        pts = [torch.from_numpy(v.copy()) for v in inp.values()]
        rec["times"]["torch (eager)"] = best_time(lambda: _mlp(*pts), reps)
    return rec


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:9.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and no N=2048 matmul (< 5 minutes)")
    ap.add_argument("--json", help="write every measurement to this path")
    ap.add_argument("--only", help="run only rows whose name contains this text")
    ap.add_argument("--models", action="store_true",
                    help="run the model workloads against torch instead of the rows (bench.models)")
    args = ap.parse_args(argv)
    if args.models:
        from bench.models import run_models
        return run_models(args.device, args.quick, args.json, args.only)
    reps, min_total = (5, 1.5) if args.quick else (10, 4.0)
    peers = {"torch": _have("torch"), "tinygrad": _have("tinygrad")}
    selected = [r for r in rows(args.device) if (r.quick or not args.quick) and
                (args.only is None or args.only in r.name)]
    started = time.perf_counter()
    names = [r.name for r in selected]
    timed = {p: peer_times(p, args.device, names, reps, min_total)
             for p in ("numpy", *(p for p, ok in peers.items() if ok))}
    np_peer = timed["numpy"]
    load = os.getloadavg()
    print(f"tolk bench on {args.device}; load average {load[0]:.1f} on {os.cpu_count()} cpus; "
          f"peers: numpy (BLAS {np_peer['blas']}), "
          + ", ".join(f"{k}={'yes' if v else 'not importable'}" for k, v in peers.items()))
    print(f"{'row':46s} {'unit':8s} {'tolk':>9s} {'numpy':>9s} {'torch':>9s} {'tinygrad':>9s}  "
          f"{'x numpy':>8s} {'x torch':>8s} {'x tiny':>8s} {'bw frac':>7s} ok")
    results: list[dict[str, Any]] = []
    failed = False
    copy_cache: dict[int, float] = {}
    for row in selected:
        rec = run_row(row, reps, min_total)
        for p, res in timed.items():
            if (t := res["times"].get(row.name)) is not None:
                rec["times"][p] = t
            if (err := res["errors"].get(row.name)) is not None:
                rec.setdefault("peer_errors", {})[p] = err
        rates = {w: _rate(rec, w) for w in ("tolk", "numpy", "torch", "tinygrad")}
        rec["rates"] = rates
        if row.out_elems:
            if row.out_elems not in copy_cache:
                copy_cache[row.out_elems] = copy_bandwidth(row.out_elems, reps, min_total)
            rec["copy_gbs"] = copy_cache[row.out_elems]
            rec["bandwidth_fraction"] = rates["tolk"] / rec["copy_gbs"]
        ratio = {w: rates["tolk"] / rates[w] if rates[w] else None for w in ("numpy", "torch", "tinygrad")}
        rec["ratios"] = ratio
        failed |= not rec["ok"]
        results.append(rec)
        verdict = "yes" if rec["ok"] else "NO (max rel error {:.2e})".format(rec["max_rel_error"])
        print(f"{row.name:46s} {row.unit:8s} {_fmt(rates['tolk'])} {_fmt(rates['numpy'])} {_fmt(rates['torch'])} "
              f"{_fmt(rates['tinygrad'])}  {_fmt(ratio['numpy'])[1:]} {_fmt(ratio['torch'])[1:]} "
              f"{_fmt(ratio['tinygrad'])[1:]} {_fmt(rec.get('bandwidth_fraction'))[2:]} "
              f"{verdict}", flush=True)
    if args.only is None:
        jr = jit_replay(args.device, reps * 10, peers)
        failed |= not jr.get("ok", True)
        results.append(jr)
        print("jitted MLP replay (ms): " + (jr.get("tolk") or "") +
              "  ".join(f"{k}={v * 1e3:.3f}" for k, v in jr["times"].items()), flush=True)
        for rec in first_calls(args.device, peers) + schedule_times(args.device, peers) + \
                frontend_times(args.device, peers) + registry_costs():
            results.append(rec)
            print(f"{rec['row']:32s} {rec['who']:9s} " +
                  "  ".join(f"{k}={v * 1e3:.1f}ms" if k.endswith("_s") else f"{k}={v}" for k, v in rec.items()
                            if k not in ("row", "who")), flush=True)
    print(f"suite took {time.perf_counter() - started:.0f} s; " +
          ("all rows match numpy" if not failed else "SOME ROWS DIFFER FROM NUMPY"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "quick": args.quick, "numpy_blas": np_peer["blas"], "loadavg": load,
                       "results": results}, f, indent=1)
    return 1 if failed else 0
