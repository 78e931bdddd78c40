"""Gradients against finite differences of tolk's own forward pass, for every rule and composite op.

Each case is a function of one or more inputs. Its scalar objective is f(x) = sum(fn(x) * R) with fixed random
weights R, so every output element matters. The check is directional: for two random directions v,
(f(x + h v) - f(x - h v)) / 2h must equal sum_i <grad_i, v_i>. Both sides come from tolk; every case of one
(device, dtype) is built first and realized together, so each run compiles once.

Inputs avoid kinks: where an op is not smooth (relu, abs, maximum, minimum, max/min reductions, where), inputs
stay at least 0.2 from the kink and 0.1 from each other, beyond the step h * |v| (ties have their own exact
tests in test_rules.py).

Tolerances, |fd - analytic| <= atol + rtol * |analytic|: float64 (h = 1e-5): rtol 1e-5, atol 1e-6 (central
differences are accurate to ~h^2, roundoff ~1e-16 / h). float32 (h = 1e-2): rtol 2e-2, atol 2e-3 (roundoff
~1e-7 * |f| / h ~ 1e-4 for |f| ~ 10; truncation ~h^2 times the third derivative).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.nn import functional as F


@dataclass
class Case:
    fn: Callable[..., Tensor]
    shapes: tuple[tuple[int, ...], ...]
    kind: str = "any"        # any | pos | away (|x| in [0.2, 1.2], random sign) | distinct (spaced values)
    needs: str | None = None  # a Tensor method this case needs (added by the ops branch)
    f32_only: bool = False    # a cast through float32 loses float64's precision


def _alu(op: Op) -> Callable[[Tensor], Tensor]:
    return lambda x: x._alu(op)


def _method(name: str, *args, **kw) -> Callable[[Tensor], Tensor]:
    return lambda x: getattr(x, name)(*args, **kw)


CASES: dict[str, Case] = {
    # binary arithmetic and their UOp rules
    "add": Case(lambda a, b: a + b, ((3, 4), (3, 4))),
    "add_broadcast": Case(lambda a, b: a + b, ((3, 4), (4,))),
    "sub": Case(lambda a, b: a - b, ((3, 4), (1, 4))),
    "SUB_uop": Case(lambda a, b: a._alu(Op.SUB, b), ((3, 4), (3, 4))),
    "mul": Case(lambda a, b: a * b, ((3, 4), (3, 1))),
    "div": Case(lambda a, b: a / b, ((3, 4), (3, 4)), "pos"),
    "rdiv_scalar": Case(lambda a: 2.0 / a, ((5,),), "pos"),
    "neg": Case(lambda a: -a, ((2, 3),)),
    # unary maths
    "exp": Case(lambda a: a.exp(), ((2, 3),)),
    "log": Case(lambda a: a.log(), ((2, 3),), "pos"),
    "sqrt": Case(lambda a: a.sqrt(), ((2, 3),), "pos"),
    "EXP2_uop": Case(_alu(Op.EXP2), ((4,),)),
    "LOG2_uop": Case(_alu(Op.LOG2), ((4,),), "pos"),
    "SIN_uop": Case(_alu(Op.SIN), ((2, 3),)),
    "RECIPROCAL_uop": Case(_alu(Op.RECIPROCAL), ((4,),), "pos"),
    "sin": Case(_method("sin"), ((2, 3),), needs="sin"),
    "cos": Case(_method("cos"), ((2, 3),), needs="cos"),
    "tanh": Case(F.tanh, ((2, 3),)),
    "sigmoid": Case(F.sigmoid, ((2, 3),)),
    "gelu": Case(F.gelu, ((2, 3),)),
    "silu": Case(F.silu, ((2, 3),)),
    "relu": Case(lambda a: a.relu(), ((3, 4),), "away"),
    "abs": Case(_method("abs"), ((3, 4),), "away", needs="abs"),
    "maximum": Case(lambda a, b: a.maximum(b), ((12,), (12,)), "distinct"),
    "minimum": Case(lambda a, b: a.minimum(b), ((12,), (12,)), "distinct"),
    # quotients stay within (1, 2): fmod's trunc(a / b) is constant there, no jump in reach of the differences
    "mod": Case(lambda a, b: (a * 0.1 + 5.0) % (b * 0.1 + 3.0), ((3, 4), (3, 4)), "away"),
    "where": Case(lambda a, b: (a > 0).where(a * 2, b * b), ((3, 4), (3, 4)), "away"),
    "cast": Case(lambda a: a.cast(dtypes.float64).exp().cast(a.dtype), ((5,),), f32_only=True),
    # reductions
    "sum": Case(lambda a: a.sum(), ((3, 4),)),
    "sum_axis": Case(lambda a: a.sum(axis=1, keepdim=True), ((3, 4, 2),)),
    "mean": Case(lambda a: a.mean(axis=0), ((3, 4),)),
    "max": Case(lambda a: a.max(axis=1), ((3, 4),), "distinct"),
    "max_all": Case(lambda a: a.max(), ((3, 4),), "distinct"),
    "min": Case(lambda a: a.min(axis=0), ((3, 4),), "distinct"),
    # movement
    "reshape": Case(lambda a: a.reshape(4, 3) * a.reshape(4, 3).exp(), ((3, 4),)),
    "permute": Case(lambda a: a.permute(2, 0, 1), ((2, 3, 4),)),
    "transpose_matmul": Case(lambda a: a.T @ a, ((3, 4),)),
    "expand": Case(lambda a: a.expand(3, 4) * Tensor(np.arange(12.0).reshape(3, 4), dtype=a.dtype,
                                                         device=a.device), ((1, 4),)),
    "pad": Case(lambda a: a.pad(((1, 2), (0, 1))), ((2, 3),)),
    "pad_value": Case(lambda a: a.pad(((1, 0),), value=3.0) * a.pad(((0, 1),)), ((4,),)),
    "shrink": Case(lambda a: a.shrink(((1, 3), (0, 2))), ((3, 4),)),
    "flip": Case(lambda a: a.flip(1) * a, ((2, 3),)),
    "getitem": Case(lambda a: a[1:, ::2] * a[:-1, 1::2], ((3, 4),)),
    "getitem_negative_step": Case(lambda a: a[::-1, 2], ((3, 4),)),
    "cat": Case(lambda a, b: a.cat(b, dim=1), ((2, 3), (2, 2)), needs="cat"),
    "stack": Case(lambda a, b: a.stack(b, dim=0), ((2, 3), (2, 3)), needs="stack"),
    "contiguous": Case(lambda a: (a * 2).contiguous().exp(), ((3,),)),
    "contiguous_backward": Case(lambda a: (a * a).contiguous_backward().sum(axis=0), ((3, 2),)),
    # composites
    "matmul": Case(lambda a, b: a @ b, ((3, 4), (4, 5))),
    "matmul_batched": Case(lambda a, b: a @ b, ((2, 3, 4), (4, 2))),
    "matvec": Case(lambda a, b: a @ b, ((3, 4), (4,))),
    "softmax": Case(lambda a: a.softmax(axis=-1), ((3, 5),)),
    "log_softmax": Case(lambda a: F.log_softmax(a, axis=0), ((3, 5),)),
    "layernorm": Case(lambda a: F.layernorm(a), ((3, 6),)),
    "cross_entropy": Case(lambda a: F.cross_entropy(a, Tensor(np.array([0, 2, 1], np.int32), device=a.device)),
                          ((3, 4),)),
    "conv2d": Case(lambda x, w, b: F.conv2d(x, w, b), ((2, 2, 5, 5), (3, 2, 3, 3), (3,))),
    "conv2d_stride_pad": Case(lambda x, w: F.conv2d(x, w, stride=2, padding=1), ((1, 2, 5, 4), (2, 2, 3, 2))),
    "conv2d_dilation": Case(lambda x, w: F.conv2d(x, w, dilation=2), ((1, 1, 6, 6), (2, 1, 2, 2))),
}


def _inputs(rng: np.random.Generator, case: Case) -> list[np.ndarray]:
    out = []
    for j, shape in enumerate(case.shapes):
        n = math.prod(shape)
        if case.kind == "pos":
            a = rng.uniform(0.5, 2.0, n)
        elif case.kind == "away":
            a = rng.uniform(0.2, 1.2, n) * rng.choice([-1.0, 1.0], n)
        elif case.kind == "distinct":  # shuffled values 0.3 apart; input j offset by 0.1 j: all >= 0.09 apart
            a = rng.permutation(n) * 0.3 - 0.15 * n + 0.1 * j + rng.uniform(0, 0.01, n)
        else:
            a = rng.standard_normal(n)
        out.append(a.reshape(shape))
    return out


H = {dtypes.float64: 1e-5, dtypes.float32: 1e-2}
TOL = {dtypes.float64: (1e-5, 1e-6), dtypes.float32: (2e-2, 2e-3)}  # (rtol, atol)
DIRECTIONS = 2


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
def test_gradients_match_finite_differences(device, dtype) -> None:
    if dtype == dtypes.float32 and device != "CPU":
        pytest.skip("float32 tolerances are shown on CPU; other devices are checked in float64 (tighter), which "
                    "they support, to keep the suite's compile time down")
    rng = np.random.default_rng(0)
    npdt = dtypes.to_np(dtype)
    h = H[dtype]
    pending: dict[str, tuple[list[Tensor], list[np.ndarray], list[Tensor], list[Tensor]]] = {}
    for name, case in CASES.items():
        if case.needs and not hasattr(Tensor, case.needs):
            continue  # reported by test_op_surface_present
        if case.f32_only and dtype != dtypes.float32:
            continue
        xs = _inputs(rng, case)
        ts = [Tensor(x.astype(npdt), device=device).requires_grad_() for x in xs]
        out = case.fn(*ts)
        weights = Tensor(rng.standard_normal(out.shape).astype(npdt), device=device)
        (out * weights).sum().backward()
        dirs = [[rng.standard_normal(x.shape) for x in xs] for _ in range(DIRECTIONS)]
        shifted = []
        for v in dirs:
            for sign in (1, -1):
                moved = [Tensor((x + sign * h * d).astype(npdt), device=device) for x, d in zip(xs, v, strict=True)]
                shifted.append((case.fn(*moved) * weights).sum())
        grads = [t.grad for t in ts]
        assert all(g is not None for g in grads), f"{name}: an input got no gradient"
        pending[name] = (grads, [np.stack([d[i] for d in dirs]) for i in range(len(xs))], shifted, ts)
    every = [t for grads, _, shifted, _ in pending.values() for t in (*grads, *shifted)]
    every[0].realize(*every[1:])
    rtol, atol = TOL[dtype]
    failures = []
    for name, (grads, dirs, shifted, _) in pending.items():
        for k in range(DIRECTIONS):
            analytic = sum(float((g.numpy().astype(np.float64) * d[k]).sum()) for g, d in zip(grads, dirs,
                                                                                            strict=True))
            fd = (shifted[2 * k].item() - shifted[2 * k + 1].item()) / (2 * h)
            if not abs(fd - analytic) <= atol + rtol * abs(analytic):
                failures.append(f"{name}: finite difference {fd:.8g} vs gradient {analytic:.8g} (direction {k})")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.needs])
def test_op_surface_present(name) -> None:
    """Every Tensor method a gradient case needs exists and is callable, so no case above is left out."""
    assert callable(getattr(Tensor, CASES[name].needs, None)), f"Tensor.{CASES[name].needs} is missing"
