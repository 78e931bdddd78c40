"""End-to-end programs with numpy references: the render tier renders and compiles them, the jit tier runs
them through the Tensor front end on the device under test and compares with numpy.

`check_cases` is the reusable part: it builds every case on a device and realizes them together (one compile
for the device), then compares each with its reference; a project can pass its own table (Tolk's own parity
cases run on PYTHON this way).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tolk_core.frontend.tensor import Tensor


@dataclass
class Case:
    """Inputs of `shapes` and `dtype` drawn uniformly from [low, high]; `fn` on Tensors, `ref` on arrays
    (default: `fn`). `needs` names the capabilities the case requires (e.g. "float64")."""
    shapes: list[tuple[int, ...]]
    fn: Callable
    ref: Callable | None = None
    dtype: type = np.float32
    low: float = -3.0
    high: float = 3.0
    needs: tuple[str, ...] = field(default_factory=tuple)


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _mlp(x, w1, b1, w2, b2):
    return (x @ w1 + b1).relu() @ w2 + b2 if isinstance(x, Tensor) else np.maximum(x @ w1 + b1, 0) @ w2 + b2


PROGRAMS: dict[str, Case] = {
    "add_broadcast": Case([(17, 1), (1, 23)], lambda a, b: a + b),
    "mul_sub_i32": Case([(31, 9), (9,)], lambda a, b: a * b - b, dtype=np.int32, low=-50, high=50),
    "div_f32": Case([(64,), (64,)], lambda a, b: a / (b * b + 1)),
    "compare_where": Case([(40,), (40,)], lambda a, b: (a < b).where(a, b * 2),
                          lambda a, b: np.where(a < b, a, b * 2)),
    "eq_bool_out": Case([(50,), (50,)], lambda a, b: a == b, dtype=np.int32, low=-2, high=2),
    "unary_math": Case([(300,)], lambda a: (a.exp() + a.sqrt() + a.log()).relu(),
                       lambda a: np.maximum(np.exp(a) + np.sqrt(a) + np.log(a), 0), low=0.1, high=4),
    "cast_f32_i32": Case([(100,)], lambda a: a.cast("int32"), lambda a: a.astype(np.int32), low=-100, high=100),
    "cast_f32_f64": Case([(100,)], lambda a: a.cast("float64") * 3, lambda a: a.astype(np.float64) * 3,
                         needs=("float64",)),
    "cast_f32_f16": Case([(100,)], lambda a: a.cast("float16") + 1, lambda a: a.astype(np.float16) + 1,
                         needs=("half",)),
    "sum_rows": Case([(33, 65)], lambda a: a.sum(axis=1), lambda a: a.sum(1)),
    "max_cols": Case([(33, 65)], lambda a: a.max(axis=0), lambda a: a.max(0)),
    "sum_all_big": Case([(257, 263)], lambda a: a.sum(), lambda a: a.sum(dtype=np.float64).astype(np.float32)),
    "empty_reduce": Case([(0, 4)], lambda a: a.sum(axis=0), lambda a: a.sum(0)),
    "views": Case([(8, 9)], lambda a: (a.T[1:, ::2].flip(1).pad(((1, 0), (0, 2))) * 2).sum(axis=0),
                  lambda a: (np.pad(np.flip(a.T[1:, ::2], 1), ((1, 0), (0, 2))) * 2).sum(0)),
    "permute_add": Case([(5, 7, 3), (3, 7, 5)], lambda a, b: a.permute(2, 1, 0) + b,
                        lambda a, b: a.transpose(2, 1, 0) + b),
    "matmul": Case([(17, 33), (33, 9)], lambda a, b: a @ b),
    "matmul_i32": Case([(9, 10), (10, 11)], lambda a, b: a @ b, dtype=np.int32, low=-5, high=5),
    "softmax": Case([(16, 100)], lambda a: a.softmax(), _softmax),
    "mlp": Case([(8, 64), (64, 32), (32,), (32, 10), (10,)], _mlp, low=-1, high=1),
}


def inputs(name: str, case: Case) -> list[np.ndarray]:
    """Deterministic inputs for a case (seeded by its name)."""
    rng = np.random.default_rng(sum(name.encode()) * 7919)
    if np.issubdtype(case.dtype, np.integer):
        return [rng.integers(int(case.low), int(case.high) + 1, size=s).astype(case.dtype) for s in case.shapes]
    return [rng.uniform(case.low, case.high, size=s).astype(case.dtype) for s in case.shapes]


def run_cases(device: str, cases: Mapping[str, Case],
              make_inputs: Callable[[str, Case], list[np.ndarray]] = inputs) -> dict[str, Tensor | Exception]:
    """Build every case on `device` (inputs from `make_inputs`) and realize them together; a case that fails to
    build or run maps to its error."""
    built: dict[str, Tensor | Exception] = {}
    for name, case in cases.items():
        try:
            built[name] = case.fn(*(Tensor(x, device=device) for x in make_inputs(name, case)))
        except Exception as e:  # noqa: BLE001 - reported by the case's own check
            built[name] = e
    tensors = [t for t in built.values() if isinstance(t, Tensor)]
    try:
        if tensors:
            tensors[0].realize(*tensors[1:])
    except Exception:  # noqa: BLE001 - one bad case must not hide the others: realize them one by one
        for name, t in built.items():
            if isinstance(t, Tensor):
                try:
                    t.realize()
                except Exception as e:  # noqa: BLE001
                    built[name] = e
    return built


def compare(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4, atol: float = 1e-4) -> str | None:
    """None when `got` matches `want` (exact for ints and bools, within tolerance for floats), else why not."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if np.issubdtype(want.dtype, np.floating):
        tol = 1e-2 if want.dtype == np.float16 else rtol
        if not np.allclose(got, want, rtol=tol, atol=max(atol, tol), equal_nan=True):
            return f"max abs error {np.nanmax(np.abs(got.astype(np.float64) - want)):.3g}"
        return None
    if not np.array_equal(got, want):
        return f"{int((got != want).sum())} of {want.size} elements differ"
    return None
