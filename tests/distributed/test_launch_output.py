"""`tolk launch`'s local ranks (tolk_core.collectives.launch.supervise) reach the terminal a whole line at a time:
ranks that fail together write their tracebacks at the same moment, and through one shared descriptor their
lines came out spliced into one another."""
from __future__ import annotations

import sys
import time

from tolk_core.collectives.launch import supervise

# from one start time, each rank writes 100 lines of 200 copies of its rank's letter, a character per write (as a
# traceback's pieces)
_RANK = ("import os, sys, time\n"
         "c = 'ABC'[int(os.environ['TOLK_RANK'])]\n"
         "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
         "for _ in range(100):\n"
         "    for ch in c * 200 + '\\n':\n"
         "        sys.stderr.write(ch); sys.stderr.flush()\n")


def test_ranks_lines_reach_stderr_whole(capfd):
    code, failed = supervise(3, [sys.executable, "-c", _RANK, str(time.time() + 2.0)], timeout=120)
    assert (code, failed) == (0, "")
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln]
    assert sorted(lines) == sorted(c * 200 for c in "ABC" for _ in range(100))
