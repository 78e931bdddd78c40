"""Parity of every Tensor op with numpy, on every available compiled device, by subject as the front end is
organised: construction, movement, elementwise, reductions, indexing, nn ops (random draws: test_random.py).

Where numpy has no equivalent, the reference is written out with torch's semantics and says so: `var`/`std`
(correction=1), `gelu` (tanh approximation), `squeeze` of a non-1 axis (a no-op), `conv2d` (cross-correlation
with stride/padding/dilation/groups), `log_softmax`, `layernorm`.

All cases are built first and realized together, so each device compiles them in one translation unit (one C
file, one OpenCL program) instead of one compiler call per test; each case is still its own test with its own
failure message. Inputs come from a generator seeded by the case name (crc32: stable across processes). Ops run
on float32, int32 and bool where meaningful, on non-contiguous views (permuted, sliced, flipped, padded), a
size-0 axis, odd sizes, and on 2^16+ elements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from tests.frontend.helpers import close, realized_case, seeded_inputs
from tolk_core.frontend.tensor import Tensor
from tolk_core.testing import programs

BIG = (257, 263)  # 67591 elements: past 2^16, odd in both axes, so every remainder path runs
F32, I32, BOOL = np.float32, np.int32, np.bool_


@dataclass
class Case(programs.Case):
    """A parity case: `programs.Case` (`fn` on Tensors, `ref` on arrays, `fn` when None) and `close`'s
    tolerances for it."""
    tol: dict = field(default_factory=dict)


CASES: dict[str, Case] = {}


def add(name: str, *shapes, fn, ref=None, dtype=F32, low=-3.0, high=3.0, **tol) -> None:
    assert name not in CASES, name
    CASES[name] = Case(list(shapes), fn, ref, dtype, low, high, tol=tol)


# views applied identically (in meaning) to a Tensor and a numpy array of shape (9, 10)
VIEWS = {
    "perm": (lambda t: t.permute(1, 0), lambda a: a.transpose(1, 0)),
    "slice": (lambda t: t[1:8, ::3], lambda a: a[1:8, ::3]),
    "flip": (lambda t: t.flip(0), lambda a: np.flip(a, 0)),
    "pad": (lambda t: t.pad(((1, 0), (2, 1))), lambda a: np.pad(a, ((1, 0), (2, 1)))),
}
SHAPES = {"odd": (17, 5), "empty": (0, 5), "big": BIG}


def _on_views(f, t):
    """f on every view of VIEWS, flattened and concatenated: one fused kernel covers all four views."""
    outs = [f(tv(t)).flatten() for tv, _ in VIEWS.values()]
    return outs[0].cat(*outs[1:])


def unary(name: str, fn, ref, dtypes=(F32,), low=-3.0, high=3.0, **tol) -> None:
    for dt in dtypes:
        tag = np.dtype(dt).name
        for sname, shape in SHAPES.items():
            add(f"{name}_{tag}_{sname}", shape, fn=fn, ref=ref, dtype=dt, low=low, high=high, **tol)
        add(f"{name}_{tag}_views", (9, 10), fn=lambda t, f=fn: _on_views(f, t),
            ref=lambda a, f=ref: np.concatenate([f(nv(a)).reshape(-1) for _, nv in VIEWS.values()]),
            dtype=dt, low=low, high=high, **tol)


def binary(name: str, fn, ref, dtypes=(F32,), low=-3.0, high=3.0, **tol) -> None:
    for dt in dtypes:
        tag = np.dtype(dt).name
        add(f"{name}_{tag}_bcast", (17, 1), (1, 23), fn=fn, ref=ref, dtype=dt, low=low, high=high, **tol)
        add(f"{name}_{tag}_big", BIG, BIG, fn=fn, ref=ref, dtype=dt, low=low, high=high, **tol)
        add(f"{name}_{tag}_empty", (0, 5), (1, 5), fn=fn, ref=ref, dtype=dt, low=low, high=high, **tol)
        add(f"{name}_{tag}_views", (9, 10), (10, 9), fn=lambda a, b, f=fn: f(a.flip(1)[::2], b.permute(1, 0)[::2]),
            ref=lambda a, b, f=ref: f(np.flip(a, 1)[::2], b.T[::2]), dtype=dt, low=low, high=high, **tol)


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_gelu_tanh(x):  # torch.nn.functional.gelu(x, approximate="tanh")
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def np_divmod(a, b):
    """numpy's floor // and %, with integer division by zero giving 0 (numpy's value, minus its warning)."""
    with np.errstate(all="ignore"):
        return a // b, a % b


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# operand shapes of the core ops: odd sizes broadcast, 2^16+ elements, a vector and a scalar-like, a size-0
# axis, size-1 axes
CORE_SHAPES = (("odd", (17, 1), (1, 23)), ("big", BIG, BIG), ("vec", (1023,), (1,)), ("empty", (0, 5), (1, 5)),
               ("one", (1, 1), (1,)))


# ================================================================ construction
add("eye", (1,), fn=lambda t: Tensor.eye(5, device=t.device) + t, ref=lambda a: np.eye(5, dtype=F32) + a)
add("eye_rect", (1,), fn=lambda t: Tensor.eye(3, 7, device=t.device) * t + Tensor.eye(6, 2, device=t.device).sum(),
    ref=lambda a: np.eye(3, 7, dtype=F32) * a + np.eye(6, 2).sum())
add("eye_int_big", (1,), fn=lambda t: Tensor.eye(300, dtype="int32", device=t.device).sum(axis=0),
    ref=lambda a: np.eye(300, dtype=I32).sum(0))
add("eye_bool_empty", (1,), fn=lambda t: Tensor.eye(0, 4, dtype=bool, device=t.device),
    ref=lambda a: np.eye(0, 4, dtype=bool))
for dt in (F32, I32, BOOL):
    tag = np.dtype(dt).name
    add(f"like_{tag}", (3, 4), fn=lambda t: t.zeros_like().cat(t.ones_like(), t.full_like(True if t.dtype.name == "bool"
        else 7)), ref=lambda a: np.concatenate([np.zeros_like(a), np.ones_like(a), np.full_like(a, 7)]),
        dtype=dt, low=0, high=1)
add("like_dtype", (2, 3), fn=lambda t: t.full_like(2.5, dtype="float32") + t.ones_like(dtype="int32"),
    ref=lambda a: np.full_like(a, 2.5, dtype=F32) + 1, dtype=I32)
add("like_big", BIG, fn=lambda t: t.full_like(-3) + t, ref=lambda a: a - 3)


# ================================================================ movement
# non-contiguous views as inputs to compute
add("permuted_add", (5, 7, 3), (3, 7, 5), fn=lambda a, b: a.permute(2, 1, 0) + b,
    ref=lambda a, b: a.transpose(2, 1, 0) + b)
add("transpose_big", BIG, fn=lambda a: a.T * 2, ref=lambda a: a.T * 2)
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
add("chain_of_views", (8, 9), fn=lambda a: (a.T[1:, ::2].flip(1).pad(((1, 0), (0, 2))) * 2).sum(axis=0),
    ref=lambda a: (np.pad(np.flip(a.T[1:, ::2], 1), ((1, 0), (0, 2))) * 2).sum(0))
add("squeeze_all", (1, 5, 1, 3), fn=lambda t: t.squeeze() + 1, ref=lambda a: a.squeeze() + 1)
add("squeeze_dims", (1, 5, 1, 3), fn=lambda t: t.squeeze((0, -2)) + t.squeeze(2)[0],
    ref=lambda a: a.squeeze((0, -2)) + a.squeeze(2)[0])
add("squeeze_non_one_is_noop", (4, 1), fn=lambda t: t.squeeze(0) + 0, ref=lambda a: a + 0)  # torch semantics
add("unsqueeze", (4, 5), fn=lambda t: t.unsqueeze(0).unsqueeze(-1).unsqueeze(2) + 0,
    ref=lambda a: a[None, :, None, :, None] + 0)
add("flatten", (2, 3, 4, 5), fn=lambda t: t.permute(3, 2, 1, 0).flatten(1, 2) * 2,
    ref=lambda a: a.transpose(3, 2, 1, 0).reshape(5, 12, 2) * 2)
add("flatten_all_empty", (3, 0, 2), fn=lambda t: t.flatten() + 1, ref=lambda a: a.reshape(-1) + 1)
add("flatten_big", BIG, fn=lambda t: t.T.flatten(), ref=lambda a: a.T.reshape(-1))
for dt in (F32, I32, BOOL):
    tag = np.dtype(dt).name
    add(f"cat_{tag}", (3, 4), (5, 4), (1, 4), fn=lambda a, b, c: a.cat(b, c),
        ref=lambda a, b, c: np.concatenate([a, b, c]),
        dtype=dt, low=-5, high=5)
    add(f"cat_{tag}_views_dim1", (9, 10), (10, 9), fn=lambda a, b: Tensor.cat(a.flip(1), b.T[:, ::2], dim=-1),
        ref=lambda a, b: np.concatenate([np.flip(a, 1), b.T[:, ::2]], axis=-1), dtype=dt, low=-5, high=5)
    add(f"stack_{tag}", (3, 4), (3, 4), fn=lambda a, b: a.stack(b.pad(((0, 0), (1, 0)))[:, :4], dim=1),
        ref=lambda a, b: np.stack([a, np.pad(b, ((0, 0), (1, 0)))[:, :4]], axis=1), dtype=dt, low=-5, high=5)
add("cat_empty_piece", (0, 4), (3, 4), fn=lambda a, b: Tensor.cat(a, b, a), ref=lambda a, b: np.concatenate([a, b, a]))
add("cat_mixed_dtypes", (2, 2), fn=lambda a: a.cat(a > 0, (a * 10).cast("int32")),
    ref=lambda a: np.concatenate([a, a > 0, (a * 10).astype(I32)]))
add("cat_big", BIG, BIG, fn=lambda a, b: a.cat(b, dim=1), ref=lambda a, b: np.concatenate([a, b], 1))
add("stack_last", (4, 5), (4, 5), (4, 5), fn=lambda a, b, c: Tensor.stack(a, b, c, dim=-1),
    ref=lambda a, b, c: np.stack([a, b, c], -1))
add("stack_big", BIG, fn=lambda a: a.stack(a * 2), ref=lambda a: np.stack([a, a * 2]))


# ================================================================ elementwise
for dt, tag in ((F32, "f32"), (I32, "i32")):
    for shape_tag, sa, sb in CORE_SHAPES:
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
    add(f"cast_{tag}", BIG, fn=lambda a: a.cast("int32") if a.dtype.name == "float32" else a.cast("float32"),
        ref=lambda a: a.astype(np.int32) if a.dtype == np.float32 else a.astype(np.float32), dtype=dt)
for shape_tag, s in (("odd", (17, 5)), ("big", BIG), ("vec", (1023,))):
    add(f"exp_{shape_tag}", s, fn=lambda a: a.exp(), ref=np.exp)
    add(f"log_{shape_tag}", s, fn=lambda a: a.log(), ref=np.log, low=0.1, high=5)
    add(f"sqrt_{shape_tag}", s, fn=lambda a: a.sqrt(), ref=np.sqrt, low=0.0, high=5)

# ---- unary maths ----
unary("abs", lambda t: t.abs(), np.abs, (F32, I32))
unary("exp2", lambda t: t.exp2(), np.exp2)
unary("log2", lambda t: t.log2(), np.log2, low=0.05, high=9)
unary("rsqrt", lambda t: t.rsqrt(), lambda a: 1 / np.sqrt(a), low=0.05, high=9)
unary("sin", lambda t: t.sin(), np.sin, low=-7, high=7)
unary("cos", lambda t: t.cos(), np.cos, low=-7, high=7)
unary("tanh", lambda t: t.tanh(), np.tanh, low=-6, high=6, atol=1e-6)
unary("sigmoid", lambda t: t.sigmoid(), np_sigmoid, low=-20, high=20, atol=1e-6)
unary("silu", lambda t: t.silu(), lambda a: a * np_sigmoid(a))
unary("gelu", lambda t: t.gelu(), np_gelu_tanh)  # torch gelu(approximate="tanh")
unary("clip", lambda t: t.clip(-1, 2), lambda a: np.clip(a, -1, 2), (F32, I32))
unary("floor", lambda t: t.floor(), np.floor)
unary("ceil", lambda t: t.ceil(), np.ceil)
unary("invert", lambda t: ~t, np.invert, (I32, BOOL), low=-100, high=100)
add("unary_on_int_input", (5, 7), fn=lambda t: t.sigmoid() + t.exp2() + t.log2(),
    ref=lambda a: (np_sigmoid(a.astype(F32)) + np.exp2(a.astype(F32)) + np.log2(a.astype(F32))).astype(F32),
    dtype=I32, low=1, high=5)
add("clip_one_side", (33,), fn=lambda t: t.clip(min_=0.5) + t.clip(max_=-0.5),
    ref=lambda a: np.maximum(a, 0.5) + np.minimum(a, -0.5))
add("clip_nan", (4,), fn=lambda t: (t > 0).where(float("nan"), t).clip(-1, 1),
    ref=lambda a: np.clip(np.where(a > 0, np.nan, a), -1, 1))
add("sigmoid_extreme", (6,), fn=lambda t: (t * 100).sigmoid(), ref=lambda a: np_sigmoid((a * 100).astype(F32)))

# ---- floor division, modulo, powers (and reflected forms) ----
binary("floordiv", lambda a, b: a // b, lambda a, b: np_divmod(a, b)[0], (I32,), low=-9, high=9)  # zeros included
binary("mod", lambda a, b: a % b, lambda a, b: np_divmod(a, b)[1], (I32,), low=-9, high=9)
binary("floordiv", lambda a, b: a // (b.abs() + 0.5) + a // -(b.abs() + 0.5),
       lambda a, b: a // (np.abs(b) + 0.5) + a // -(np.abs(b) + 0.5), (F32,))
binary("mod", lambda a, b: a % (b.abs() + 0.5) + a % -(b.abs() + 0.5),
       lambda a, b: a % (np.abs(b) + 0.5) + a % -(np.abs(b) + 0.5), (F32,))
binary("pow", lambda a, b: a.abs() ** b, lambda a, b: np.abs(a) ** b, (F32,), low=-2, high=2)
binary("pow", lambda a, b: a ** b.abs(), lambda a, b: a ** np.abs(b), (I32,), low=-4, high=4)
add("int_divmod_edges", (8,), (8,), fn=lambda a, b: (a // b) * 1000 + a % b,
    ref=lambda a, b: a // b * 1000 + a % b, dtype=I32, low=-7, high=7)
add("int_min_div_minus_one", (1,), fn=lambda a: (a * 0 + -2 ** 31) // -1 + (a * 0 + -2 ** 31) % -1,
    ref=lambda a: np.full(1, -2 ** 31, np.int32), dtype=I32)
add("divmod_scalar", (31,), fn=lambda a: a // 4 + a % 3 * 10 + a // -3 * 100,
    ref=lambda a: a // 4 + a % 3 * 10 + a // -3 * 100, dtype=I32, low=-50, high=50)
add("rfloordiv_rmod", (31,), fn=lambda a: 17 // a + 17 % a * 100,
    ref=lambda a: np_divmod(17, a)[0] + np_divmod(17, a)[1] * 100,
    dtype=I32, low=-6, high=6)
add("rfloordiv_rmod_f32", (31,), fn=lambda a: 5.5 // (a.abs() + 1) + 5.5 % (a.abs() + 1),
    ref=lambda a: 5.5 // (np.abs(a) + 1) + 5.5 % (np.abs(a) + 1))
add("float_div_by_zero", (4,), fn=lambda a: a // (a.abs() * 0), ref=lambda a: np_divmod(a, np.abs(a) * 0)[0])
add("pow_neg_base_int_exp", (5, 6), (5, 6), fn=lambda a, b: a ** b.trunc(), ref=lambda a, b: a ** np.trunc(b),
    low=-3, high=3, rtol=1e-4)
add("pow_neg_base_frac_exp", (7,), fn=lambda a: (-(a.abs() + 1)) ** 0.5 + (a * 0) ** 0.0,
    ref=lambda a: np.full(7, np.nan, F32))
add("pow_zero", (3,), (3,), fn=lambda a, b: (a * 0) ** (b.abs() + 1) + (a * 0) ** (b * 0),
    ref=lambda a, b: (a * 0) ** (np.abs(b) + 1) + (a * 0) ** (b * 0))
add("pow_scalar_exps", (33,), fn=lambda a: a ** 2 + a ** 3 - a ** 0 + (a.abs() + 1) ** -1 + (a.abs() + 1) ** 0.5,
    ref=lambda a: a ** 2 + a ** 3 - a ** 0 + (np.abs(a) + 1) ** -1 + (np.abs(a) + 1) ** 0.5)
add("pow_int_scalar", (33,), fn=lambda a: a ** 3 + a ** 0, ref=lambda a: a ** 3 + a ** 0, dtype=I32, low=-20, high=20)
add("pow_int_wraps", (9,), fn=lambda a: a ** 13, ref=lambda a: a ** 13, dtype=I32, low=-9, high=9)
add("rpow", (33,), fn=lambda a: 2 ** a + 0.5 ** a, ref=lambda a: (2 ** a + 0.5 ** a).astype(F32))
add("rpow_int", (12,), fn=lambda a: 3 ** a.abs(), ref=lambda a: 3 ** np.abs(a), dtype=I32, low=-12, high=12)
add("pow_int_to_float", (8,), fn=lambda a: a ** 1.5, ref=lambda a: (a.astype(F32) ** 1.5), dtype=I32, low=0, high=9)

# ---- logical and bitwise ----
for opname, f in (("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b)):
    binary(opname, f, f, (I32, BOOL), low=-1000, high=1000)
    add(f"r{opname}_scalar", (17,), fn=lambda a, f=f: f(0x55, a) + f(a, 7), ref=lambda a, f=f: f(0x55, a) + f(a, 7),
        dtype=I32, low=-300, high=300)
binary("lshift", lambda a, b: a << b.abs(), lambda a, b: a << np.abs(b), (I32,), low=-9, high=9)
binary("rshift", lambda a, b: (a * 1000) >> b.abs(), lambda a, b: (a * 1000) >> np.abs(b), (I32,), low=-9, high=9)
add("shift_scalars", (17,), fn=lambda a: (a << 3) + (a >> 1) + (1 << a.abs()) + (4096 >> a.abs()),
    ref=lambda a: (a << 3) + (a >> 1) + (1 << np.abs(a)) + (4096 >> np.abs(a)), dtype=I32, low=-10, high=10)
add("logical_ops", (17,), (17,), fn=lambda a, b: (a > 0).logical_or(b > 1).logical_xor(a < b) & ~(b > 2),
    ref=lambda a, b: np.logical_xor((a > 0) | (b > 1), a < b) & ~(b > 2))
add("bool_and_int", (17,), (17,), fn=lambda a, b: (a > 0) & b, ref=lambda a, b: (a > 0) & b, dtype=I32)

# ---- bitcast ----
unary("bitcast_f2i", lambda t: t.bitcast("int32"), lambda a: a.view(np.int32))
add("bitcast_i2f", (33,), fn=lambda a: a.bitcast("float32"), ref=lambda a: a.view(F32), dtype=I32,
    low=0x3F000000, high=0x40800000)
add("bitcast_roundtrip_view", (9, 10), fn=lambda a: a.T.bitcast("uint32").bitcast("float32") + 0,
    ref=lambda a: a.T.copy().view(np.uint32).view(F32) + 0)


# ================================================================ reductions
for dt, tag in ((F32, "f32"), (I32, "i32")):
    for shape_tag, sa, _ in CORE_SHAPES:
        add(f"sum_{tag}_{shape_tag}", sa, fn=lambda a: a.sum(axis=-1), dtype=dt)
        add(f"sum_all_{tag}_{shape_tag}", sa, fn=lambda a: a.sum(), dtype=dt)
        if sa[0]:  # max/min over an empty axis is an error in numpy and in tolk
            add(f"rmax_{tag}_{shape_tag}", sa, fn=lambda a: a.max(axis=0, keepdim=True),
                ref=lambda a: a.max(axis=0, keepdims=True), dtype=dt)
            add(f"rmin_{tag}_{shape_tag}", sa, fn=lambda a: a.min(axis=-1), ref=lambda a: a.min(axis=-1), dtype=dt)
            add(f"mean_{tag}_{shape_tag}", sa, fn=lambda a: a.mean(axis=0),
                ref=lambda a: a.mean(axis=0, dtype=np.float64).astype(np.float32), dtype=dt)
for shape_tag, s in (("odd", (17, 5)), ("big", BIG), ("vec", (1023,))):
    add(f"fused_{shape_tag}", s, s, s, fn=lambda a, b, c: ((a * b + c).relu()).sum(),
        ref=lambda a, b, c: np.maximum(a * b + c, 0).sum(dtype=np.float64).astype(np.float32))
add("size1_axes", (1, 5, 1), (7, 1, 1), fn=lambda a, b: (a * b).sum(axis=(0, 2)),
    ref=lambda a, b: (a * b).sum(axis=(0, 2)))
add("keepdim_neg_axis", (4, 6, 8), fn=lambda a: a.sum(axis=(-1, 0), keepdim=True),
    ref=lambda a: a.sum(axis=(-1, 0), keepdims=True))
add("empty_reduce", (0, 4), fn=lambda a: a.sum(axis=0), ref=lambda a: a.sum(0))
add("sum_then_add", (33, 65), (33,), fn=lambda a, b: a.sum(axis=1) + b, ref=lambda a, b: a.sum(1) + b)
add("nested_reduce", (6, 7, 8), fn=lambda a: a.sum(axis=2).max(axis=1), ref=lambda a: a.sum(2).max(1))
for dt, lo, hi in ((F32, 0.6, 1.4), (I32, -2, 2)):
    tag = np.dtype(dt).name
    add(f"prod_{tag}", (7, 13), fn=lambda t: t.prod(axis=1), ref=lambda a: a.prod(axis=1), dtype=dt, low=lo, high=hi)
    add(f"prod_{tag}_views", (9, 10), fn=lambda t: t.T[::2].flip(0).prod(axis=0, keepdim=True),
        ref=lambda a: np.flip(a.T[::2], 0).prod(axis=0, keepdims=True), dtype=dt, low=lo, high=hi)
    add(f"prod_{tag}_empty", (0, 5), fn=lambda t: t.prod(axis=0), ref=lambda a: a.prod(axis=0), dtype=dt)
add("prod_big", BIG, fn=lambda t: t.prod(axis=0), ref=lambda a: a.prod(axis=0, dtype=np.float64).astype(F32),
    low=0.99, high=1.01, rtol=1e-3)
add("prod_bool", (5, 4), fn=lambda t: (t > -2).prod(axis=1), ref=lambda a: (a > -2).prod(axis=1).astype(I32))
add("prod_all", (3, 5), fn=lambda t: t.prod(), ref=lambda a: a.prod(), low=0.5, high=1.5)
for dt in (F32, I32):
    tag = np.dtype(dt).name
    # torch semantics: var/std use correction=1 (numpy ddof=1)
    add(f"var_{tag}", (17, 23), fn=lambda t: t.var(axis=1), ref=lambda a: a.var(axis=1, ddof=1).astype(F32), dtype=dt)
    add(f"std_{tag}", (17, 23), fn=lambda t: t.std(axis=0, keepdim=True),
        ref=lambda a: a.std(axis=0, ddof=1, keepdims=True).astype(F32), dtype=dt)
add("var_correction0_views", (9, 10), fn=lambda t: t.pad(((1, 0), (0, 2))).flip(1).var(correction=0),
    ref=lambda a: np.flip(np.pad(a, ((1, 0), (0, 2))), 1).var())
add("var_big", BIG, fn=lambda t: t.var(axis=1), ref=lambda a: a.var(axis=1, ddof=1))
add("std_big_all", BIG, fn=lambda t: t.std(), ref=lambda a: a.astype(np.float64).std(ddof=1).astype(F32))
add("var_empty_rows", (0, 5), fn=lambda t: t.var(axis=1), ref=lambda a: a.var(axis=1, ddof=1))


def arg_cases(name: str, fn, ref) -> None:
    for dt, lo, hi in ((F32, -3, 3), (I32, -3, 3), (BOOL, 0, 1)):
        tag = np.dtype(dt).name
        add(f"{name}_{tag}_ax1", (17, 23), fn=lambda t, f=fn: f(t, 1), ref=lambda a, r=ref: r(a, 1).astype(I32),
            dtype=dt, low=lo, high=hi)  # int32/bool in a small range: ties, the first index wins
        add(f"{name}_{tag}_ax0_views", (9, 10), fn=lambda t, f=fn: f(t.T[::-2], 0),
            ref=lambda a, r=ref: r(a.T[::-2], 0).astype(I32), dtype=dt, low=lo, high=hi)
    add(f"{name}_flat", (6, 7), fn=lambda t, f=fn: f(t, None), ref=lambda a, r=ref: np.asarray(r(a, None), I32))
    add(f"{name}_keepdim", (6, 7), fn=lambda t: getattr(t, name)(0, keepdim=True),
        ref=lambda a, r=ref: np.expand_dims(r(a, 0), 0).astype(I32))
    add(f"{name}_big", BIG, fn=lambda t, f=fn: f(t, 0), ref=lambda a, r=ref: r(a, 0).astype(I32))
    add(f"{name}_empty_rows", (0, 5), fn=lambda t, f=fn: f(t, 1), ref=lambda a, r=ref: r(a, 1).astype(I32))


arg_cases("argmax", lambda t, ax: t.argmax(ax), lambda a, ax: np.argmax(a, ax))
arg_cases("argmin", lambda t, ax: t.argmin(ax), lambda a, ax: np.argmin(a, ax))
add("argmin_int_min", (4,), fn=lambda t: (t * 0 + (t > 0).where(2 ** 31 - 1, -2 ** 31)).argmin(),
    ref=lambda a: np.int32(np.argmin(np.where(a > 0, 2 ** 31 - 1, -2 ** 31))), dtype=I32)
for name, fn, ref in (("any", lambda t, ax: t.any(ax), lambda a, ax: a.any(ax)),
                      ("all", lambda t, ax: t.all(ax), lambda a, ax: a.all(ax))):
    for dt, lo, hi in ((F32, -0.6, 0.6), (I32, -1, 1), (BOOL, 0, 1)):
        tag = np.dtype(dt).name
        add(f"{name}_{tag}", (17, 3), fn=lambda t, f=fn: f(t, 1), ref=lambda a, r=ref: r(a, 1), dtype=dt,
            low=lo, high=hi)
        add(f"{name}_{tag}_views", (9, 10), fn=lambda t, f=fn: f(t.pad(((0, 1), (0, 0)))[::-1, 1:], 0),
            ref=lambda a, r=ref: r(np.pad(a, ((0, 1), (0, 0)))[::-1, 1:], 0), dtype=dt, low=lo, high=hi)
    add(f"{name}_empty", (0, 5), fn=lambda t, f=fn: f(t, 0), ref=lambda a, r=ref: r(a, 0))
    add(f"{name}_all_axes", (3, 5), fn=lambda t, f=fn: f(t > -2.9, None), ref=lambda a, r=ref: r(a > -2.9, None))
    add(f"{name}_big", BIG, fn=lambda t, f=fn: f(t > -2.99, 0), ref=lambda a, r=ref: r(a > -2.99, 0))


# ================================================================ indexing (ints, slices, None, Ellipsis, tensors)
add("sliced", (40, 37), fn=lambda a: a[3:31:2, ::-3] + 1, ref=lambda a: a[3:31:2, ::-3] + 1)
add("sliced_neg", (40, 37), fn=lambda a: a[-5:, -1] * 3, ref=lambda a: a[-5:, -1] * 3)
add("int_index", (4, 5, 6), fn=lambda a: a[1, :, 2] + a[2, 3, :5])
IDX = np.array([3, 0, -1, 2, 3, -4], np.int64)
add("index_none_ellipsis", (4, 5, 6), fn=lambda t: t[None, ..., None, 2] * 1, ref=lambda a: a[None, ..., None, 2] * 1)
add("index_none_ellipsis_steps", (4, 5, 6), fn=lambda t: t[..., 1:3, None, ::2][1, :, None] + 0,
    ref=lambda a: a[..., 1:3, None, ::2][1, :, None] + 0)
add("index_ellipsis_only", (2, 3), fn=lambda t: t[...] + t[..., :] + t[1, ...],
    ref=lambda a: a[...] + a[..., :] + a[1, ...])
for dt in (F32, I32, BOOL):
    tag = np.dtype(dt).name
    add(f"gather_{tag}", (5, 6), fn=lambda t: t[Tensor(IDX[:4], device=t.device)],
        ref=lambda a: a[IDX[:4]], dtype=dt, low=-9, high=9)
    add(f"gather_{tag}_views", (9, 10), fn=lambda t: t.T[::-1][:, Tensor(IDX, device=t.device)],
        ref=lambda a: a.T[::-1][:, IDX], dtype=dt, low=-9, high=9)
add("gather_list", (5, 6), fn=lambda t: t[[1, 1, -1]] + t[:, [0, 5, 2]].T[:, :5].sum(),
    ref=lambda a: a[[1, 1, -1]] + a[:, [0, 5, 2]].T[:, :5].sum())
add("gather_two_adjacent", (4, 5, 6), fn=lambda t: t[:, Tensor([[0, 4], [1, 2]], device=t.device), Tensor([5, -1],
    device=t.device)], ref=lambda a: a[:, np.array([[0, 4], [1, 2]]), np.array([5, -1])])
add("gather_two_apart", (4, 5, 6),
    fn=lambda t: t[Tensor([1, 3, 0], device=t.device), 1:4, Tensor([2], device=t.device)],
    ref=lambda a: a[np.array([1, 3, 0]), 1:4, np.array([2])])
add("gather_int_adjacent", (4, 5, 6), fn=lambda t: t[:, 2, Tensor([[0], [5]], device=t.device)] * 1,
    ref=lambda a: a[:, 2, np.array([[0], [5]])] * 1)
add("gather_with_int_and_none", (4, 5, 6), fn=lambda t: t[2, None, Tensor([0, 4, 4], device=t.device)],
    ref=lambda a: a[2, None, np.array([0, 4, 4])])
add("gather_idx_computed", (7, 3), (5,), fn=lambda t, i: (t * 2)[(i.abs() * 3).cast("int32") % 7] + 1,
    ref=lambda a, i: (a * 2)[(np.abs(i) * 3).astype(I32) % 7] + 1)
add("gather_empty_idx", (5, 6), fn=lambda t: t[Tensor(np.zeros(0, np.int32), device=t.device)],
    ref=lambda a: a[np.zeros(0, np.int32)])
add("gather_big", (70000,), fn=lambda t: t[Tensor(np.array([69999, 0, 12345, -2]), device=t.device)],
    ref=lambda a: a[np.array([69999, 0, 12345, -2])])
add("gather_big_idx", (300,), fn=lambda t: t[Tensor((np.arange(70001) * 7919) % 300, device=t.device)],
    ref=lambda a: a[(np.arange(70001) * 7919) % 300])
add("gather_nan_inf_row", (3, 2), fn=lambda t: (t.log2() * 0 + t)[Tensor([1], device=t.device)],
    ref=lambda a: (np.log2(a) * 0 + a)[[1]], low=-1, high=1)


# ================================================================ nn ops
add("matmul", (17, 33), (33, 9), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b)
add("matmul_big", (64, 1031), (1031, 65), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b, low=-1, high=1)
add("matmul_batched", (3, 1, 5, 8), (4, 8, 6), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b)
add("matmul_vec", (8,), (8, 5), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b)
add("matmul_i32", (9, 10), (10, 11), fn=lambda a, b: a @ b, ref=lambda a, b: a @ b, dtype=I32)
add("softmax", (64, 1000), fn=lambda a: a.softmax(), ref=np_softmax)
add("softmax_axis0", (31, 5), fn=lambda a: a.softmax(axis=0), ref=lambda a: np_softmax(a, 0))
add("dot_vec", (33,), (33,), fn=lambda a, b: a.dot(b), ref=np.dot)
add("dot_mat", (17, 9), (9, 5), fn=lambda a, b: a.dot(b), ref=np.dot)
add("dot_big", (257, 300), (300,), fn=lambda a, b: a.T.dot(a @ b), ref=lambda a, b: a.T @ (a @ b), rtol=1e-3, atol=1e-2)
add("dot_i32_views", (9, 10), (9, 10), fn=lambda a, b: a.T.dot(b.flip(0)), ref=lambda a, b: a.T @ np.flip(b, 0),
    dtype=I32)


def np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def np_layernorm(x, axis=-1, eps=1e-5):
    y = x - x.mean(axis=axis, keepdims=True)
    return y / np.sqrt((y * y).mean(axis=axis, keepdims=True) + eps)


add("log_softmax", (17, 23), fn=lambda t: t.log_softmax(), ref=np_log_softmax)
add("log_softmax_axis0_views", (9, 10), fn=lambda t: t.T[::2].log_softmax(0), ref=lambda a: np_log_softmax(a.T[::2], 0))
add("log_softmax_big", BIG, fn=lambda t: t.log_softmax(), ref=np_log_softmax)
add("log_softmax_int", (3, 4), fn=lambda t: t.log_softmax(), ref=lambda a: np_log_softmax(a.astype(F32)), dtype=I32)
add("layernorm", (17, 23), fn=lambda t: t.layernorm(), ref=np_layernorm)
add("layernorm_axes_views", (9, 10), fn=lambda t: t.pad(((1, 1), (0, 0))).flip(1).layernorm(axis=(0, 1), eps=1e-3),
    ref=lambda a: np_layernorm(np.flip(np.pad(a, ((1, 1), (0, 0))), 1), (0, 1), 1e-3))
add("layernorm_big", BIG, fn=lambda t: t.layernorm(), ref=np_layernorm)


def np_conv2d(x, w, b=None, stride=1, padding=((0, 0), (0, 0)), dilation=1, groups=1):
    """Direct cross-correlation (torch.nn.functional.conv2d semantics), in float64."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), *padding))
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, cout, oh, ow))
    per = cout // groups
    for co in range(cout):
        g = co // per
        for i in range(kh):
            for j in range(kw):
                patch = x[:, g * cin_g:(g + 1) * cin_g, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                          j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, co] += np.einsum("nchw,c->nhw", patch, w[co, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out.astype(np.float32)


add("conv2d", (2, 3, 9, 11), (4, 3, 3, 3), fn=lambda x, w: x.conv2d(w), ref=np_conv2d)
add("conv2d_stride_pad_bias", (2, 3, 9, 11), (4, 3, 3, 2), (4,),
    fn=lambda x, w, b: x.conv2d(w, b, stride=2, padding=1),
    ref=lambda x, w, b: np_conv2d(x, w, b, stride=2, padding=((1, 1), (1, 1))))
add("conv2d_tuple_args", (1, 2, 10, 7), (3, 2, 2, 3),
    fn=lambda x, w: x.conv2d(w, stride=(3, 1), padding=(2, 0), dilation=(1, 2)),
    ref=lambda x, w: np_conv2d(x, w, stride=(3, 1), padding=((2, 2), (0, 0)), dilation=(1, 2)))
add("conv2d_pad4_groups", (2, 4, 6, 6), (6, 2, 3, 3),
    fn=lambda x, w: x.conv2d(w, groups=2, padding=(1, 0, 2, 1)),
    ref=lambda x, w: np_conv2d(x, w, padding=((2, 1), (1, 0)), groups=2))
add("conv2d_views", (3, 2, 8, 9), (2, 2, 2, 2), fn=lambda x, w: x.flip(3).permute(0, 1, 3, 2).conv2d(w, stride=3),
    ref=lambda x, w: np_conv2d(np.flip(x, 3).transpose(0, 1, 3, 2), w, stride=3))
add("conv2d_int", (1, 2, 5, 5), (2, 2, 2, 2), fn=lambda x, w: x.conv2d(w, padding=1),
    ref=lambda x, w: np_conv2d(x, w, padding=((1, 1), (1, 1))).astype(I32), dtype=I32)
add("conv2d_big", (2, 8, 66, 66), (8, 8, 3, 3), fn=lambda x, w: x.conv2d(w, padding=1),
    ref=lambda x, w: np_conv2d(x, w, padding=((1, 1), (1, 1))), low=-1, high=1, atol=1e-3)
add("conv2d_empty_batch", (0, 2, 5, 5), (3, 2, 3, 3), fn=lambda x, w: x.conv2d(w), ref=np_conv2d)


_inputs = seeded_inputs  # other suites (conformance, CUDA render) rebuild these cases


def check(name: str, got: Tensor) -> None:
    """Case `name`'s result `got` matches numpy's on the case's own inputs: the same kind of dtype (float, int,
    bool) and equal values (`close`, within the case's tolerances)."""
    case = CASES[name]
    with np.errstate(all="ignore"):
        want = np.asarray((case.ref or case.fn)(*_inputs(name, case)))
    out = got.numpy()
    assert out.dtype.kind == want.dtype.kind, f"dtype {out.dtype} vs numpy's {want.dtype}"
    close(out, want, **case.tol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_parity(device: str, name: str) -> None:
    check(name, realized_case(CASES, device, name))


def test_cases_cover_big_sizes() -> None:
    assert sum(1 for c in CASES.values() if any(math.prod(s) >= 1 << 16 for s in c.shapes)) >= 20
