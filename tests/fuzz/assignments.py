"""Random assignments against numpy: a tensor of a random dtype and shape gets one to three writes — a basic
slice (steps, negative steps, ints), an integer-array scatter (repeated indices: the last write wins, as numpy's
`t[idx] = v`), or an accumulating `index_put_` (numpy's `np.add.at`) — of a scalar or a broadcast array, with
lazy readers of the old values built before each write. The final values and every reader must equal numpy's,
bit for bit."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.fuzz.programs import draw_input

_DTYPES = ("bool", "int8", "int32", "int64", "uint8", "uint32", "float16", "float32", "float64")
_SHAPES = ((5,), (4, 3), (2, 3, 4), (1, 6))


@dataclass
class Write:
    kind: str  # "slice", "scatter" or "accumulate"
    index: Any
    value: np.ndarray | Any


@dataclass
class Case:
    seed: int
    start: np.ndarray
    writes: list[Write] = field(default_factory=list)

    def text(self) -> str:
        return f"seed {self.seed}: {self.start.dtype}{list(self.start.shape)} <- " + \
            "; ".join(f"{w.kind}[{w.index!r}] = {w.value!r}" for w in self.writes)


def _slice(rng: np.random.Generator, n: int) -> slice | int:
    if rng.random() < 0.3:
        return int(rng.integers(-n, n))
    a, b = sorted(int(v) for v in rng.integers(-n, n + 1, 2))
    step = int(rng.choice([1, 1, 2, -1, -2]))
    return slice(a, b, step) if step > 0 else slice(b - 1 if b > a else None, a - 1 if a > 0 else None, step)


def _value(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> Any:
    """A Python scalar or an array of `shape`, or of a shape that broadcasts to it."""
    if rng.random() < 0.4:
        v = draw_input(rng, dtype, ())
        return v.item()
    cut = int(rng.integers(0, len(shape) + 1))
    return draw_input(rng, dtype, tuple(1 if i < cut and rng.random() < 0.5 else s for i, s in enumerate(shape))
                      [cut if rng.random() < 0.3 else 0:])


def make(seed: int) -> Case:
    rng = np.random.default_rng(10_000 + seed)
    dtype, shape = str(rng.choice(_DTYPES)), _SHAPES[int(rng.integers(len(_SHAPES)))]
    case = Case(seed, draw_input(rng, dtype, shape))
    for _ in range(int(rng.integers(1, 4))):
        kind = str(rng.choice(["slice", "scatter", "accumulate"] if dtype != "bool" else ["slice", "scatter"]))
        if kind == "slice":
            index = tuple(_slice(rng, s) for s in shape[:int(rng.integers(1, len(shape) + 1))])
            target = case.start[index].shape
        else:
            index = rng.integers(-shape[0], shape[0], int(rng.integers(1, 6)))
            target = (len(index), *shape[1:])
        if 0 in target:
            continue
        case.writes.append(Write(kind, index, _value(rng, dtype, target)))
    return case


def _np_value(v: Any, dtype: np.dtype) -> Any:
    return np.asarray(v).astype(dtype) if isinstance(v, np.ndarray) else np.asarray(v, dtype=dtype)


def expected(case: Case) -> tuple[np.ndarray, list[np.ndarray]]:
    """numpy's final array and, per write, the values a reader built just before it saw (`t * 1` of the old)."""
    t, readers = case.start.copy(), []
    for w in case.writes:
        readers.append(t.copy())
        if w.kind == "accumulate":
            np.add.at(t, w.index, _np_value(w.value, t.dtype))
        else:
            t[w.index] = _np_value(w.value, t.dtype)
    return t, readers


def _undefined(case: Case) -> bool:
    """Whether an accumulate overflows a signed integer (undefined in C, OpenCL C and CUDA: docs/dtypes.md):
    the exact sums, in Python ints, leave the dtype's range."""
    if case.start.dtype.kind != "i" or not any(w.kind == "accumulate" for w in case.writes):
        return False
    info, t = np.iinfo(case.start.dtype), case.start.astype(object)
    for w in case.writes:
        v = np.broadcast_to(np.asarray(w.value).astype(object) if isinstance(w.value, np.ndarray) else w.value,
                            np.shape(t[w.index]))
        if w.kind == "accumulate":
            np.add.at(t, w.index, v)
        else:
            t[w.index] = v
        if any(not info.min <= int(e) <= info.max for e in t.flat):
            return True
    return False


def _equal(case: Case, got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit, except float accumulates: several values added to one element may round in another
    order than numpy's one at a time (index_put_'s docstring), so within a few ulps of the dtype."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype.kind == "f" and any(w.kind == "accumulate" for w in case.writes):
        eps = float(np.finfo(got.dtype).eps)
        g, e = got.astype(np.float64), want.astype(np.float64)
        return bool(np.allclose(g, e, rtol=8 * eps, atol=8 * eps, equal_nan=True))
    if got.dtype.kind == "f":  # bit for bit but a NaN's payload (OpenCL's half loads may change it)
        g, e = got.astype(np.float64), want.astype(np.float64)
        nan = np.isnan(e)
        return bool((np.isnan(g) == nan).all()) and got[~nan].tobytes() == want[~nan].tobytes()
    return got.tobytes() == want.tobytes()


def mismatches(seeds, device: str) -> list[str]:
    """Each case of `seeds` run on `device`; the description of every case that differs from numpy."""
    from tolk_core.frontend.tensor import Tensor
    bad = []
    for s in seeds:
        case = make(s)
        if _undefined(case):
            continue
        with np.errstate(all="ignore"):
            want, want_readers = expected(case)
        t = Tensor(case.start, device=device)
        readers = []
        with np.errstate(all="ignore"):
            for w in case.writes:
                readers.append(t * 1 if t.dtype.name != "bool" else t | False)  # lazy, reads the old values
                value = Tensor(_np_value(w.value, case.start.dtype), device=device) \
                    if isinstance(w.value, np.ndarray) else w.value
                index = Tensor(w.index.astype(np.int32), device=device) if isinstance(w.index, np.ndarray) \
                    else w.index
                if w.kind == "accumulate":
                    t.index_put_(index, value, accumulate=True)
                else:
                    t[index] = value
        got = [t.numpy(), *(r.numpy() for r in readers)]
        for g, e in zip(got, [want, *want_readers], strict=True):
            if not _equal(case, g, e):
                bad.append(f"{case.text()}\n    got {g!r}\n    want {e!r}")
                break
    return bad
