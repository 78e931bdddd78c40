"""Children that stay alive between timing rounds, so the libraries can be timed in alternating rounds.

A model workload's two sides run in child processes of their own (one library's thread pool never spins while
the other is timed). Timing one side to the end and then the other lets a change of machine load (another
process, a frequency step) land on one side only; alternating short rounds spreads it over both. The protocol
is lines of JSON on the child's stdout and one-word commands on its stdin:

- the child builds and checks its workload, then prints `{"ready": RECORD}`;
- `time MODE REPS MIN_S BUDGET_S` times one round of MODE's steps and prints `{"times": [...], "per_step": {...}}`;
- `finish` prints the child's closing record (profile, peak memory) and the child exits.

`Child` is the parent's handle: every answer has a deadline (`timeout_s` from the start for the ready record, from
the command for the others), and a
child that fails or runs out of time becomes an `{"error": ..., "status": ...}` record naming the phase it was
in (the last `phase: NAME` line it wrote on stderr)."""
from __future__ import annotations

import json
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO, Any


class ChildFailed(Exception):
    """A child exited, printed something that is not a record, or ran past its deadline; `record` says which."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__(record["error"])
        self.record = record


def _last_phase(stderr: str) -> str:
    phases = [ln[7:] for ln in stderr.splitlines() if ln.startswith("phase: ")]
    return phases[-1] if phases else "start"


class Child:
    """`python -m MODULE child ARGS` as a live process speaking the protocol above."""

    def __init__(self, module: str, args: list[str], env: dict[str, str], cwd: str, timeout_s: float) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen([sys.executable, "-m", module, "child", *args], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env, cwd=cwd)
        self._deadline = time.monotonic() + timeout_s
        self._timeout_s = timeout_s
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(self._proc.stdout,), daemon=True).start()

    def _pump(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)  # end of output: the child exited

    def _stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def _fail(self, status: str) -> ChildFailed:
        self._proc.kill()
        self._proc.wait()
        err = self._stderr_text()
        phase = _last_phase(err)
        if status == "timeout":
            return ChildFailed({"error": f"timeout after {self._timeout_s:.0f} s in phase {phase!r}",
                                "status": "timeout"})
        last = [ln for ln in err.strip().splitlines() if not ln.startswith("phase: ")][-1:]  # the exception
        return ChildFailed({"error": f"failed in phase {phase!r}: " + "".join(last).strip(), "status": "failed"})

    def read(self) -> dict[str, Any]:
        """The child's next record; ChildFailed when it exits first or the deadline passes."""
        try:
            line = self._lines.get(timeout=max(0.0, self._deadline - time.monotonic()))
        except queue.Empty:
            raise self._fail("timeout") from None
        if line is None:
            raise self._fail("failed")
        try:
            rec: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            raise self._fail("failed") from None
        return rec

    def ask(self, command: str) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._deadline = time.monotonic() + self._timeout_s
        try:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise self._fail("failed") from None
        return self.read()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._stderr.close()


def serve(ready: dict[str, Any], timers: dict[str, Callable[[int, float, float], dict[str, Any]]],
          finish: Callable[[], dict[str, Any]]) -> None:
    """The child's side: print `ready`, then answer `time` commands with `timers[MODE](reps, min_s, budget_s)`
    until `finish`, whose record is the last line."""
    print(json.dumps({"ready": ready}), flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "finish":
            break
        mode, reps, min_s, budget_s = args
        print(json.dumps(timers[mode](int(reps), float(min_s), float(budget_s))), flush=True)
    print(json.dumps(finish()), flush=True)


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's rounds as one record: median and best over every timed step of every round, the counters
    per step averaged over the rounds' steps."""
    times = [t for r in rounds for t in r["times"]]
    n = len(times)
    keys = {k for r in rounds for k in r["per_step"]}
    per = {k: sum(r["per_step"].get(k, 0.0) * len(r["times"]) for r in rounds) / n for k in keys}
    return {"median_s": statistics.median(times), "best_s": min(times), "steps": n, "rounds": len(rounds),
            "per_step": per}
