"""Parity of every core Tensor operation with numpy, on every available compiled device.

All cases of this module are built first and realized together, so each device compiles them in one
translation unit (one C file, one OpenCL program) instead of one compiler call per test. Each case is still
its own test with its own failure message.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.frontend.helpers import close, realized_case, seeded_inputs
from tolk_core.testing.programs import Case

BIG = (257, 263)  # 67591 elements: past 2^16, odd in both axes, so every remainder path runs


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


CASES: dict[str, Case] = {}


def add(name: str, *shapes, fn, ref=None, dtype=np.float32, low=-3.0, high=3.0) -> None:
    CASES[name] = Case(list(shapes), fn, ref, dtype, low, high)


for dt, tag in ((np.float32, "f32"), (np.int32, "i32")):
    for shape_tag, sa, sb in (("odd", (17, 1), (1, 23)), ("big", BIG, BIG), ("vec", (1023,), (1,)),
                              ("empty", (0, 5), (1, 5)), ("one", (1, 1), (1,))):
        add(f"add_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a + b, dtype=dt)
        add(f"sub_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a - b, dtype=dt)
        add(f"mul_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a * b, dtype=dt)
        add(f"max_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a.maximum(b), ref=np.maximum, dtype=dt)
        add(f"min_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a.minimum(b), ref=np.minimum, dtype=dt)
        add(f"lt_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a < b, dtype=dt)
        add(f"ge_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a >= b, dtype=dt)
        add(f"eq_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a == b, dtype=dt, low=-2, high=2)
        add(f"ne_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a != b, dtype=dt, low=-2, high=2)
        add(f"where_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: (a < b).where(a, b * 2),
            ref=lambda a, b: np.where(a < b, a, b * 2), dtype=dt)
        add(f"neg_{tag}_{shape_tag}", sa, fn=lambda a: -a, dtype=dt)
        add(f"relu_{tag}_{shape_tag}", sa, fn=lambda a: a.relu(), ref=lambda a: np.maximum(a, 0), dtype=dt)
        add(f"scalar_{tag}_{shape_tag}", sa, fn=lambda a: 2 * a + 1, dtype=dt)
        add(f"div_{tag}_{shape_tag}", sa, sb, fn=lambda a, b: a / (b * b + 1),
            ref=lambda a, b: (a / (b * b + 1)).astype(np.float32), dtype=dt)
        add(f"sum_{tag}_{shape_tag}", sa, fn=lambda a: a.sum(axis=-1), dtype=dt)
        add(f"sum_all_{tag}_{shape_tag}", sa, fn=lambda a: a.sum(), dtype=dt)
        if sa[0]:  # max/min over an empty axis is an error in numpy and in tolk
            add(f"rmax_{tag}_{shape_tag}", sa, fn=lambda a: a.max(axis=0, keepdim=True),
                ref=lambda a: a.max(axis=0, keepdims=True), dtype=dt)
            add(f"rmin_{tag}_{shape_tag}", sa, fn=lambda a: a.min(axis=-1), ref=lambda a: a.min(axis=-1), dtype=dt)
            add(f"mean_{tag}_{shape_tag}", sa, fn=lambda a: a.mean(axis=0),
                ref=lambda a: a.mean(axis=0, dtype=np.float64).astype(np.float32), dtype=dt)
    add(f"cast_{tag}", BIG, fn=lambda a: a.cast("int32") if a.dtype.name == "float32" else a.cast("float32"),
        ref=lambda a: a.astype(np.int32) if a.dtype == np.float32 else a.astype(np.float32), dtype=dt)

for shape_tag, s in (("odd", (17, 5)), ("big", BIG), ("vec", (1023,))):
    add(f"exp_{shape_tag}", s, fn=lambda a: a.exp(), ref=np.exp)
    add(f"log_{shape_tag}", s, fn=lambda a: a.log(), ref=np.log, low=0.1, high=5)
    add(f"sqrt_{shape_tag}", s, fn=lambda a: a.sqrt(), ref=np.sqrt, low=0.0, high=5)
    add(f"fused_{shape_tag}", s, s, s, fn=lambda a, b, c: ((a * b + c).relu()).sum(),
        ref=lambda a, b, c: np.maximum(a * b + c, 0).sum(dtype=np.float64).astype(np.float32))

# non-contiguous views as inputs to compute
add("permuted_add", (5, 7, 3), (3, 7, 5), fn=lambda a, b: a.permute(2, 1, 0) + b,
    ref=lambda a, b: a.transpose(2, 1, 0) + b)
add("transpose_big", BIG, fn=lambda a: a.T * 2, ref=lambda a: a.T * 2)
add("sliced", (40, 37), fn=lambda a: a[3:31:2, ::-3] + 1, ref=lambda a: a[3:31:2, ::-3] + 1)
add("sliced_neg", (40, 37), fn=lambda a: a[-5:, -1] * 3, ref=lambda a: a[-5:, -1] * 3)
add("int_index", (4, 5, 6), fn=lambda a: a[1, :, 2] + a[2, 3, :5])
add("flipped", (13, 17), fn=lambda a: a.flip(0) - a.flip((0, 1)), ref=lambda a: np.flip(a, 0) - np.flip(a, (0, 1)))
add("padded", (13, 17), fn=lambda a: a.pad(((1, 2), (3, 0))) * 2, ref=lambda a: np.pad(a, ((1, 2), (3, 0))) * 2)
add("padded_value", (5, 6), fn=lambda a: a.pad(((2, 2), (0, 1)), value=-1.5),
    ref=lambda a: np.pad(a, ((2, 2), (0, 1)), constant_values=-1.5))
add("padded_sum", BIG, fn=lambda a: a.pad(((1, 1), (2, 2))).sum(axis=1),
    ref=lambda a: np.pad(a, ((1, 1), (2, 2))).sum(1))
add("shrink", (10, 11), fn=lambda a: a.shrink(((2, 7), (0, 11))) + 1, ref=lambda a: a[2:7] + 1)
add("reshape", (6, 35), fn=lambda a: a.reshape(3, -1, 7).sum(axis=1), ref=lambda a: a.reshape(3, -1, 7).sum(1))
add("reshape_of_permute", (6, 10), fn=lambda a: a.T.reshape(5, 12) + 1, ref=lambda a: a.T.reshape(5, 12) + 1)
add("expand", (1, 7), fn=lambda a: a.expand(9, 7) * 1, ref=lambda a: np.broadcast_to(a, (9, 7)) * 1)
add("transpose_fn", (3, 4, 5), fn=lambda a: a.transpose(0, 2) + 0, ref=lambda a: a.swapaxes(0, 2) + 0)
add("size1_axes", (1, 5, 1), (7, 1, 1), fn=lambda a, b: (a * b).sum(axis=(0, 2)),
    ref=lambda a, b: (a * b).sum(axis=(0, 2)))
add("keepdim_neg_axis", (4, 6, 8), fn=lambda a: a.sum(axis=(-1, 0), keepdim=True),
    ref=lambda a: a.sum(axis=(-1, 0), keepdims=True))
add("empty_reduce", (0, 4), fn=lambda a: a.sum(axis=0), ref=lambda a: a.sum(0))
add("sum_then_add", (33, 65), (33,), fn=lambda a, b: a.sum(axis=1) + b, ref=lambda a, b: a.sum(1) + b)
add("nested_reduce", (6, 7, 8), fn=lambda a: a.sum(axis=2).max(axis=1), ref=lambda a: a.sum(2).max(1))
# composites
add("matmul", (17, 33), (33, 9), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b)
add("matmul_big", (64, 1031), (1031, 65), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b, low=-1, high=1)
add("matmul_batched", (3, 1, 5, 8), (4, 8, 6), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b)
add("matmul_vec", (8,), (8, 5), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b)
add("matmul_i32", (9, 10), (10, 11), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b, dtype=np.int32)
add("softmax", (64, 1000), fn=lambda a: a.softmax(), ref=np_softmax)
add("softmax_axis0", (31, 5), fn=lambda a: a.softmax(axis=0), ref=lambda a: np_softmax(a, 0))
add("chain_of_views", (8, 9), fn=lambda a: (a.T[1:, ::2].flip(1).pad(((1, 0), (0, 2))) * 2).sum(axis=0),
    ref=lambda a: (np.pad(np.flip(a.T[1:, ::2], 1), ((1, 0), (0, 2))) * 2).sum(0))

_inputs = seeded_inputs  # other suites (conformance, CUDA render) rebuild these cases


@pytest.mark.parametrize("name", sorted(CASES))
def test_parity(device: str, name: str) -> None:
    case = CASES[name]
    got = realized_case(CASES, device, name)
    want = (case.ref or case.fn)(*_inputs(name, case))
    close(got.numpy(), np.asarray(want))


def test_cases_cover_big_sizes() -> None:
    assert sum(1 for c in CASES.values() if any(math.prod(s) >= 1 << 16 for s in c.shapes)) >= 20
