"""frontend/nodes.py builds float formulas as nodes: each of its operations must make exactly the node the Tensor
operator of the same name makes (so a composite written either way is one graph, the same interned objects),
and the composites built on it keep numpy's values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tolk_core import Tensor
from tolk_core.frontend.nodes import Nodes

# each operation twice: on Nodes and on Tensors; `a`, `b` float operands of one shape, `m` a bool mask
CASES = {
    "add": lambda a, b, m: a + b, "add scalar": lambda a, b, m: a + 2.5, "radd": lambda a, b, m: 1 + a,
    "sub": lambda a, b, m: a - b, "sub scalar": lambda a, b, m: a - 3, "rsub": lambda a, b, m: 1 - a,
    "mul": lambda a, b, m: a * b, "mul scalar": lambda a, b, m: a * -2, "rmul": lambda a, b, m: 0.5 * a,
    "div": lambda a, b, m: a / b, "div scalar": lambda a, b, m: a / 7, "rdiv": lambda a, b, m: 1 / a,
    "neg": lambda a, b, m: -a, "lt": lambda a, b, m: a < b, "lt scalar": lambda a, b, m: a < 0,
    "gt scalar": lambda a, b, m: a > 0.25, "where": lambda a, b, m: m.where(a, b),
    "where scalar else": lambda a, b, m: m.where(a, 1.0), "where scalar then": lambda a, b, m: m.where(0, b),
    "exp": lambda a, b, m: a.exp(), "abs": lambda a, b, m: a.abs(), "reciprocal": lambda a, b, m: a.reciprocal(),
    "sqrt": lambda a, b, m: a.sqrt(),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_operation_makes_the_tensor_operators_node(name, dtype):
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((3, 5)).astype(dtype)) * 1  # lazy values: nodes, not storage
    b = Tensor(rng.standard_normal((3, 5)).astype(dtype)) + 0
    m = a < b
    fn = CASES[name]
    want = fn(a, b, m)
    got = fn(Nodes(a.uop, a.shape), Nodes(b.uop, b.shape), Nodes(m.uop, m.shape))
    assert got.u is want.uop, f"{name}: {got.u.op} vs {want.uop.op}"
    assert got.u.dtype == want.dtype and got.shape == want.shape


def _sigmoid_np(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("fn, ref", [
    (lambda t: t.sigmoid(), _sigmoid_np),
    (lambda t: t.tanh(), np.tanh),
    (lambda t: t.silu(), lambda x: x * _sigmoid_np(x)),
    (lambda t: t.gelu(), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
])
def test_composites_keep_numpys_values_at_edges(fn, ref):
    x = np.array([-np.inf, -100.0, -20.0, -1.0, -0.3, -1e-5, -0.0, 0.0, 1e-5, 0.3, 1.0, 20.0, 100.0, np.inf, np.nan],
                 np.float32)
    got = fn(Tensor(x)).numpy()
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(np.signbit(got[np.isfinite(want) & (want == 0)]),
                                  np.signbit(want[np.isfinite(want) & (want == 0)]))
