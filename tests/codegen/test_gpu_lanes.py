"""GPU vector lanes and CPU-device launch shapes (codegen.optimize on OpenCL): the kernels compute what numpy
does, and the shapes pick the intended mechanism.

Every numeric case is built first and realized together (one compile per device). The shapes pick each path:
reductions over a contiguous axis (vector accumulators: sum, NaN-keeping max, int32, a where on bool lanes),
elementwise kernels (adjacent outputs per item, broadcast operands, a lane-free stored value, float math on
vectors), reduction kernels with contiguous outputs (column sums, matmul), one work item per row (softmax,
layernorm with a guard), and shapes that get no lanes (odd sizes, strided reads).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.frontend.helpers import check_cases_together, layernorm, np_layernorm, np_softmax
from tolk_core.codegen import KernelSource, generate
from tolk_core.codegen.optimize import _local_size
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device


def _cases(rng: np.random.Generator):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    rows, wide, col = f(64, 256), f(16, 64), f(16, 1)
    nan_rows = f(8, 64)
    nan_rows[1, 37], nan_rows[2, :] = np.nan, -np.inf
    ints = rng.integers(-50, 50, (32, 128)).astype(np.int32)
    sm, ln, odd, a, b = f(512, 64), f(300, 32), f(33, 17), f(64, 48), f(48, 96)
    return [
        ("row_sum", lambda T: T(rows).sum(axis=1), rows.sum(axis=1)),
        ("row_max_nan", lambda T: T(nan_rows).max(axis=1), nan_rows.max(axis=1)),
        ("int_row_sum", lambda T: T(ints).sum(axis=1), ints.sum(axis=1).astype(np.int32)),
        ("where_row_sum", lambda T: (T(rows) > 0).where(T(rows), 0.5).sum(axis=1),
         np.where(rows > 0, rows, np.float32(0.5)).sum(axis=1)),
        ("fma_broadcast", lambda T: T(wide) * T(wide[0]) + T(col), wide * wide[0] + col),
        ("fma_8_lanes", lambda T: T(wide[:, :24]) * 3 - T(wide[0, :24]), wide[:, :24] * 3 - wide[0, :24]),
        ("lane_free_store", lambda T: T(col).expand(16, 64).contiguous(), np.broadcast_to(col, (16, 64))),
        ("vector_math", lambda T: (T(wide).exp() + T(wide).abs().sqrt()).relu(),
         np.maximum(np.exp(wide) + np.sqrt(np.abs(wide)), 0)),
        ("column_sum", lambda T: T(rows).sum(axis=0), rows.sum(axis=0)),
        ("matmul", lambda T: T(a) @ T(b), a @ b),
        ("softmax_rows", lambda T: T(sm).softmax(-1), np_softmax(sm)),
        ("layernorm_guarded", lambda T: layernorm(T(ln)), np_layernorm(ln)),
        ("odd_row_sum", lambda T: T(odd).sum(axis=1), odd.sum(axis=1)),
        ("strided_elementwise", lambda T: T(wide)[:, ::2] * 2, wide[:, ::2] * 2),
    ]


def test_lane_kernels_match_numpy(device):
    check_cases_together(_cases(np.random.default_rng(0)), device, rtol=2e-4, atol=2e-4)


def _opencl_source(t: Tensor) -> KernelSource:
    linear, _, _ = schedule(target_for("OPENCL"), [t.uop])
    (call,) = linear.src
    return generate(call.src[0], Device["OPENCL"].renderer)


@pytest.fixture
def opencl_cpu():
    """The OPENCL device when it is a CPU device (PoCL): the launch-shape assertions are about that case."""
    from tests.conftest import _available
    ok, why = _available("OPENCL")
    if not ok:
        pytest.skip(why)
    if not Device["OPENCL"].renderer.cpu_threads:
        pytest.skip("the OPENCL device here is a GPU: the CPU-device launch shapes do not apply")
    return Device["OPENCL"]


def test_opencl_sources_use_vectors(opencl_cpu):
    T = lambda *s: Tensor(np.ones(s, np.float32), device="OPENCL")  # noqa: E731
    row_sum = _opencl_source(T(64, 256).sum(axis=1))
    assert "vload16(" in row_sum.source and "float16 acc" in row_sum.source
    elementwise = _opencl_source(T(16, 64) * 2 + 1)  # the widest vector dividing the axis
    assert "vstore16(" in elementwise.source and elementwise.global_size[0] * elementwise.local_size[0] >= 16 * 4
    assert "vstore8(" in _opencl_source(T(16, 24) * 2).source and "vstore4(" in _opencl_source(T(16, 12) * 2).source
    column_sum = _opencl_source(T(64, 256).sum(axis=0))  # 16 adjacent outputs per item, a vector accumulator
    assert "vstore16(" in column_sum.source and "float16 acc" in column_sum.source
    odd = _opencl_source(T(33, 17).sum(axis=1))
    assert "vload" not in odd.source


def test_opencl_row_kernels_run_one_item_per_row_on_a_cpu_device(opencl_cpu):
    many = _opencl_source(Tensor(np.ones((512, 64), np.float32), device="OPENCL").softmax(-1))
    assert "barrier" not in many.source and "get_global_id" in many.source and "vload8(" in many.source
    assert many.global_size[0] * many.local_size[0] == 512
    few = _opencl_source(Tensor(np.ones((8, 64), np.float32), device="OPENCL").softmax(-1))
    assert "barrier" in few.source  # too few rows to fill the threads: one group per row


def test_local_size_leaves_several_groups_per_cpu_thread():
    gpu = SimpleNamespace(local_max=256, cpu_threads=0)
    cpu = SimpleNamespace(local_max=256, cpu_threads=2)
    assert _local_size(gpu, 256, 64) == 64 and _local_size(gpu, 256, 1 << 20) == 256
    assert _local_size(cpu, 256, 64) == 8            # 8 groups: 4 per thread
    assert _local_size(cpu, 256, 1 << 20) == 256     # plenty of groups already
    assert _local_size(cpu, 256, 3) == 4             # never below CPU_MIN_LOCAL's worth of splitting
