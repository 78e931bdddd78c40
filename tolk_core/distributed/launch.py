"""`tolk launch -n N [--hostfile F] [--provider NAME] script.py ARGS` (docs/distributed.md).

With tolk-mpi (provider MPI) it runs ``mpiexec -n N [--hostfile F] python script.py ARGS``, adding Open MPI's
flags only where they are needed, and saying so on stderr: the two OMPI_ALLOW_RUN_AS_ROOT variables as root,
``--oversubscribe`` and ``--mca mpi_yield_when_idle 1`` when N exceeds the slots (the hostfile's, else this
machine's cores). With the reference provider TCP it starts the N ranks itself on this machine
(tolk_core.collectives.launch.supervise); a hostfile may then name only this machine. Without a hostfile each
rank gets OMP_NUM_THREADS = cores / N (unless set). Either way the exit status is non-zero when a rank fails,
and the last line on stderr names that rank.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

from tolk_core import config
from tolk_core.collectives import provider
from tolk_core.collectives.launch import supervise
from tolk_core.errors import CollectiveError, ConfigError

ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# how Open MPI's launcher names the first failed process: "Process name: [prterun-host-123@1,RANK]", or for a
# signal "process rank RANK with PID ..."
_FAILED = re.compile(r"Process name:\s*\[[^\]]*,(\d+)\]|process rank (\d+)")
_LOCAL = {"localhost", "127.0.0.1", "::1"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="run a script as N ranks of one job (docs/distributed.md)")
    p.add_argument("-n", type=int, required=True, help="number of ranks (processes)")
    p.add_argument("--hostfile", default=None, help="machines to run on, one per line: HOST [slots=K] (MPI)")
    p.add_argument("--provider", default=None, help="collectives provider: MPI or TCP (default: "
                                                    "TOLK_COLLECTIVES, else the best available)")
    p.add_argument("--timeout", type=float, default=None, help="kill the job after this many seconds")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    p.set_defaults(fn=run)


def hostfile_slots(path: str) -> list[tuple[str, int]]:
    """(host, slots) per line of an Open MPI hostfile (``HOST [slots=K]``; '#' starts a comment). ConfigError
    naming the file for an unreadable one or a bad line."""
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        raise ConfigError(f"--hostfile {path}: cannot read it ({e})") from None
    out = []
    for i, line in enumerate(lines, 1):
        words = line.split("#")[0].split()
        if not words:
            continue
        m = re.fullmatch(r"slots=(\d+)", words[1]) if len(words) > 1 else None
        if len(words) > 2 or (len(words) == 2 and m is None):
            raise ConfigError(f"--hostfile {path} line {i}: expected 'HOST [slots=K]', got {line.strip()!r}")
        out.append((words[0], int(m[1]) if m else 1))
    if not out:
        raise ConfigError(f"--hostfile {path} names no host")
    return out


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def thread_env(n: int, hostfile: str | None) -> tuple[dict[str, str], list[str]]:
    """OMP_NUM_THREADS for `n` ranks sharing this machine's cores (each rank's CPU kernels would otherwise start
    a thread per core, and n ranks would fight over them); nothing when the user set it or a hostfile spreads
    the ranks over machines."""
    if hostfile or "OMP_NUM_THREADS" in os.environ:
        return {}, []
    k = max(1, _cores() // n)
    return {"OMP_NUM_THREADS": str(k)}, [f"{n} ranks on {_cores()} cores: OMP_NUM_THREADS={k} in each (set "
                                         "OMP_NUM_THREADS to choose)"]


def mpi_command(n: int, mpiexec: str, argv: Sequence[str], hostfile: str | None = None,
                is_root: bool | None = None) -> tuple[list[str], dict[str, str], list[str]]:
    """The mpiexec command line running `argv` as `n` ranks, the environment it adds, and one note per flag
    added because this job needs it."""
    is_root = os.geteuid() == 0 if is_root is None else is_root
    cmd, env, notes = [mpiexec, "-n", str(n)], {"TOLK_COLLECTIVES": "MPI"}, []
    slots = sum(k for _, k in hostfile_slots(hostfile)) if hostfile else _cores()
    if hostfile:
        cmd += ["--hostfile", hostfile]
    if n > slots:
        cmd += ["--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
        notes.append(f"{n} ranks on {slots} slots ({'the hostfile' if hostfile else 'cores'}): --oversubscribe, "
                     "and mpi_yield_when_idle so that waiting ranks give their core away")
    threads, said = thread_env(n, hostfile)
    env.update(threads)
    notes += said
    if is_root:
        env.update(ROOT_ENV)
        notes.append("running as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
    return cmd + list(argv), env, notes


def _mpiexec() -> str:
    rec = provider("MPI")
    availability = rec.status.get()[3]
    found = availability.details.get("mpiexec") if availability is not None else None
    if not found:
        raise CollectiveError(f"collectives provider MPI ({rec.plugin.provider}) names no mpiexec: {rec.reason}")
    return str(found)


def _forward(stream: IO[str], seen: list[int]) -> None:
    """Copy mpiexec's stderr through, remembering the rank its failure report names."""
    for line in stream:
        sys.stderr.write(line)
        if not seen and (m := _FAILED.search(line)):
            seen.append(int(m[1] or m[2]))
    sys.stderr.flush()


def run_mpi(n: int, argv: Sequence[str], hostfile: str | None, timeout: float | None) -> int:
    cmd, env, notes = mpi_command(n, _mpiexec(), argv, hostfile)
    for note in notes:
        print(f"tolk launch: {note}", file=sys.stderr)
    p = subprocess.Popen(cmd, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
    seen: list[int] = []
    reader = threading.Thread(target=_forward, args=(p.stderr, seen), daemon=True)
    reader.start()
    try:
        code = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        code = p.wait()
        print(f"tolk launch: the job ran past --timeout {timeout:g}s and was killed", file=sys.stderr)
    reader.join(timeout=5.0)
    if code:
        who = f"rank {seen[0]} of {n} failed" if seen else "a rank failed"
        print(f"tolk launch: {who}; mpiexec ended the job with status {code}", file=sys.stderr)
    return code


def run_local(n: int, argv: Sequence[str], hostfile: str | None, timeout: float | None) -> int:
    if hostfile:
        hosts = hostfile_slots(hostfile)
        if far := sorted({h for h, _ in hosts} - _LOCAL - {socket.gethostname()}):
            raise ConfigError(f"--hostfile {hostfile} names {', '.join(far)}: the reference provider TCP starts "
                              "ranks on this machine only. Use tolk-mpi (--provider MPI) across machines, or "
                              "start each rank there with TOLK_RANK, TOLK_WORLD_SIZE, TOLK_MASTER_ADDR/PORT")
    grace = float(config.get("COLLECTIVES_TIMEOUT")) + 5.0
    threads, said = thread_env(n, hostfile)
    for note in said:
        print(f"tolk launch: {note}", file=sys.stderr)
    code, failed = supervise(n, argv, env={**os.environ, **threads, "TOLK_COLLECTIVES": "TCP"}, grace=grace,
                             timeout=timeout)
    if failed:
        print(f"tolk launch: {failed}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise ConfigError(f"tolk launch: -n must be at least 1, got {args.n}")
    rec = provider(args.provider)
    argv = [sys.executable, args.script, *args.args]
    if rec.name == "MPI":
        return run_mpi(args.n, argv, args.hostfile, args.timeout)
    if rec.name == "TCP":
        return run_local(args.n, argv, args.hostfile, args.timeout)
    raise CollectiveError(f"tolk launch knows how to start ranks for MPI and TCP, not {rec.name}: use its own "
                          f"launcher ({rec.spec.launcher or 'see its documentation'})")
