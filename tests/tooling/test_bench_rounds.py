"""bench.rounds: the children the model benchmark times in alternating rounds answer each round, merge to one
record per mode, and a child that dies or stalls becomes an error record naming its phase."""
from __future__ import annotations

import os
import textwrap

import pytest

from bench.rounds import Child, ChildFailed, merge_rounds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE = textwrap.dedent("""
    import sys, time
    from bench.rounds import serve
    def main():
        how = sys.argv[2]
        print("phase: build", file=sys.stderr, flush=True)
        if how == "die":
            raise RuntimeError("the build broke")
        if how == "stall":
            time.sleep(60)
        calls = []
        def timer(reps, min_s, budget_s):
            calls.append(reps)
            return {"times": [0.001 * (len(calls) + i) for i in range(reps)], "per_step": {"kernels": 2.0}}
        serve({"first_step_s": 0.5}, {"eager": timer}, lambda: {"calls": calls})
    if __name__ == "__main__":
        main()
""")


@pytest.fixture
def fake(tmp_path):
    (tmp_path / "fake_child.py").write_text(FAKE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    return lambda how, timeout_s=30.0: Child("fake_child", [how], env, str(tmp_path), timeout_s)


@pytest.mark.timeout(60)
def test_rounds_are_answered_in_order_and_merge(fake) -> None:
    child = fake("ok")
    try:
        assert child.read() == {"ready": {"first_step_s": 0.5}}
        rounds = [child.ask("time eager 3 0.1 1.0"), child.ask("time eager 2 0.1 1.0")]
        assert child.ask("finish") == {"calls": [3, 2]}
    finally:
        child.close()
    merged = merge_rounds(rounds)
    times = [0.001, 0.002, 0.003, 0.002, 0.003]
    assert merged["steps"] == 5 and merged["rounds"] == 2
    assert merged["median_s"] == pytest.approx(sorted(times)[2]) and merged["best_s"] == pytest.approx(0.001)
    assert merged["per_step"] == {"kernels": pytest.approx(2.0)}


@pytest.mark.timeout(60)
def test_a_child_that_dies_names_its_phase_and_error(fake) -> None:
    child = fake("die")
    with pytest.raises(ChildFailed) as e:
        child.read()
    child.close()
    assert e.value.record["status"] == "failed"
    assert "phase 'build'" in e.value.record["error"] and "the build broke" in e.value.record["error"]


@pytest.mark.timeout(60)
def test_a_child_that_stalls_times_out(fake) -> None:
    child = fake("stall", timeout_s=2.0)
    with pytest.raises(ChildFailed) as e:
        child.read()
    child.close()
    assert e.value.record == {"error": "timeout after 2 s in phase 'build'", "status": "timeout"}
