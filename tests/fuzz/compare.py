"""Running fuzzer programs on a device and judging them against numpy (tests/fuzz/programs.py).

Exact nodes must match bit for bit (NaN matches any NaN; -0.0 does not match 0.0). The inexact root is
judged within a bound:
  * a transcendental function within `ULP_BOUNDS[name]` units in the last place of the correctly rounded
    result (a table kept conservative until docs/dtypes.md states each function's bound);
  * a float sum within n*eps*sum|x| of the float64 sum (eps of the accumulation dtype, float32 for half
    dtypes), plus half a unit of the result's dtype; a mean within that over n; a product within 2n*eps
    relative, plus n times the smallest normal.
Mismatches in a class another change is fixing are listed in `KNOWN_OPEN` (see `known_open`; empty now).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import ml_dtypes
import numpy as np

from tests.fuzz.programs import (
    TRANSCENDENTAL,
    Node,
    Program,
    build,
    is_float,
    is_inexact,
    np_dtype,
    reference,
)

# ULPs each transcendental function may be off by: the bounds docs/dtypes.md states (its "ULP bounds" table)
ULP_BOUNDS = {"exp": 64, "log": 2, "exp2": 3, "log2": 1, "sin": 2, "cos": 2, "tanh": 3, "sigmoid": 64,
              "rsqrt": 2, "pow": 128, **dict.fromkeys(("asin", "acos", "atan", "sinh", "cosh", "tan", "asinh", "acosh",
                                                        "atanh"), 4)}


def _ordered(x: np.ndarray) -> np.ndarray:
    """Float bits mapped to integers that order like the floats (+0 and -0 both 0): ULP distance is the
    difference."""
    bits = x.view({2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]).astype(np.int64)
    return np.where(bits < 0, -(bits & ((1 << (8 * x.dtype.itemsize - 1)) - 1)), bits)


def _bits_equal(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    if is_float(want.dtype):
        nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
        ui = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
        return nan | (got.view(ui) == want.view(ui))
    return got == want


def _eps(dt: str) -> float:
    return float(ml_dtypes.finfo(np_dtype(dt)).eps)


def _within(got: np.ndarray, want64: np.ndarray, bound: np.ndarray, dt: str) -> np.ndarray:
    """Where `got` equals a non-finite reference exactly, or lies within `bound` of a finite one (a reference
    beyond the dtype's range may round to an infinity of its sign)."""
    g = got.astype(np.float64)
    big = float(ml_dtypes.finfo(np_dtype(dt)).max)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (np.isnan(g) & np.isnan(want64)) | (g == want64)
        overflow = np.isinf(g) & np.isfinite(want64) & (np.abs(want64) + bound >= big) & (np.sign(g) == np.sign(want64))
        return same | overflow | (np.abs(g - want64) <= bound)


def _inexact_ok(node: Node, got: np.ndarray, want64: np.ndarray, inputs: list[np.ndarray]) -> np.ndarray:
    out = np_dtype(node.dtype)
    if node.op in TRANSCENDENTAL:
        with np.errstate(all="ignore"):
            rounded = want64.astype(out)
        ulps = np.abs(_ordered(got) - _ordered(rounded))
        nan = np.isnan(got.astype(np.float64)) & np.isnan(rounded.astype(np.float64))
        return nan | (ulps <= ULP_BOUNDS[node.op]) & (np.isnan(got.astype(np.float64)) == np.isnan(want64))
    x = reference(node.kids[0], inputs)[0].astype(np.float64)
    axis = node.arg[0]
    n = x.shape[axis]
    eps = _eps("float32" if node.dtype in ("float16", "bfloat16") else node.dtype)
    acc = ml_dtypes.finfo(np.float32 if node.dtype in ("float16", "bfloat16") else out)
    with np.errstate(all="ignore"):
        half_ulp = np.abs(want64) * _eps(node.dtype) + float(ml_dtypes.finfo(out).smallest_subnormal)
        a = np.abs(x)
        if node.op == "prod":
            bound = 2 * n * eps * np.abs(want64) + n * float(ml_dtypes.finfo(out).smallest_normal) + half_ulp
            # a partial product leaving the accumulator's range depends on the order of multiplication
            hi, lo = np.prod(np.where(a > 1, a, 1), axis=axis), np.prod(np.where((a < 1) & (a > 0), a, 1), axis=axis)
            order_free = (hi <= float(acc.max)) & (lo >= float(acc.smallest_normal))
        else:
            total = np.sum(np.where(np.isfinite(a), a, 0), axis=axis)
            bound = n * eps * total / (n if node.op == "mean" else 1) + half_ulp
            order_free = total <= float(acc.max)  # a partial sum may overflow in some orders only
    return _within(got, want64, bound, node.dtype) | ~order_free


def judge(program: Program, got: np.ndarray) -> str | None:
    """None when `got` (Tolk's value of the program) matches numpy, else what differs."""
    root = program.root
    want, defined = reference(root, program.inputs)
    got = np.asarray(got)
    if got.shape != root.shape:
        return f"shape {got.shape} != {root.shape}"
    if got.dtype != np_dtype(root.dtype):
        return f"dtype {got.dtype} != {np_dtype(root.dtype)}"
    ok = _inexact_ok(root, got, want, program.inputs) if is_inexact(root) else _bits_equal(got, want)
    bad = defined & ~ok
    if not bad.any():
        return None
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    return f"{int(bad.sum())} of {bad.size} differ; at {list(i)} got {got[i]!r}, want {want[i]!r}"


# ---------------------------------------------------------------- classes being fixed elsewhere (none now)

def _nodes(node: Node) -> Iterable[Node]:
    yield node
    for k in node.kids:
        yield from _nodes(k)


KNOWN_OPEN: dict[str, Callable[[Program], bool]] = {}
"""Mismatch classes with a fix under way (name -> whether a program falls in it): a failing program in one of
these classes is reported as known, not as a failure. Empty: every class found so far is fixed; add one only
with its fix in progress, and delete it when the fix lands."""


def known_open(p: Program) -> str | None:
    return next((name for name, hit in KNOWN_OPEN.items() if hit(p)), None)


# ---------------------------------------------------------------- running on a device

def _dtype_ok(p: Program, device: str) -> bool:
    from tolk_core.ir.dtype import dtypes
    from tolk_core.plugins import Device
    renderer = Device[device].renderer
    return all(renderer.supports(getattr(dtypes, n.dtype)) for n in _nodes(p.root))


def run(programs: list[Program], device: str) -> dict[int, str]:
    """Each program's verdict on `device` (seed -> what differs, or the error it raised), realizing all of
    them together so their kernels compile in one batch. Programs the device cannot compute are left out."""
    from tolk_core.testing.programs import Case, run_cases
    by_seed = {str(p.seed): p for p in programs if _dtype_ok(p, device)}
    cases = {s: Case([], lambda *ts, p=p: build(p.root, list(ts))) for s, p in by_seed.items()}
    results = run_cases(device, cases, lambda name, case: by_seed[name].inputs)
    verdicts: dict[int, str] = {}
    for s, got in results.items():
        try:
            why = got if isinstance(got, Exception) else judge(by_seed[s], got.numpy())
        except Exception as e:  # noqa: BLE001 - reading back is part of the program's run
            why = e
        if why is not None:
            verdicts[int(s)] = why if isinstance(why, str) else f"raised {type(why).__name__}: {why}"
    return verdicts


# ---------------------------------------------------------------- minimizing a failing program

def _replace(node: Node, target: Node, new: Node) -> Node:
    if node is target:
        return new
    return Node(node.op, tuple(_replace(k, target, new) for k in node.kids), node.arg, node.dtype, node.shape)


def _compact(p: Program) -> Program:
    """The program with only the inputs its tree still reads, renumbered in order of use."""
    order: dict[int, int] = {}

    def renumber(n: Node) -> Node:
        if n.op == "input":
            return Node("input", (), order.setdefault(n.arg, len(order)), n.dtype, n.shape)
        return Node(n.op, tuple(renumber(k) for k in n.kids), n.arg, n.dtype, n.shape)
    root = renumber(p.root)
    return Program(p.seed, root, [p.inputs[i] for i in order])


def _candidates(p: Program) -> Iterable[Program]:
    """Smaller programs: a node replaced by a kid of the same dtype and shape, or by an input holding its
    numpy value."""
    for n in _nodes(p.root):
        if n.op == "input" or n is p.root:
            continue
        for k in n.kids:
            if (k.dtype, k.shape) == (n.dtype, n.shape):
                yield _compact(Program(p.seed, _replace(p.root, n, k), p.inputs))
        value, defined = reference(n, p.inputs)
        if defined.all() and not is_inexact(n):
            leaf = Node("input", (), len(p.inputs), n.dtype, n.shape)
            yield _compact(Program(p.seed, _replace(p.root, n, leaf), [*p.inputs, np.asarray(value)]))


def minimize(p: Program, device: str, budget: int = 60) -> Program:
    """A smaller program failing the same way on `device` (the same verdict's first words), trying at most
    `budget` candidates."""
    first = run([p], device).get(p.seed, "")
    if not first:  # it fails only among other programs (in a batch): nothing to minimize alone
        return p
    kind = first.split(";")[0].split(" of ")[0] if first.startswith("raised") else "differ"
    tried = 0
    improved = True
    while improved and tried < budget:
        improved = False
        for c in _candidates(p):
            tried += 1
            why = run([c], device).get(c.seed)
            if why is not None and (kind in why) and known_open(c) is None:
                p, improved = c, True
                break
            if tried >= budget:
                break
    return p
