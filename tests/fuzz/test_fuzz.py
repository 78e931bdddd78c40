"""The differential fuzzer's fixed seeds: random expression programs (tests/fuzz/programs.py) on each compiled
device against numpy (tests/fuzz/compare.py), plus every seed that ever failed (regressions.json); the
gradients of the differentiable ones against torch (tests/fuzz/gradients.py); random assignments against
numpy (tests/fuzz/assignments.py).

All of a device's programs are realized together, so their kernels compile in one batch. OPENCL runs a
smaller share: PoCL builds each kernel separately (about half a second each on two cores), so the full list
would not fit the test budget; `make fuzz` explores more seeds on every device.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.fuzz.compare import known_open, run
from tests.fuzz.programs import generate

REGRESSIONS = json.loads((Path(__file__).parent / "regressions.json").read_text())["seeds"]
CI_SEEDS = {"CPU": range(500), "OPENCL": range(0, 500, 8)}


def _failures(device: str, seeds) -> list[str]:
    programs = {s: generate(s) for s in seeds}
    verdicts = run(list(programs.values()), device)
    assert set(verdicts) <= set(programs)
    return [f"{programs[s].text()}\n    -> {why}" for s, why in sorted(verdicts.items())
            if known_open(programs[s]) is None]


def test_fixed_seeds(device) -> None:
    failures = _failures(device, sorted({*CI_SEEDS[device], *REGRESSIONS}))
    assert not failures, f"{len(failures)} program(s) differ from numpy on {device}:\n" + "\n".join(failures)


def test_programs_cover_the_surface() -> None:
    """The generator draws every op and dtype within 2000 seeds, so a family cannot drop out unseen."""
    from tests.fuzz.compare import _nodes
    ops, dts = set(), set()
    for s in range(2000):
        for n in _nodes(generate(s).root):
            ops.add(n.op)
            dts.add(n.dtype)
    from tests.fuzz.programs import BINARY, COMPARE, DTYPES, INEXACT_REDUCE, MOVES, TRANSCENDENTAL, UNARY
    want = {*UNARY, *BINARY, *COMPARE, *MOVES, *TRANSCENDENTAL, *INEXACT_REDUCE, "where", "cast", "gather",
            "max", "min", "any", "all", "argmax", "argmin", "input"}
    assert want <= ops, f"never drawn: {sorted(want - ops)}"
    assert set(DTYPES) == dts


def test_judge_rejects_a_changed_element() -> None:
    """The judge can fail: numpy's own answer passes, and with one defined element changed it does not."""
    import numpy as np

    from tests.fuzz.compare import judge
    from tests.fuzz.programs import is_inexact, reference
    checked = 0
    for s in range(60):
        p = generate(s)
        want, defined = reference(p.root, p.inputs)
        if is_inexact(p.root) or not defined.any():
            continue
        assert judge(p, want) is None, p.text()
        wrong = want.copy()
        i = tuple(int(j) for j in np.argwhere(defined)[0])
        wrong[i] = np.logical_not(wrong[i]) if wrong.dtype == bool else (1 if wrong[i] != 1 else 2)
        assert judge(p, wrong) is not None, p.text()
        checked += 1
    assert checked > 20


# every differentiable program among these seeds (about one in eleven) also has its gradients checked
GRADIENT_SEEDS = {"CPU": range(1000), "OPENCL": range(0, 3000, 40)}


def test_gradients_match_torch(device) -> None:
    import pytest
    pytest.importorskip("torch", reason="the gradients are compared with torch's")
    from tests.fuzz.gradients import gradient_mismatches
    checked, bad = gradient_mismatches(GRADIENT_SEEDS[device], device)
    assert checked >= (60 if device == "CPU" else 4), checked
    assert not bad, f"{len(bad)} program(s) whose gradients differ from torch's on {device}:\n" + "\n".join(bad)


def test_the_gradient_check_can_fail(monkeypatch) -> None:
    import pytest
    pytest.importorskip("torch", reason="the gradients are compared with torch's")
    from tests.fuzz import gradients
    monkeypatch.setitem(gradients._ELEMENTWISE, "mul", lambda t: t[0] * t[1] * 1.01)  # torch's side, changed
    _, bad = gradients.gradient_mismatches(range(1000), "CPU")
    assert bad and all("mul(" in b for b in bad)


ASSIGNMENT_SEEDS = {"CPU": range(200), "OPENCL": range(0, 200, 5)}


def test_random_assignments_match_numpy(device) -> None:
    from tests.fuzz.assignments import mismatches
    bad = mismatches(ASSIGNMENT_SEEDS[device], device)
    assert not bad, f"{len(bad)} assignment case(s) differ from numpy on {device}:\n" + "\n".join(bad)


def test_the_assignment_judge_can_fail(monkeypatch) -> None:
    from tests.fuzz import assignments
    real = assignments.expected

    def off_by_one(case):  # numpy's side, changed: one more write of the first value
        final, readers = real(case)
        final = final.copy()
        final.flat[0] = np.logical_not(final.flat[0]) if final.dtype == bool else final.flat[0] + 1
        return final, readers
    monkeypatch.setattr(assignments, "expected", off_by_one)
    assert len(assignments.mismatches(range(10), "CPU")) >= 5  # (not where the first element is NaN or inf)
