"""search: find a kernel plan faster than the heuristic's, defensively (docs/tuning.md).

The search walks the space of the optimizer's own choices (`tolk_core.codegen.choices.Choices`) from the
heuristic's pick, a beam of the `width` best plans at a time. It trusts a timing only against a baseline
measured in the same moment: each candidate is timed in `runs` pairs interleaved with re-timing the current
best, each side's time is the minimum of its runs (the least disturbed by other work on the machine), and the
candidate is accepted only when it beats the best by more than `margin` (at least 5%) and by more than the noise
of the minimum on either side in that window (`noise`: the second-fastest run over the fastest). A candidate whose
output differs
from the heuristic kernel's is never timed. Caps bound the search by wall time: the clock is read before each
candidate, so the search ends within one candidate's timing of its cap and says it was capped.

Everything the search touches comes in as functions (the candidates' neighbours, one timed launch, the output
check, the clock), so its logic is tested with a fake timer and clock (tests/tune/test_search.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True)
class Limits:
    """How hard to search: beam `width`, interleaved timing pairs per comparison `runs`, acceptance `margin`
    (relative, at least 0.05), and the wall-time cap `seconds`."""
    width: int = 2
    runs: int = 5
    margin: float = 0.05
    seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.width < 1 or self.runs < 2:
            raise ValueError(f"a search needs width >= 1 and runs >= 2, not width={self.width}, runs={self.runs}")
        if not self.margin >= 0.05:
            raise ValueError(f"the acceptance margin must be at least 0.05 (5%), not {self.margin}: a smaller one "
                             "accepts noise as a gain")


@dataclass
class Outcome(Generic[C]):
    """What a search found: `best` (the start when nothing beat it), its time and the start's, both from the
    final window that compared them (`_confirm`); the candidates timed, refused for a wrong output, accepted on
    the way; whether a cap ended it, and the seconds it took."""
    best: C
    best_s: float
    start_s: float
    timed: int = 0
    wrong: list[C] = field(default_factory=list)
    accepted: list[tuple[C, float]] = field(default_factory=list)
    capped: bool = False
    seconds: float = 0.0

    @property
    def gain(self) -> float:
        """The start's time over the best's: 1.0 when the search kept the start."""
        return self.start_s / self.best_s if self.best_s > 0 else 1.0


def noise(samples: list[float]) -> float:
    """How far the minimum of repeated timings of one kernel can be trusted: the second-fastest run over the
    fastest, minus one. The comparison is of minima, so what matters is whether the fastest time recurs: a
    two-thread kernel on a shared machine runs either at full speed or, when a thread wakes late, up to twice as
    long, and the spread of all runs (their median over their minimum, the measure used before) then exceeded
    the 15-17% a better register tile gains, which the search refused (docs/tuning.md, "Noise")."""
    low, second = sorted(samples)[:2]
    return second / low - 1 if low > 0 else 0.0


def compare(best: C, cand: C, timer: Callable[[C], float], limits: Limits) -> tuple[float, float, bool]:
    """Time `cand` against `best` in `limits.runs` interleaved pairs (the order alternating, so neither always
    runs on a cache warmed by the other): (best's minimum, candidate's minimum, whether the candidate wins by
    more than the margin and the noise of either minimum)."""
    bs: list[float] = []
    cs: list[float] = []
    for i in range(limits.runs):
        if i % 2:
            cs.append(timer(cand))
            bs.append(timer(best))
        else:
            bs.append(timer(best))
            cs.append(timer(cand))
    b, c = min(bs), min(cs)
    return b, c, c < b * (1 - max(limits.margin, noise(bs), noise(cs)))


def search(start: C, neighbours: Callable[[C], Iterable[C]], timer: Callable[[C], float],
           same_output: Callable[[C], bool], limits: Limits = Limits(),
           clock: Callable[[], float] = time.monotonic) -> Outcome[C]:
    """The fastest plan found from `start` (see the module docstring). `timer(c)`: one launch of plan `c`, in
    seconds, at the kernel's real size on its device; `same_output(c)`: whether `c` computes the start's values
    on the real inputs; `neighbours(c)`: the plans one choice away from `c`."""
    t0 = clock()
    first = [timer(start) for _ in range(limits.runs)]
    out: Outcome[C] = Outcome(start, min(first), min(first))
    beam, seen = [start], {start}
    while beam:
        scored: list[tuple[float, C]] = []
        for cand in _fresh(beam, neighbours, seen):
            if clock() - t0 >= limits.seconds:
                out.capped = True
                break
            if not same_output(cand):
                out.wrong.append(cand)
                continue
            out.timed += 1
            b, c, wins = compare(out.best, cand, timer, limits)
            if wins:
                scored.append((c, cand))
                out.accepted.append((cand, b / c))
                out.best, out.best_s = cand, c
        if out.capped:
            break
        beam = [c for _, c in sorted(scored, key=lambda sc: sc[0])[:limits.width]]
    _confirm(out, start, timer, limits)
    out.seconds = clock() - t0
    return out


def _confirm(out: Outcome[C], start: C, timer: Callable[[C], float], limits: Limits) -> None:
    """Time the best found against the start once more, in one window: the gain reported is that window's, and
    a best that does not beat the start there (a win by a run of luck) is dropped for the start."""
    if out.best == start:
        return
    s, b, wins = compare(start, out.best, timer, limits)
    out.start_s, out.best_s = s, b
    if not wins:
        out.best, out.best_s = start, s


def _fresh(beam: list[C], neighbours: Callable[[C], Iterable[C]], seen: set[C]) -> list[C]:
    """The neighbours of the beam's plans not tried before, in order, each once (and marked tried)."""
    fresh: list[C] = []
    for b in beam:
        for n in neighbours(b):
            if n not in seen:
                seen.add(n)
                fresh.append(n)
    return fresh


def program_timer(program: Callable[[C], Callable[..., Any]]) -> Callable[[C], float]:
    """A `timer` over the devices' timing contract: `program(c)` is plan `c`'s loaded Program bound to its
    buffers and launch sizes (built once per plan); it is called with `wait=True`, which returns the kernel's
    run time in seconds (docs/plugins.md, Program)."""
    built: dict[C, Callable[..., Any]] = {}

    def timer(c: C) -> float:
        if c not in built:
            built[c] = program(c)
        took = built[c](wait=True)
        if took is None:
            raise TypeError(f"plan {c!r}: its Program returned None for wait=True: a Program launched with "
                            "wait=True returns its run time in seconds (docs/plugins.md)")
        return float(took)
    return timer
