"""The tuning search's logic with a fake timer and clock: it finds a planted best plan, never takes a noisy
tie for a gain, refuses plans with wrong outputs, recovers from a poor start, and respects its cap. Plans are
points (a, b) of a grid; a plan's true time is a bowl around the planted best, each timing is it times a
random slowdown (other work on the machine only ever makes a run slower)."""
from __future__ import annotations

import functools
import random

import pytest

from tolk_core.tune.search import Limits, compare, noise, program_timer, search

BEST, START = (5, 6), (2, 2)


def neighbours(p):
    a, b = p
    return [(a + da, b + db) for da, db in ((1, 0), (-1, 0), (0, 1), (0, -1)) if 0 <= a + da < 8 and 0 <= b + db < 8]


def bowl(p):
    return 0.5 + 0.1 * abs(p[0] - BEST[0]) + 0.1 * abs(p[1] - BEST[1])


def noisy(true, seed, spread=0.03):
    rng = random.Random(seed)
    return lambda p: true(p) * (1 + rng.expovariate(1 / spread))


class Clock:
    """A fake clock that advances by what each timed launch costs (its time plus 10 ms of overhead)."""

    def __init__(self, timer):
        self.now, self.inner = 0.0, timer

    def __call__(self):
        return self.now

    def timer(self, p):
        t = self.inner(p)
        self.now += t + 0.01
        return t


def test_finds_the_planted_best_from_the_heuristics_pick():
    for seed in range(20):
        out = search(START, neighbours, noisy(bowl, seed), lambda p: True, Limits(width=2, runs=5, seconds=1e9))
        assert out.best == BEST, f"seed {seed}: stopped at {out.best}"
        assert out.gain == pytest.approx(bowl(START) / bowl(BEST), rel=0.1)
        assert not out.capped


def test_never_takes_a_noisy_tie_for_a_gain():
    flat = lambda p: 1.0  # noqa: E731 - every plan equally fast: any acceptance is noise
    for seed in range(100):
        out = search(START, neighbours, noisy(flat, seed, spread=0.04), lambda p: True, Limits(runs=5))
        assert out.best == START and out.gain == 1.0, f"seed {seed}: took {out.best} ({out.accepted})"


def test_a_plan_with_a_wrong_output_is_never_timed_nor_taken():
    timed = []

    def timer(p):
        timed.append(p)
        return bowl(p)
    out = search(START, neighbours, timer, lambda p: p != BEST, Limits(seconds=1e9))
    assert BEST in out.wrong and BEST not in timed
    assert out.best != BEST and bowl(out.best) == pytest.approx(0.6)  # one step from the refused best


def test_recovers_from_a_poor_start():
    poor = (0, 0)
    out = search(poor, neighbours, noisy(bowl, 7), lambda p: True, Limits(seconds=1e9))
    assert bowl(out.best) <= bowl(START) / 0.9  # at least 0.9 of the heuristic's speed
    assert out.best == BEST


def test_respects_its_cap():
    clock = Clock(noisy(bowl, 3))
    out = search(START, neighbours, clock.timer, lambda p: True, Limits(runs=5, seconds=2.0), clock=clock)
    assert out.capped
    one_candidate = 2 * 5 * (bowl(START) * 1.5 + 0.01)  # one comparison's launches, with slack for the noise
    confirm = one_candidate
    assert out.seconds <= 2.0 + one_candidate + confirm
    assert bowl(out.best) <= bowl(START)


def test_compare_accepts_past_margin_and_noise_only():
    lim = Limits(runs=4, margin=0.05)
    assert compare("a", "b", {"a": 1.0, "b": 0.9}.get, lim)[2]
    assert not compare("a", "b", {"a": 1.0, "b": 0.96}.get, lim)[2]

    def runs(best: list[float], cand: list[float]):
        seq = {"a": iter(best), "b": iter(cand)}
        return lambda p: next(seq[p])
    # the best's fastest time does not recur (its next-fastest run is 25% slower): a 10% win is noise
    assert not compare("a", "b", runs([1.0, 1.3, 1.25, 1.3], [0.9] * 4), lim)[2]
    # nor does the candidate's: its one fast run is noise too
    assert not compare("a", "b", runs([1.0] * 4, [0.9, 1.2, 1.2, 1.2]), lim)[2]
    # a kernel that sometimes runs twice as long (a thread woken late) but whose fastest time recurs: a 10% win
    # of a candidate that does the same is real
    assert compare("a", "b", runs([1.0, 2.0, 1.0, 2.0], [0.9, 1.8, 0.9, 1.8]), lim)[2]
    assert noise([1.0, 1.3, 1.3, 1.0]) == 0.0 and noise([1.0, 1.3, 1.2, 1.25]) == pytest.approx(0.2)


def test_limits_refuse_a_margin_under_five_percent():
    with pytest.raises(ValueError, match="at least 0.05"):
        Limits(margin=0.01)
    with pytest.raises(ValueError, match="runs >= 2"):
        Limits(runs=1)


class FakeProgram:
    """A Program under the devices' timing contract: `prg(*bufs, global_size=, local_size=, vals=, wait=)`
    returns seconds when wait=True."""

    def __init__(self, plan, seconds):
        self.plan, self.seconds, self.calls = plan, seconds, []

    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
        self.calls.append((bufs, global_size, vals, wait))
        return self.seconds if wait else None


def test_program_timer_times_through_the_timing_contract():
    built = {}

    def program(p):
        built[p] = FakeProgram(p, bowl(p))
        return functools.partial(built[p], "buf0", "buf1", global_size=(4, 1, 1), local_size=None, vals=(3,))
    out = search(START, neighbours, program_timer(program), lambda p: True, Limits(seconds=1e9))
    assert out.best == BEST
    prg = built[START]
    assert all(c == (("buf0", "buf1"), (4, 1, 1), (3,), True) for c in prg.calls) and len(prg.calls) > 5
    with pytest.raises(TypeError, match="returns its run time"):
        program_timer(lambda p: FakeProgram(p, None))(START)
