"""Start N local ranks of a job for the TCP provider:

    python -m tolk_core.collectives.launch -n 4 [--timeout S] -- python train.py ARGS

Each rank is the command with TOLK_RANK, TOLK_WORLD_SIZE, TOLK_MASTER_ADDR=127.0.0.1 and a free
TOLK_MASTER_PORT set (and TOLK_COLLECTIVES=TCP unless set). The exit status is the first non-zero rank's.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port free on `addr` right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def rank_env(n: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every rank of an `n`-rank local job shares (its TOLK_RANK set per rank)."""
    base = dict(os.environ if env is None else env)
    base.update(TOLK_WORLD_SIZE=str(n), TOLK_MASTER_ADDR="127.0.0.1", TOLK_MASTER_PORT=str(free_port()))
    base.setdefault("TOLK_COLLECTIVES", "TCP")
    return base


def spawn(n: int, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 600.0,
          ) -> list[tuple[int, str]]:
    """Run `argv` as ranks 0..n-1 of one job and wait for all (killing them past `timeout` seconds). Returns
    each rank's (exit status, stderr tail); a killed rank's status is -9."""
    base = rank_env(n, env)
    procs = [subprocess.Popen(list(argv), env={**base, "TOLK_RANK": str(r)}, stderr=subprocess.PIPE,
                              stdout=None, text=True) for r in range(n)]
    deadline = time.monotonic() + timeout
    out: list[tuple[int, str]] = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            _, err = p.communicate()
        out.append((p.returncode, (err or "")[-4000:]))
    return out


def supervise(n: int, argv: Sequence[str], env: Mapping[str, str] | None = None, grace: float = 65.0,
              timeout: float | None = None) -> tuple[int, str]:
    """Run `argv` as ranks 0..n-1 with their output passed through, and wait. When a rank fails (non-zero
    exit or a signal), the others get `grace` seconds to finish (their collectives raise within their
    timeout) before they are killed. Returns the job's exit status (the first failing rank's, 0 when all
    succeed) and a line naming that rank ("" when none failed)."""
    base = rank_env(n, env)
    procs = [subprocess.Popen(list(argv), env={**base, "TOLK_RANK": str(r)}, stderr=subprocess.PIPE, text=True)
             for r in range(n)]
    # each rank's stderr is passed on whole lines at a time: ranks that fail together (a dead peer) wrote their
    # tracebacks into one another mid-line through a shared descriptor
    lock = threading.Lock()
    readers = [threading.Thread(target=_pass_lines, args=(p.stderr, lock), daemon=True) for p in procs]
    for t in readers:
        t.start()
    start, first, kill_at = time.monotonic(), None, None
    while True:
        codes = [p.poll() for p in procs]
        if first is None and (bad := next(((r, c) for r, c in enumerate(codes) if c), None)):
            first, kill_at = bad, time.monotonic() + grace
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if (kill_at is not None and now > kill_at) or (timeout is not None and now - start > timeout):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            if first is None:
                first = (next(r for r, c in enumerate(codes) if c is None), -9)
        time.sleep(0.05)
    for t in readers:
        t.join(timeout=5.0)
    if first is None:
        return 0, ""
    rank, code = first
    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    return (code if code > 0 else 128 - code), f"rank {rank} of {n} {how}"


def _pass_lines(src: IO[str] | None, lock: threading.Lock) -> None:
    """Copy `src` to this process's stderr a line at a time, under `lock`."""
    if src is None:
        return
    for line in src:
        with lock:
            sys.stderr.write(line)
            sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tolk_core.collectives.launch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, required=True, help="number of ranks")
    ap.add_argument("--timeout", type=float, default=3600.0, help="kill the job after this many seconds")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="the command each rank runs (after --)")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd or a.n < 1:
        ap.error("give -n N >= 1 and a command")
    results = spawn(a.n, cmd, timeout=a.timeout)
    for r, (code, err) in enumerate(results):
        if err:
            sys.stderr.write(f"--- rank {r} (exit {code}) ---\n{err}")
    return next((c for c, _ in results if c), 0)


if __name__ == "__main__":
    sys.exit(main())
