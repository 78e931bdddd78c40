"""Tier collectives: one launched job per rank count runs every check in every rank (tolk_core.testing.collectives).

    pytest --pyargs tolk_core.testing -m collectives --tolk-collectives MPI --tolk-ranks 2,4 \\
           --tolk-launcher 'mpiexec -n {n} --oversubscribe'
"""
from __future__ import annotations

import os
import shlex

import pytest

from tolk_core.testing.collectives import failures, run_job

pytestmark = pytest.mark.collectives


def _launcher(config: pytest.Config, n: int) -> list[str] | None:
    cmd = config.getoption("--tolk-launcher")
    return shlex.split(cmd.format(n=n)) if cmd else None


def _env(name: str) -> dict[str, str]:
    return {**os.environ, "TOLK_COLLECTIVES": name}


def test_every_operation_and_dtype_equals_numpy(request, tolk_collectives_name, tolk_ranks, tmp_path):
    reps = run_job(tolk_ranks, tmp_path, launcher=_launcher(request.config, tolk_ranks),
                   args=["--provider", tolk_collectives_name], env=_env(tolk_collectives_name))
    assert failures(reps) == []
    assert all(rep["size"] == tolk_ranks for rep in reps), "the launched job has another size than asked"


def test_a_hanging_rank_times_out_on_the_others(request, tolk_collectives_name, tmp_path):
    reps = run_job(2, tmp_path, launcher=_launcher(request.config, 2), env=_env(tolk_collectives_name),
                   args=["--provider", tolk_collectives_name, "--case", "hang", "--timeout", "2"])
    assert failures(reps) == []
