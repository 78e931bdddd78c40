"""Full unrolling of short reduction loops is bounded per loop nest: the loops fully unrolled along any one
nest copy the body at most UNROLL_MAX times (nested full unrolls multiply, and a C compiler given ~30,000
copies of a body does not finish). Checked on the plans of nested reductions, and the kernels still compute
numpy's values."""
from __future__ import annotations

import math

import numpy as np
import pytest
from tolk_cpu.renderer import CRenderer

from tolk_core import Tensor
from tolk_core.codegen.optimize import UNROLL_MAX, optimize
from tolk_core.ir.ops import Op
from tolk_core.render.renderer import LoopKind
from tolk_core.testing import kernels

CASES = {
    "one reduce over three short axes": (lambda a: a.sum(axis=(1, 2, 3)), (8, 3, 6, 5)),
    "a reduce inside a reduce": (lambda a: a.sum(axis=2).max(axis=1), (8, 6, 6)),
    "six short axes": (lambda a: a.sum(axis=(1, 2, 3, 4, 5, 6)), (2, 3, 6, 6, 5, 3, 4)),
}


def _nests(ast):
    """Every chain of reduction ranges from an outermost loop inward: the ranges of each REDUCE in order,
    continued by the chains of the REDUCEs in its body."""
    reduces = [u for u in ast.toposort() if u.op is Op.REDUCE]

    def chains(red):
        own = [r for r in red.src[1:] if r.op is Op.RANGE]
        inner = [u for u in red.src[0].toposort() if u.op is Op.REDUCE]
        return [own + c for i in inner for c in chains(i)] or [own]
    return [c for red in reduces for c in chains(red)]


@pytest.mark.parametrize("name", CASES)
def test_unrolled_loops_along_a_nest_copy_the_body_at_most_unroll_max_times(name):
    fn, shape = CASES[name]
    asts = [call.src[0].simplify() for call in kernels.build(fn, (shape, "float32")).calls]
    unrolled_any = False
    for ast in asts:
        plan = optimize(ast, CRenderer())
        for nest in _nests(plan.ast):
            trips = [int(r.src[0].arg) for r in nest if plan.loop_kinds.get(r) is LoopKind.UNROLL]
            unrolled_any |= bool(trips)
            assert math.prod(trips) <= UNROLL_MAX, f"{name}: nest unrolled {trips} times over"
    assert unrolled_any, f"{name}: no short loop was unrolled at all"


@pytest.mark.parametrize("name", CASES)
def test_nested_reductions_compute_numpys_values(name):
    fn, shape = CASES[name]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ref = fn(x.astype(np.float64))  # float32 sums in another order differ by rounding: compare with float64
    np.testing.assert_allclose(fn(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-3)
