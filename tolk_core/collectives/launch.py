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
    exits = _Exits(procs)
    for t in readers:
        t.start()
    start, kill_at = time.monotonic(), None
    while not exits.all_done(timeout=0.05):
        now = time.monotonic()
        if kill_at is None and exits.first_failure() is not None:
            kill_at = now + grace
        if (kill_at is not None and now > kill_at) or (timeout is not None and now - start > timeout):
            for r, p in enumerate(procs):
                if not exits.done(r):
                    p.kill()  # its waiter records it (status -9)
    for t in readers:
        t.join(timeout=5.0)
    first = exits.first_failure()
    if first is None:
        return 0, ""
    rank, code = first
    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    return (code if code > 0 else 128 - code), f"rank {rank} of {n} {how}"


class _Exits:
    """The ranks' exits in the order they happened: one thread per rank waits on it. When a rank dies, its
    peers fail moments later (a closed connection); ordering by a shared poll would name whichever of them has
    the lowest rank, so each exit is recorded the moment its waiter wakes."""

    def __init__(self, procs: Sequence[subprocess.Popen[str]]) -> None:
        self._order: list[tuple[int, int]] = []
        self._cond = threading.Condition()
        self._n = len(procs)
        for r, p in enumerate(procs):
            threading.Thread(target=self._wait, args=(r, p), daemon=True).start()

    def _wait(self, rank: int, proc: subprocess.Popen[str]) -> None:
        code = proc.wait()
        with self._cond:
            self._order.append((rank, code))
            self._cond.notify_all()

    def all_done(self, timeout: float) -> bool:
        """Whether every rank has exited, after waiting up to `timeout` seconds for one more exit."""
        with self._cond:
            if len(self._order) < self._n:
                self._cond.wait(timeout)
            return len(self._order) == self._n

    def done(self, rank: int) -> bool:
        with self._cond:
            return any(r == rank for r, _ in self._order)

    def first_failure(self) -> tuple[int, int] | None:
        """(rank, status) of the first rank that exited non-zero, None while none has."""
        with self._cond:
            return next(((r, c) for r, c in self._order if c), None)


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
