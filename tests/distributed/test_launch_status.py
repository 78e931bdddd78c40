"""`tolk launch` names the rank that failed first (tolk_core.collectives.launch.supervise): when a rank dies its
peers fail moments later on the closed connection, and the job's status and message must be the dead rank's,
not the lowest-numbered rank that failed within the same moment."""
from __future__ import annotations

import sys
import time

import pytest

from tolk_core.collectives.launch import supervise

pytestmark = pytest.mark.timeout(120)

# from one start time, rank 2 exits with status 7 at once; ranks 0 and 1 exit with status 1 `lag` seconds later
_RANK = ("import os, sys, time\n"
         "r = int(os.environ['TOLK_RANK'])\n"
         "time.sleep(max(0.0, float(sys.argv[1]) - time.time()) + (0.0 if r == 2 else float(sys.argv[2])))\n"
         "os._exit(7 if r == 2 else 1)\n")


@pytest.mark.parametrize("lag", [0.01, 0.03])
def test_the_first_rank_to_fail_is_named(lag):
    code, failed = supervise(3, [sys.executable, "-c", _RANK, str(time.time() + 1.5), str(lag)], timeout=60)
    assert (code, failed) == (7, "rank 2 of 3 exited with status 7")


def test_a_rank_past_the_grace_is_killed_and_the_failure_kept():
    hang = "import os, time\nif os.environ['TOLK_RANK'] == '0': os._exit(3)\ntime.sleep(60)\n"
    start = time.monotonic()
    code, failed = supervise(2, [sys.executable, "-c", hang], grace=0.5, timeout=60)
    assert (code, failed) == (3, "rank 0 of 2 exited with status 3")
    assert time.monotonic() - start < 20.0


def test_a_job_past_its_timeout_names_a_killed_rank():
    code, failed = supervise(1, [sys.executable, "-c", "import time; time.sleep(60)"], timeout=1.0)
    assert (code, failed) == (128 + 9, "rank 0 of 1 was killed by signal 9")
