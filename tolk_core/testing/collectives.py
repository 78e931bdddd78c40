"""The collectives tier: one launched job per rank count runs every check inside every rank (SPMD) and each
rank writes its results; `run_job` launches a job and `failures` reads what failed (docs/plugins.md, section 12).

    python -m tolk_core.testing.collectives --report DIR [--provider NAME | --group module:factory]
                                            [--case tier|hang|exit] [--timeout S]

Every rank derives every other rank's input from a seed and its rank, so each checks its own answer against
the numpy meaning (tolk_core.collectives.group) without trusting the provider. Cases:
  tier  every operation x every Tolk dtype (non-contiguous inputs, size 0, one 2^22 allreduce), a persistent
        replay with new data when the provider offers it, then a shape mismatch on the last rank, which every
        rank must see as CollectiveError within the time limit
  hang  the last rank never calls; the others must raise CollectiveError (a timeout) within the time limit
  exit  the last rank exits before the call; the others must raise CollectiveError (TCP's launcher: an MPI
        launcher ends the whole job instead)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tolk_core.collectives import DTYPES, ProcessGroup, init_process_group, reduce_arrays
from tolk_core.errors import CollectiveError

CASES = ("tier", "hang", "exit")
BIG = 1 << 22
SLACK_S = 5.0
"""How far past its timeout an error may surface on a rank and still pass (process scheduling on a loaded host)."""


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def make_input(dtype: str, shape: tuple[int, ...], seed: int, rank: int) -> np.ndarray:
    """Rank `rank`'s input of a check: small values, so integer sums stay exact and float sums close."""
    rng = np.random.default_rng(seed * 1009 + rank)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    dt = _np_dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(0 if dt.kind == "u" else -20, 20, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{what}: got {got.dtype} {got.shape}, expected {want.dtype} {want.shape}")
    tol = {"float16": 2e-2, "bfloat16": 1e-1, "float32": 1e-5, "float64": 1e-12}.get(want.dtype.name)
    if tol is None:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=what)


def _strided(dtype: str, n: int, seed: int, rank: int) -> np.ndarray:
    """A non-contiguous (every other column) view holding n x 3 elements."""
    return make_input(dtype, (n, 6), seed, rank)[:, ::2]


def _into(g: ProcessGroup, dtype: str, seed: int, op: str, how: str) -> None:
    """allreduce with out=: the result lands in the given array, which is returned (its identity), and equals
    the fold of every rank's input. `how`: 'out' (a separate array; the input stays as it was), 'inplace' (out
    is the input), 'overlap' (out is the input shifted by one element: the provider must not read input it has
    already overwritten). 'small-out' is 'out' at 21 elements; the others take 5001, past any provider's
    small-message path (tolk-mpi's: under 4 KiB)."""
    shape = (3, 7) if how.startswith("small") else (5001,)
    how = how.removeprefix("small-")
    every = [make_input(dtype, shape, seed, r) for r in range(g.size)]
    want = reduce_arrays(every, op)
    if how == "overlap":
        store = np.concatenate([every[g.rank].reshape(-1), every[g.rank].reshape(-1)[:1]])
        x, out = store[1:].reshape(shape), store[:-1].reshape(shape)
        x[...] = every[g.rank]
    else:
        x = every[g.rank].copy()
        out = x if how == "inplace" else np.full(shape, 7, x.dtype)
    got = g.allreduce(x, op, out=out)
    if got is not out:
        raise AssertionError(f"allreduce out= ({how}): returned a new array, not the given out")
    _close(out, want, f"allreduce {op} out= ({how})")
    if how == "out":
        _close(x, every[g.rank], "allreduce out=: the input after the call")


def _op_checks(g: ProcessGroup, dtype: str, seed: int) -> list[tuple[str, Callable[[], None]]]:
    n, size, rank = 2 * g.size, g.size, g.rank
    every = [_strided(dtype, n, seed, r) for r in range(size)]
    out: list[tuple[str, Callable[[], None]]] = []
    def allreduce(op: str) -> Callable[[], None]:
        return lambda: _close(g.allreduce(every[rank], op), reduce_arrays(every, op), f"allreduce {op}")

    def into(op: str, how: str) -> Callable[[], None]:
        return lambda: _into(g, dtype, seed, op, how)

    def reduce_scatter(op: str) -> Callable[[], None]:
        want = reduce_arrays(every, op)[rank * 2:(rank + 1) * 2]
        return lambda: _close(g.reduce_scatter(every[rank], op), want, f"reduce_scatter {op}")

    for op in ("sum", "max", "min"):
        if f"allreduce_{op}" in g.ops:
            out.append((f"allreduce_{op}[{dtype}-strided]", allreduce(op)))
    if "allreduce_sum" in g.ops:
        out.append((f"allreduce_sum[{dtype}-empty]", lambda: _close(
            g.allreduce(np.zeros((0, 3), _np_dtype(dtype))), np.zeros((0, 3), _np_dtype(dtype)), "allreduce empty")))
        out.append((f"allreduce_sum[{dtype}-scalar]", lambda: _close(
            g.allreduce(every[rank][0, 0]), reduce_arrays([e[0, 0] for e in every], "sum"), "allreduce 0-d")))
        for how in ("small-out", "out", "overlap"):
            out.append((f"allreduce_sum[{dtype}-{how}]", into("sum", how)))
    if "allreduce_max" in g.ops:
        out.append((f"allreduce_max[{dtype}-inplace]", into("max", "inplace")))
    if "allgather" in g.ops:
        out.append((f"allgather[{dtype}-strided]", lambda: _close(g.allgather(every[rank]), np.stack(every),
                                                                  "allgather")))
    if "broadcast" in g.ops:
        out.append((f"broadcast[{dtype}-root{size - 1}]", lambda: _close(g.broadcast(every[rank], root=size - 1),
                                                                         every[size - 1], "broadcast")))
    if "reduce_scatter" in g.ops:
        for op in ("sum", "max"):
            out.append((f"reduce_scatter_{op}[{dtype}-strided]", reduce_scatter(op)))
    return out


def _big(g: ProcessGroup) -> None:
    """2^22 float32 holding small integers, so the sum is exact in any order and the check costs one compare."""
    pattern = (np.arange(BIG, dtype=np.int32) % 251).astype(np.float32)
    got = g.allreduce(pattern + g.rank, "sum")
    want = pattern * g.size + sum(range(g.size))
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0]) if got.shape == want.shape else -1
        raise AssertionError(f"allreduce 2^22 float32: first wrong element {bad} (got shape {got.shape})")


def _reused(g: ProcessGroup) -> None:
    """allreduce with out= called again and again on the same two arrays with new data (a provider may keep
    what it bound to them, or pick its way by timing the first calls), with a new out on the last rank alone
    (its peers keep theirs) once early and once late, then in place: every call's answer is this call's data."""
    n = 5001
    x, out = np.empty(n, np.float32), np.empty(n, np.float32)
    for step in range(22):
        x[...] = make_input("float32", (n,), 200 + step, g.rank)
        if step in (3, 19) and g.rank == g.size - 1:
            out = np.empty(n, np.float32)
        got = g.allreduce(x, "sum", out=x if step == 21 else out)
        want = reduce_arrays([make_input("float32", (n,), 200 + step, r) for r in range(g.size)], "sum")
        _close(got, want, f"allreduce out= reused, call {step}")


def _persistent(g: ProcessGroup) -> None:
    x = np.empty(64, np.float32)
    req = g.allreduce_init(x, "sum")
    for replay in range(3):
        x[...] = make_input("float32", (64,), 100 + replay, g.rank)
        req.start()
        got = req.wait()
        _close(got, reduce_arrays([make_input("float32", (64,), 100 + replay, r) for r in range(g.size)], "sum"),
               f"persistent replay {replay}")
    req.close()


def _expect_error(call: Callable[[], Any], limit: float, what: str) -> None:
    t0 = time.monotonic()
    try:
        call()
    except CollectiveError as e:
        took = time.monotonic() - t0
        if took > limit:
            raise AssertionError(f"{what}: CollectiveError after {took:.1f}s, past the limit {limit:.1f}s") from e
        return
    raise AssertionError(f"{what}: no CollectiveError on rank (the call returned)")


def tier_checks(g: ProcessGroup, dtypes: Sequence[str] = DTYPES, big: bool = True,
                ) -> list[tuple[str, Callable[[], None]]]:
    """The tier case's checks, in the order every rank runs them (the mismatch, which closes the group, last).
    `dtypes` and `big` (the 2^22 case) trim the grid for quick jobs."""
    checks: list[tuple[str, Callable[[], None]]] = []
    for dtype in dtypes:
        checks += _op_checks(g, dtype, seed=DTYPES.index(dtype))
    if "barrier" in g.ops:
        checks.append(("barrier", g.barrier))
    if "allreduce_sum" in g.ops:
        checks.append(("allreduce_sum[float32-out-reused]", lambda: _reused(g)))
    if big:
        checks.append(("allreduce_sum[float32-2^22]", lambda: _big(g)))
    if g.persistent:
        checks.append(("persistent_replay_new_data", lambda: _persistent(g)))
    last = g.size - 1
    checks.append(("error_on_one_rank_reaches_every_rank", lambda: _expect_error(
        lambda: g.allreduce(np.zeros(5 if g.rank == last else 4, np.float32)), g.timeout + SLACK_S, "mismatch")))
    return checks


def _run(g: ProcessGroup, case: str, dtypes: Sequence[str], big: bool) -> list[dict[str, Any]]:
    last = g.size - 1
    if case == "tier":
        checks = tier_checks(g, dtypes, big)
    elif case in ("hang", "exit"):
        if g.rank == last:
            if case == "exit":
                os._exit(3)
            return [{"name": f"{case}_rank", "ok": True, "detail": "stays out (main sleeps)", "seconds": 0.0}]
        checks = [(f"{case}_on_one_rank_reaches_the_others", lambda: _expect_error(
            lambda: g.allreduce(np.ones(4, np.float32)), g.timeout + SLACK_S, case))]
    else:
        raise ValueError(f"unknown case {case!r}; known: {', '.join(CASES)}")
    results = []
    for name, fn in checks:
        t0 = time.monotonic()
        try:
            fn()
            results.append({"name": name, "ok": True, "detail": "", "seconds": time.monotonic() - t0})
        except Exception as e:  # noqa: BLE001  # every failure is a result; the next checks still run
            results.append({"name": name, "ok": False, "detail": f"{type(e).__name__}: {e}"[:2000],
                            "seconds": time.monotonic() - t0})
            if g.closed and name != checks[-1][0]:
                results.append({"name": "group_closed_early", "ok": False, "detail": f"after {name}",
                                "seconds": 0.0})
                break
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tolk_core.testing.collectives")
    ap.add_argument("--report", required=True, help="directory each rank writes rank<N>.json into")
    ap.add_argument("--provider", default=None, help="collectives provider (default: TOLK_COLLECTIVES or the best)")
    ap.add_argument("--group", default=None, help="a 'module:factory' ref instead of a provider (test fixtures)")
    ap.add_argument("--case", default="tier", choices=CASES)
    ap.add_argument("--timeout", type=float, default=10.0, help="the group's timeout in seconds")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes of the grid (default: all)")
    ap.add_argument("--no-big", action="store_true", help="leave out the 2^22-element case")
    a = ap.parse_args(argv)
    dtypes = [d for d in a.dtypes.split(",") if d]
    if unknown := sorted(set(dtypes) - set(DTYPES)):
        ap.error(f"unknown dtypes {unknown}; known: {', '.join(DTYPES)}")
    report: dict[str, Any] = {"rank": None, "results": []}
    try:
        if a.group:
            from tolk_core.plugins import resolve_ref
            g = resolve_ref(a.group)(a.timeout)
        else:
            g = init_process_group(a.provider, timeout=a.timeout)
        report.update(rank=g.rank, size=g.size, provider=g.name, persistent=g.persistent)
        report["results"] = _run(g, a.case, dtypes, not a.no_big)
        g.close()
    except Exception as e:  # noqa: BLE001  # a rank that cannot even join reports why
        report["results"].append({"name": "join", "ok": False, "detail": traceback.format_exc()[-2000:],
                                  "seconds": 0.0, "error": type(e).__name__})
    launched = [os.environ.get(v) for v in ("TOLK_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")]
    rank = report["rank"] if report["rank"] is not None else next((r for r in launched if r), os.getpid())
    Path(a.report).mkdir(parents=True, exist_ok=True)
    (Path(a.report) / f"rank{rank}.json").write_text(json.dumps(report))
    sys.stdout.flush()
    if a.case == "hang" and report.get("size") and report["rank"] == report["size"] - 1:
        time.sleep(a.timeout + 1.0)  # reported first (an MPI launcher may end the job when rank 0 exits); stays
        # out past the others' deadline, so that they must have raised by then
    if a.case != "tier":
        os._exit(0)  # a timed-out collective stays pending (MPI cannot cancel one), and finalize could block on it
    return 0


def run_job(n: int, report: Path, *, launcher: Sequence[str] | None = None, args: Sequence[str] = (),
            env: dict[str, str] | None = None, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Launch the tier module as `n` ranks (TCP's local launcher, or `launcher` + the command, e.g. mpiexec) and
    return each rank's report (a rank without one gets a failed `no_report` result)."""
    cmd = [sys.executable, "-m", "tolk_core.testing.collectives", "--report", str(report), *args]
    if launcher is None:
        from tolk_core.collectives.launch import spawn
        done = spawn(n, cmd, env=env, timeout=timeout)
        codes, errs = [c for c, _ in done], [e[-1500:] for _, e in done]
    else:
        import subprocess
        p = subprocess.run([*launcher, *cmd], env=env, capture_output=True, text=True, timeout=timeout)
        codes, errs = [p.returncode], [p.stderr[-3000:]]
    out = []
    for r in range(n):
        f = report / f"rank{r}.json"
        out.append(json.loads(f.read_text()) if f.exists() else
                   {"rank": r, "results": [{"name": "no_report", "ok": False, "seconds": 0.0,
                                            "detail": f"rank {r} wrote no report (exit codes {codes}) {errs}"}]})
    return out


def failures(reports: list[dict[str, Any]], skip_ranks: Sequence[int] = ()) -> list[str]:
    """'rank R: check: detail' for every failed check of every rank but `skip_ranks` (the rank an `exit` case
    ends), empty when the job passed."""
    return [f"rank {rep['rank']}: {res['name']}: {res['detail']}" for rep in reports for res in rep["results"]
            if not res["ok"] and rep["rank"] not in skip_ranks]


if __name__ == "__main__":
    sys.exit(main())
