"""The collectives tier against tolk-core's TCP reference, one job per case (spawned local ranks), and a broken
provider fixture failing the right check with a named message. The whole file takes well under a minute."""
from __future__ import annotations

import os

import pytest

from tolk_core.testing.collectives import failures, run_job

pytestmark = pytest.mark.timeout(120)
ENV = {**os.environ, "TOLK_COLLECTIVES": "TCP"}
QUICK = ["--dtypes", "bool,int8,uint64,float16,bfloat16,float64", "--no-big"]
TINY = ["--dtypes", "bool,uint64,bfloat16", "--no-big"]  # 3 ranks: the odd count, on a small grid (time)


def _checks(reps):
    return {res["name"] for rep in reps for res in rep["results"]}


@pytest.mark.parametrize("n, extra", [(2, []), (3, TINY), (4, QUICK[:2])],
                         ids=["2ranks", "3ranks-quick", "4ranks-quick"])
def test_tier_passes_on_the_reference(n, extra, tmp_path):
    reps = run_job(n, tmp_path, args=["--provider", "TCP", *extra], env=ENV)
    assert failures(reps) == []
    names = _checks(reps)
    assert "persistent_replay_new_data" in names and "error_on_one_rank_reaches_every_rank" in names
    assert ("allreduce_sum[float32-2^22]" in names) == ("--no-big" not in extra)
    want = {"allreduce_min[bfloat16-strided]", "reduce_scatter_max[uint64-strided]", f"broadcast[bool-root{n - 1}]",
            "allreduce_sum[bool-out]", "allreduce_sum[bool-overlap]", "allreduce_max[bool-inplace]"}
    assert want <= names


def test_hang_and_exit_on_one_rank_reach_the_others(tmp_path):
    hang = run_job(2, tmp_path / "hang", args=["--case", "hang", "--timeout", "2"], env=ENV)
    assert failures(hang) == [] and {r["results"][0]["name"] for r in hang} == {
        "hang_on_one_rank_reaches_the_others", "hang_rank"}
    gone = run_job(3, tmp_path / "exit", args=["--case", "exit", "--timeout", "3"], env=ENV)
    assert failures(gone, skip_ranks=[2]) == []
    assert [res["ok"] for rep in gone[:2] for res in rep["results"]] == [True, True]


def test_a_broken_provider_fails_the_right_check_by_name(tmp_path):
    env = {**ENV, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), ENV.get("PYTHONPATH", "")])}
    reps = run_job(2, tmp_path, args=["--group", "broken_collectives:join", "--dtypes", "int32,float32", "--no-big"],
                   env=env)
    bad = failures(reps)
    assert bad and all(":allreduce_max[" in b.replace(" ", "") or "allreduce_max[" in b for b in bad), bad
    assert any("allreduce max" in b and "Mismatched elements" in b for b in bad)
