"""A rank that dies mid-run (examples/distributed/train_digits.py --die-at): with the reference provider the
other ranks raise CollectiveError naming the dead rank, and `tolk launch` exits with its status naming it;
with tolk-mpi, mpiexec ends the job and `tolk launch` exits non-zero naming the rank within 30 s of the death."""
from __future__ import annotations

import re
import time

import pytest

from tests.distributed.conftest import TRAIN, launch, mpi_or_skip

pytestmark = pytest.mark.timeout(240)


def _death(stderr: str) -> float:
    m = re.search(r"train_digits: rank 1 exits at ([0-9.]+)", stderr)
    assert m, stderr[-3000:]
    return float(m[1])


def test_a_dead_rank_is_named_by_the_others_over_tcp():
    p = launch(["-n", "3", "--provider", "TCP", str(TRAIN), "--steps", "4", "--die-at", "1"],
               env={"TOLK_COLLECTIVES_TIMEOUT": "20"})
    ended = time.time()
    assert p.returncode == 7, p.stderr[-3000:]
    named = re.findall(r"CollectiveError: TCP: rank 1 closed the connection during allreduce", p.stderr)
    assert len(named) == 2, p.stderr[-3000:]  # rank 0 (the hub) found it, and told rank 2
    assert p.stderr.rstrip().splitlines()[-1] == "tolk launch: rank 1 of 3 exited with status 7"
    assert ended - _death(p.stderr) < 20.0  # the others raised at once (a closed socket), not at their timeout


def test_a_dead_rank_ends_the_mpi_job_within_30s():
    mpi_or_skip()
    p = launch(["-n", "2", "--provider", "MPI", str(TRAIN), "--steps", "4", "--die-at", "1"])
    ended = time.time()
    assert p.returncode != 0
    assert "tolk launch: rank 1 of 2 failed; mpiexec ended the job with status" in p.stderr, p.stderr[-3000:]
    assert ended - _death(p.stderr) < 30.0
