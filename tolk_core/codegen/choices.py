"""choices: the optimizer's tunable choices, which a search may set per kernel (docs/tuning.md).

The optimizer's heuristics read a few numbers: how many vector accumulators a CPU register tile holds, how much
work pays for a thread team, how many copies of a loop body full unrolling may make, a GPU work item's tile and
a work group's size. Each is a module constant (optimize.py) that the optimizer reads through `knob(name,
default)`: the value a `Choices` in effect sets (`using(choices)`), else the constant. With no choices in effect
(every kernel not tuned) the optimizer plans exactly as its heuristics say.

`KNOBS` lists each knob's candidate values; `neighbours` the choices one step away, for the search. A `Choices`
is hashable plain data, so it keys caches and the search's table of tried plans.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

# knob -> its candidate values, ascending; which devices it matters on: "cpu" (no local memory) or "gpu"
KNOBS: dict[str, tuple[tuple[int, ...], str]] = {
    "MAX_ACCUMULATORS": ((4, 8, 16, 32), "cpu"),            # vector accumulators of a register tile
    "PARALLEL_MIN_WORK": ((1 << 14, 1 << 17, 1 << 20, 1 << 23), "cpu"),  # work that pays for a thread team
    "UNROLL_MAX": ((1, 4, 16), "cpu"),                      # copies of a body full unrolling may make
    "MATMUL_MR": ((4, 6, 8, 12), "cpu"),                    # rows of a matmul's register tile (0: from registers)
    "MATMUL_NR_VECTORS": ((1, 2, 3, 4), "cpu"),             # vectors per row of that tile (0: from registers)
    "MATMUL_NC": ((64, 128, 256, 512), "cpu"),              # columns of a packed B panel (0: half the L2 cache)
    "MATMUL_KC": ((64, 128, 256, 512), "cpu"),              # depth of a block of a matmul's k (0: from the L1)
    "MATMUL_PACK_B": ((1,), "cpu"),                         # 1: always copy B into panels (0: unless it fits L2/2)
    "MATMUL_DOT_ROWS": ((0, 8, 32, 128), "cpu"),            # rows at most for the dot plan of x @ W.T (0: never)
    "GPU_BLOCK": ((2, 4, 8, 16), "gpu"),                    # a work item's tile side
    "GPU_LOCAL": ((32, 64, 128, 256), "gpu"),               # work items per group
    "GPU_VECTOR_ACCUMULATORS": ((4, 8, 16, 32), "gpu"),     # vector accumulators of a work item's tile
}


@dataclass(frozen=True)
class Choices:
    """Knob values set for one kernel, as sorted (name, value) pairs; the knobs not set keep their defaults."""
    values: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(mapping: dict[str, int]) -> Choices:
        unknown = sorted(set(mapping) - set(KNOBS))
        if unknown:
            raise ValueError(f"unknown optimizer choice(s) {unknown}: the knobs are {sorted(KNOBS)}")
        return Choices(tuple(sorted(mapping.items())))

    def get(self, name: str, default: int) -> int:
        return next((v for k, v in self.values if k == name), default)

    def with_value(self, name: str, value: int) -> Choices:
        return Choices.of({**dict(self.values), name: value})

    def as_dict(self) -> dict[str, int]:
        return dict(self.values)


def parse(text: str) -> Choices:
    """Choices written `KNOB=V[,KNOB=V...]` (the TUNE_START setting); ValueError naming what is wrong."""
    values: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        if not eq or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"{part!r} is not KNOB=INTEGER: write choices as e.g. 'MAX_ACCUMULATORS=4,UNROLL_MAX=1'")
        values[name.strip()] = int(value)
    return Choices.of(values)


_NONE = Choices()
_current: contextvars.ContextVar[Choices | None] = contextvars.ContextVar("tolk_optimizer_choices", default=None)


def knob(name: str, default: int) -> int:
    """The value of optimizer knob `name` for the kernel being planned: the choices in effect, else `default`."""
    c = _current.get()
    return default if c is None else c.get(name, default)


def current() -> Choices:
    """The choices in effect (empty: the heuristics' own)."""
    return _current.get() or _NONE


@contextlib.contextmanager
def using(choices: Choices) -> Iterator[None]:
    """Plan kernels with `choices` inside the block."""
    token = _current.set(choices)
    try:
        yield
    finally:
        _current.reset(token)


def neighbours(c: Choices, defaults: dict[str, int], kind: str) -> list[Choices]:
    """The choices one step from `c`: each knob of device `kind` ("cpu" or "gpu") moved to the next smaller
    or larger of its candidate values (the default counts as a candidate), every other knob as in `c`."""
    out: list[Choices] = []
    for name, (values, where) in KNOBS.items():
        if where != kind:
            continue
        now = c.get(name, defaults[name])
        ladder = sorted({*values, defaults[name]})
        i = ladder.index(now) if now in ladder else 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(ladder):
                out.append(c.with_value(name, ladder[j]))
    return out
