"""Two nested output ranges that every access walks as one run become one range (codegen/merge_ranges.py), which the
CPU matmul plan then tiles: a 1 x 1 convolution's rows and columns. Checked on the kernel ASTs (merged where the run
is contiguous, left alone where a stride or a gate reads the pair otherwise) and by values against torch at sizes
that fill no tile."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.codegen import merge_ranges
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import AxisType, Op

torch = pytest.importorskip("torch", reason="torch is not installed: the reference convolution")


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _kernels(t: Tensor) -> list:
    linear, _, _ = schedule(target_for("CPU"), [t.uop])
    return [call.src[0] for call in linear.src]


def _last_two_output_ranges(ast) -> tuple:
    outs = list(dict.fromkeys(r for top in ast.src if top.op is Op.END for r in top.src[1:] if r.op is Op.RANGE))
    assert all(r.arg[1] is not AxisType.REDUCE for r in outs)
    return outs[-2], outs[-1]


def test_a_1x1_convolution_walks_its_rows_and_columns_as_one_run() -> None:
    (ast,) = _kernels(Tensor(_rand(1, 8, 5, 7)).conv2d(Tensor(_rand(4, 8, 1, 1, seed=1))))
    outer, inner = _last_two_output_ranges(ast)
    merged = merge_ranges.merge(ast, outer, inner)
    assert merged is not None
    new, whole = merged
    assert whole.src[0].arg == 35
    assert outer not in new.toposort() and inner not in new.toposort()
    assert not any(u.op in (Op.IDIV, Op.MOD) for u in new.toposort())


def test_a_padded_3x3_convolution_is_left_alone() -> None:
    # its input rows are two wider than its output rows: the pair is not one run
    (ast,) = [k for k in _kernels(Tensor(_rand(1, 8, 5, 7)).conv2d(Tensor(_rand(4, 8, 3, 3, seed=1)), padding=1))
              if any(u.op is Op.REDUCE for u in k.toposort())]
    outer, inner = _last_two_output_ranges(ast)
    assert merge_ranges.merge(ast, outer, inner) is None


@pytest.mark.parametrize("xs, ws", [((2, 8, 5, 7), (4, 8, 1, 1)), ((1, 33, 14, 14), (20, 33, 1, 1)),
                                    ((3, 16, 3, 3), (24, 16, 1, 1)), ((1, 5, 1, 9), (7, 5, 1, 1))])
def test_1x1_convolutions_with_bias_and_relu_match_torch(xs, ws) -> None:
    x, w, b = _rand(*xs), _rand(*ws, seed=1), _rand(ws[0], seed=2)
    got = Tensor(x).conv2d(Tensor(w), Tensor(b)).relu().numpy()
    ref = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)))
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-4)
