"""The data-parallel digits MLP (examples/distributed/train_digits.py) under `tolk launch`: its loss curve over
50 jitted steps equals one process's within float32 reduction-order tolerance, with the reference provider
(each rank building its batch from its own rows) and with tolk-mpi (ranks placed by a hostfile naming this
machine twice), at 2 and at 4 ranks (4 oversubscribe a 2-core host: about 7 s each here)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.distributed.conftest import TRAIN, launch, losses, mpi_or_skip

pytestmark = pytest.mark.timeout(300)
TOL = dict(rtol=2e-5, atol=2e-5)


def test_two_ranks_over_tcp_match_one_process(one_process, tmp_path):
    out = tmp_path / "losses.json"
    p = launch(["-n", "2", "--provider", "TCP", str(TRAIN), "--jit", "--local-data", "--out", str(out)])
    assert p.returncode == 0, p.stderr[-3000:]
    np.testing.assert_allclose(losses(out), one_process, **TOL)
    assert p.stdout.count("step ") == 6  # rank 0 prints (steps 0, 10, .., 40 and 49); rank 1 does not


def test_two_ranks_over_mpi_from_a_hostfile_match_one_process(one_process, tmp_path):
    mpi_or_skip()
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\nlocalhost\n")
    out = tmp_path / "losses.json"
    p = launch(["-n", "2", "--provider", "MPI", "--hostfile", str(hosts), str(TRAIN), "--jit", "--out", str(out)])
    assert p.returncode == 0, p.stderr[-3000:]
    assert "--oversubscribe" not in p.stderr  # two slots for two ranks: no flag needed
    np.testing.assert_allclose(losses(out), one_process, **TOL)


@pytest.mark.parametrize("provider", ["TCP", "MPI"])
def test_four_ranks_match_one_process(one_process, tmp_path, provider):
    if provider == "MPI":
        mpi_or_skip()
    out = tmp_path / "losses.json"
    p = launch(["-n", "4", "--provider", provider, str(TRAIN), "--jit", "--out", str(out)], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    np.testing.assert_allclose(losses(out), one_process, **TOL)
