"""Random expression programs with a numpy reference, for the differential fuzzer (tests/fuzz/test_fuzz.py).

A program is a tree of `Node`s over input arrays. `generate(seed)` draws one top-down: it asks for a value of
a dtype and shape and picks an op that yields it (elementwise ops, comparisons, where, casts, movements,
basic and integer-array indexing, reductions), so every draw type-checks by construction. Inputs mix ordinary
values with each dtype's edge values (NaN, +-inf, +-0.0, denormals, integer minimum and maximum).

`reference(program)` evaluates the tree with numpy in Tolk's dtypes (bfloat16 through ml_dtypes) and carries a
*defined* mask: elements whose value C leaves undefined (out-of-range float -> int casts, shifts by the bit
width or more) and everything computed from them are not compared (docs/dtypes.md). Signed integer overflow is
compared: it wraps as numpy's on every device.

The whole tree is *exact* (results must match bit for bit) except an optional *inexact root*: a float sum,
mean or product, or a transcendental function, compared within a bound (tests/fuzz/compare.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

FLOATS = ("float16", "bfloat16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
DTYPES = ("bool", *INTS, *FLOATS)
SHAPES = ((), (1,), (5,), (0,), (3, 4), (1, 4), (3, 1), (4, 4), (2, 3, 4), (2, 0, 3), (1, 1, 6))


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt == np.dtype(ml_dtypes.bfloat16)


def acc_dtype(name: str) -> str:
    """The dtype an integer or bool sum returns (docs/dtypes.md: numpy's int64/uint64)."""
    if name == "bool" or name in SIGNED:
        return "int64"
    return "uint64" if name in UNSIGNED else name


@dataclass
class Node:
    """`op` applied to `kids` with parameters `arg`; op "input" is input number `arg`. `dtype` and `shape` are
    what the node yields."""
    op: str
    kids: tuple[Node, ...]
    arg: Any
    dtype: str
    shape: tuple[int, ...]

    def text(self) -> str:
        if self.op == "input":
            return f"x{self.arg}"
        args = [k.text() for k in self.kids] + ([repr(self.arg)] if self.arg is not None else [])
        return f"{self.op}({', '.join(args)})"


@dataclass
class Program:
    seed: int
    root: Node
    inputs: list[np.ndarray] = field(default_factory=list)

    def text(self) -> str:
        ins = "; ".join(f"x{i}: {a.dtype.name}{list(a.shape)} = {a.ravel()[:12].tolist()}"
                        f"{'...' if a.size > 12 else ''}" for i, a in enumerate(self.inputs))
        return f"seed {self.seed}: {self.root.text()}  where {ins}"


# ---------------------------------------------------------------- input values

def edge_values(name: str) -> list:
    """The values of dtype `name` most likely to expose a wrong rule."""
    if name == "bool":
        return [True, False]
    if name in INTS:
        info = np.iinfo(name)
        return [info.min, info.max, 0, 1, info.max - 1] + ([-1, info.min + 1] if name in SIGNED else [])
    info = ml_dtypes.finfo(np_dtype(name))
    tiny = float(info.smallest_normal)
    return [math.nan, math.inf, -math.inf, 0.0, -0.0, float(info.smallest_subnormal), -tiny / 2, tiny,
            float(info.max), -1.0, 0.5]


def draw_input(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    n = math.prod(shape)
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if name in INTS:
        info = np.iinfo(name)
        vals = rng.integers(max(info.min, -9), min(info.max, 9) + 1, size=n).astype(name)
        wide = rng.random(n) < 0.15
        vals[wide] = rng.integers(info.min, info.max, size=int(wide.sum()), dtype=name, endpoint=True)
    else:
        vals = np.round(rng.uniform(-4, 4, size=n), int(rng.integers(0, 3))).astype(np_dtype(name))
    edges = edge_values(name)
    hit = rng.random(n) < 0.2
    picked = [edges[i] for i in rng.integers(len(edges), size=int(hit.sum()))]
    vals[hit] = np.array(picked, dtype=vals.dtype if name in INTS else np.float64).astype(vals.dtype)
    return vals.reshape(shape)


# ---------------------------------------------------------------- the op table

@dataclass(frozen=True)
class OpDef:
    """`tolk(tensors, arg)` builds the op on Tolk tensors, `ref(arrays, arg)` computes it with numpy; `undef`
    (arrays, arg, result) -> bool mask of elements C leaves undefined (None: all defined)."""
    tolk: Callable
    ref: Callable
    undef: Callable | None = None


def _wrapping(fn):
    """numpy's op with its overflow warnings silenced: wrapped results are compared only where defined."""
    def run(*a):
        with np.errstate(all="ignore"):
            return fn(*a)
    return run


def _int_range(t: np.ndarray, name: str) -> np.ndarray:
    """Where float64 values `t` (already integers) lie in the range of integer dtype `name`."""
    bits = 8 * np.dtype(name).itemsize
    lo, hi = (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1)) if name in SIGNED else (0.0, 2.0 ** bits)
    return (t >= lo) & (t < hi)


def _zero_sign_undef(xs, arg, out):
    """maximum/minimum/relu of -0.0 and +0.0: the sign of the zero is the implementation's choice (numpy
    takes the second operand, torch and Tolk the first), so a zero result with a -0.0 operand is not compared."""
    if not is_float(out.dtype):
        return None
    with np.errstate(invalid="ignore"):
        neg0 = np.zeros(out.shape, bool)
        for x in xs:
            x64 = np.asarray(x).astype(np.float64)
            neg0 = neg0 | np.broadcast_to((x64 == 0) & np.signbit(x64), out.shape)
        return neg0 & (out.astype(np.float64) == 0)


def _cast_undef(xs, arg, out):
    x = xs[0]
    if not is_float(x.dtype) or arg not in INTS:
        return None
    with np.errstate(invalid="ignore"):
        return ~_int_range(np.trunc(x.astype(np.float64)), arg)


def _cast_ref(xs, arg):
    x = xs[0]
    with np.errstate(invalid="ignore", over="ignore"):
        if arg == "bool":
            return x != 0
        if np_dtype(arg).kind == "f" or arg == "bfloat16":
            return x.astype(np_dtype(arg))
        if is_float(x.dtype):
            t = np.trunc(x.astype(np.float64))
            return np.where(_int_range(t, arg), t, 0).astype(arg)  # the rest is undefined
        return x.astype(arg)


def _shift_undef(xs, arg, out):
    bits = 8 * out.dtype.itemsize
    return np.broadcast_to((xs[1].astype(np.int64) < 0) | (xs[1].astype(np.int64) >= bits), out.shape)


def _by_nonzero(fn: Callable) -> Callable:
    """numpy's floor division or modulo `fn`; for integers a zero divisor gives 0, numpy's integer result, without
    numpy dividing by the zero."""
    def ref(a, b):
        with np.errstate(all="ignore"):
            if a.dtype.kind in "iu":
                return np.where(b == 0, 0, fn(a, np.where(b == 0, 1, b))).astype(a.dtype)
            return fn(a, b)
    return ref


_floordiv_ref, _mod_ref = _by_nonzero(np.floor_divide), _by_nonzero(np.mod)


def _exact_in_float64(fn: Callable) -> Callable:
    """numpy's `fn` of floats computed in float64 and cast back (exact: round, sign and fmod results are
    representable in the input's dtype; ml_dtypes' bfloat16 lacks some of these loops); integers as they are."""
    def ref(*xs):
        with np.errstate(all="ignore"):
            if not is_float(xs[0].dtype):
                return fn(*xs)
            return fn(*(x.astype(np.float64) for x in xs)).astype(xs[0].dtype)
    return ref


def _fmod_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's fmod; integer x fmod 0 is 0 (numpy's result, without numpy dividing by the zero)."""
    if a.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return _exact_in_float64(np.fmod)(a, b)


UNARY = {
    "neg": OpDef(lambda t, a: -t[0], lambda xs, a: _wrapping(np.negative)(xs[0])),
    "abs": OpDef(lambda t, a: t[0].abs(), lambda xs, a: _wrapping(np.abs)(xs[0])),
    "square": OpDef(lambda t, a: t[0].square(), lambda xs, a: _wrapping(np.multiply)(xs[0], xs[0])),
    "relu": OpDef(lambda t, a: t[0].relu(), lambda xs, a: np.maximum(xs[0], xs[0].dtype.type(0)), _zero_sign_undef),
    "trunc": OpDef(lambda t, a: t[0].trunc(), lambda xs, a: np.trunc(xs[0])),
    "floor": OpDef(lambda t, a: t[0].floor(), lambda xs, a: np.floor(xs[0])),
    "ceil": OpDef(lambda t, a: t[0].ceil(), lambda xs, a: np.ceil(xs[0])),
    "reciprocal": OpDef(lambda t, a: t[0].reciprocal(), lambda xs, a: _wrapping(np.divide)(xs[0].dtype.type(1), xs[0])),
    "sqrt": OpDef(lambda t, a: t[0].sqrt(), lambda xs, a: _wrapping(np.sqrt)(xs[0])),
    "invert": OpDef(lambda t, a: ~t[0], lambda xs, a: np.invert(xs[0])),
    "logical_not": OpDef(lambda t, a: t[0].logical_not(), lambda xs, a: np.logical_not(xs[0])),
    "round": OpDef(lambda t, a: t[0].round(), lambda xs, a: _exact_in_float64(np.round)(xs[0])),
    "sign": OpDef(lambda t, a: t[0].sign(), lambda xs, a: _exact_in_float64(np.sign)(xs[0])),
}
BINARY = {
    "add": OpDef(lambda t, a: t[0] + t[1], lambda xs, a: _wrapping(np.add)(*xs)),
    "sub": OpDef(lambda t, a: t[0] - t[1], lambda xs, a: _wrapping(np.subtract)(*xs)),
    "mul": OpDef(lambda t, a: t[0] * t[1], lambda xs, a: _wrapping(np.multiply)(*xs)),
    "div": OpDef(lambda t, a: t[0] / t[1], lambda xs, a: _wrapping(np.divide)(*xs)),
    "maximum": OpDef(lambda t, a: t[0].maximum(t[1]), lambda xs, a: np.maximum(*xs), _zero_sign_undef),
    "minimum": OpDef(lambda t, a: t[0].minimum(t[1]), lambda xs, a: np.minimum(*xs), _zero_sign_undef),
    "floordiv": OpDef(lambda t, a: t[0] // t[1], lambda xs, a: _floordiv_ref(*xs)),
    "mod": OpDef(lambda t, a: t[0] % t[1], lambda xs, a: _mod_ref(*xs)),
    "fmod": OpDef(lambda t, a: t[0].fmod(t[1]), lambda xs, a: _fmod_ref(*xs)),
    "and": OpDef(lambda t, a: t[0] & t[1], lambda xs, a: np.bitwise_and(*xs)),
    "or": OpDef(lambda t, a: t[0] | t[1], lambda xs, a: np.bitwise_or(*xs)),
    "xor": OpDef(lambda t, a: t[0] ^ t[1], lambda xs, a: np.bitwise_xor(*xs)),
    "shl": OpDef(lambda t, a: t[0] << t[1], lambda xs, a: _wrapping(np.left_shift)(*xs), _shift_undef),
    "shr": OpDef(lambda t, a: t[0] >> t[1], lambda xs, a: _wrapping(np.right_shift)(*xs), _shift_undef),
}
COMPARE = {
    "lt": OpDef(lambda t, a: t[0] < t[1], lambda xs, a: np.less(*xs)),
    "gt": OpDef(lambda t, a: t[0] > t[1], lambda xs, a: np.greater(*xs)),
    "le": OpDef(lambda t, a: t[0] <= t[1], lambda xs, a: np.less_equal(*xs)),
    "ge": OpDef(lambda t, a: t[0] >= t[1], lambda xs, a: np.greater_equal(*xs)),
    "eq": OpDef(lambda t, a: t[0] == t[1], lambda xs, a: np.equal(*xs)),
    "ne": OpDef(lambda t, a: t[0] != t[1], lambda xs, a: np.not_equal(*xs)),
}
# which dtypes each elementwise op is drawn for
UNARY_DTYPES = {"neg": INTS + FLOATS, "abs": SIGNED + FLOATS, "square": INTS + FLOATS, "relu": SIGNED + FLOATS,
                "trunc": FLOATS, "floor": FLOATS, "ceil": FLOATS, "reciprocal": FLOATS, "sqrt": FLOATS,
                "invert": ("bool", *INTS), "logical_not": ("bool",), "round": FLOATS + SIGNED,
                "sign": INTS + FLOATS}
BINARY_DTYPES = {"add": INTS + FLOATS, "sub": INTS + FLOATS, "mul": INTS + FLOATS, "div": FLOATS,
                 "maximum": INTS + FLOATS, "minimum": INTS + FLOATS, "floordiv": INTS + FLOATS,
                 "mod": INTS + FLOATS, "fmod": INTS + FLOATS, "and": ("bool", *INTS), "or": ("bool", *INTS),
                 "xor": ("bool", *INTS), "shl": INTS, "shr": INTS}
TRANSCENDENTAL = {
    "exp": (lambda t: t.exp(), np.exp), "log": (lambda t: t.log(), np.log),
    "exp2": (lambda t: t.exp2(), np.exp2), "log2": (lambda t: t.log2(), np.log2),
    "sin": (lambda t: t.sin(), np.sin), "cos": (lambda t: t.cos(), np.cos),
    "tanh": (lambda t: t.tanh(), np.tanh), "sigmoid": (lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "rsqrt": (lambda t: t.rsqrt(), lambda x: 1 / np.sqrt(x)),
    "pow": (lambda t: t.pow(t.flip(-1) if t.ndim else t), lambda x: np.power(x, np.flip(x, -1) if x.ndim else x)),
    **{name: (lambda t, name=name: getattr(t, name)(), ref) for name, ref in (
        ("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan), ("sinh", np.sinh), ("cosh", np.cosh),
        ("tan", np.tan), ("asinh", np.arcsinh), ("acosh", np.arccosh), ("atanh", np.arctanh))},
}
INEXACT_REDUCE = ("sum", "mean", "prod")


# ---------------------------------------------------------------- drawing a program

class _Drawer:
    """Draws a tree top-down: `value(dtype, shape, depth)` returns a node yielding exactly that dtype and shape."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.inputs: list[np.ndarray] = []

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def leaf(self, dt: str, shape: tuple[int, ...]) -> Node:
        self.inputs.append(draw_input(self.rng, dt, shape))
        return Node("input", (), len(self.inputs) - 1, dt, shape)

    def value(self, dt: str, shape: tuple[int, ...], depth: int) -> Node:
        if depth <= 0 or self.rng.random() < 0.2:
            return self.leaf(dt, shape)
        for _ in range(8):
            kind = self.pick(("unary", "binary", "binary", "compare", "compare", "where", "cast", "move", "move",
                              "move", "reduce", "gather"))
            node = getattr(self, "_" + kind)(dt, shape, depth - 1)
            if node is not None:
                return node
        return self.leaf(dt, shape)

    def _broadcast_parts(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Two shapes that broadcast to `shape`: one full, the other with some axes 1 or leading axes dropped."""
        other = tuple(1 if self.rng.random() < 0.3 else n for n in shape)
        other = other[int(self.rng.integers(len(other) + 1)) if self.rng.random() < 0.3 else 0:]
        return (shape, other) if self.rng.random() < 0.5 else (other, shape)

    def _unary(self, dt, shape, depth):
        ops = [n for n, dts in UNARY_DTYPES.items() if dt in dts]
        name = self.pick(ops)
        return Node(name, (self.value(dt, shape, depth),), None, dt, shape)

    def _binary(self, dt, shape, depth):
        name = self.pick([n for n, dts in BINARY_DTYPES.items() if dt in dts] or [None])
        if name is None:
            return None
        s0, s1 = self._broadcast_parts(shape)
        return Node(name, (self.value(dt, s0, depth), self.value(dt, s1, depth)), None, dt, shape)

    def _compare(self, dt, shape, depth):
        if dt != "bool":
            return None
        src, (s0, s1) = self.pick(DTYPES), self._broadcast_parts(shape)
        return Node(self.pick(list(COMPARE)), (self.value(src, s0, depth), self.value(src, s1, depth)), None, dt,
                    shape)

    def _where(self, dt, shape, depth):
        (s0, s1), s2 = self._broadcast_parts(shape), self._broadcast_parts(shape)[0]
        kids = (self.value("bool", s0, depth), self.value(dt, s1, depth), self.value(dt, s2, depth))
        return Node("where", kids, None, dt, shape)

    def _cast(self, dt, shape, depth):
        return Node("cast", (self.value(self.pick(DTYPES), shape, depth),), dt, dt, shape)

    def _gather(self, dt, shape, depth):
        """x[idx] along axis 0: idx (an int input of shape shape[:k]) picks rows of x (m, *shape[k:])."""
        if not shape:
            return None
        k, m = int(self.rng.integers(1, len(shape) + 1)), int(self.rng.integers(1, 5))
        src = self.value(dt, (m, *shape[k:]), depth)
        idx = self.rng.integers(-m, m, size=shape[:k]).astype(self.pick(("int32", "int64", "uint8")))
        if idx.dtype.kind == "u":
            idx = np.abs(idx.astype(np.int64)).astype(idx.dtype) % m
        self.inputs.append(idx)
        return Node("gather", (src, Node("input", (), len(self.inputs) - 1, idx.dtype.name, idx.shape)), None, dt,
                    shape)

    def _reduce(self, dt, shape, depth):
        """An exact reduction yielding `shape`: max/min of the same dtype, any/all of bools, integer sums,
        argmax/argmin (int32) over one inserted axis (kept as size 1 when keepdim)."""
        axis, n, keep = int(self.rng.integers(len(shape) + 1)), int(self.rng.integers(1, 6)), self.rng.random() < .3
        if keep and (axis >= len(shape) or shape[axis] != 1):
            return None
        src_shape = (*shape[:axis], n, *shape[axis + (1 if keep else 0):])
        if dt == "bool":
            op, src = self.pick(("any", "all", "max", "min")), "bool"
        elif dt == "int32" and self.rng.random() < 0.7:
            op, src = self.pick(("argmax", "argmin", "argmax", "argmin", "sum")), self.pick(DTYPES)
            if op == "sum" and acc_dtype(src) != "int32":
                return None
        elif dt in ("int64", "uint64") and self.rng.random() < 0.5:
            op, src = "sum", self.pick([d for d in DTYPES if acc_dtype(d) == dt])
        else:
            op, src = self.pick(("max", "min")), dt
        return Node(op, (self.value(src, src_shape, depth),), (axis, bool(keep)), dt, shape)

    def _move(self, dt, shape, depth):
        kind = self.pick(("flip", "permute", "reshape", "expand", "slice", "pad", "index"))
        return getattr(self, "_m_" + kind)(dt, shape, depth)

    def _m_flip(self, dt, shape, depth):
        if not shape:
            return None
        axes = tuple(sorted({int(a) for a in self.rng.integers(len(shape), size=int(self.rng.integers(1, 3)))}))
        return Node("flip", (self.value(dt, shape, depth),), axes, dt, shape)

    def _m_permute(self, dt, shape, depth):
        order = tuple(int(i) for i in self.rng.permutation(len(shape)))
        src = tuple(shape[order.index(i)] for i in range(len(shape)))  # src[order[j]] = shape[j]
        return Node("permute", (self.value(dt, src, depth),), order, dt, shape)

    def _m_reshape(self, dt, shape, depth):
        n = math.prod(shape)
        src = self.pick([s for s in SHAPES if math.prod(s) == n] + [(n,)])
        return Node("reshape", (self.value(dt, src, depth),), shape, dt, shape)

    def _m_expand(self, dt, shape, depth):
        src = tuple(1 if self.rng.random() < 0.5 else d for d in shape)
        return Node("expand", (self.value(dt, src, depth),), shape, dt, shape)

    def _m_slice(self, dt, shape, depth):
        """x[start:stop:step] per axis, steps in +-1..3, from a source at least as long."""
        src, sl = [], []
        for d in shape:
            step = int(self.pick((1, 1, 2, 3, -1, -2)))
            extra = int(self.rng.integers(0, 3))
            m = max(d * abs(step) - abs(step) + 1, 0) + extra if d else extra
            lo = int(self.rng.integers(0, m - (d - 1) * abs(step))) if d else 0
            start, stop = (lo, lo + (d - 1) * step + 1) if step > 0 else (m - 1 - lo, m - 1 - lo + (d - 1) * step - 1)
            src.append(m)
            sl.append((start, None if stop < 0 else stop, step) if d else (0, 0, 1))
        return Node("slice", (self.value(dt, tuple(src), depth),), tuple(sl), dt, shape)

    def _m_pad(self, dt, shape, depth):
        if not shape:
            return None
        pads = []
        for d in shape:
            before = int(self.rng.integers(0, min(d, 2) + 1))
            after = int(self.rng.integers(0, min(d - before, 2) + 1))
            pads.append((before, after))
        src = tuple(d - b - a for d, (b, a) in zip(shape, pads, strict=True))
        return Node("pad", (self.value(dt, src, depth),), tuple(pads), dt, shape)

    def _m_index(self, dt, shape, depth):
        """x[..., i, ...] with an int (possibly negative) at one axis of a source with that axis inserted."""
        axis, m = int(self.rng.integers(len(shape) + 1)), int(self.rng.integers(1, 4))
        i = int(self.rng.integers(-m, m))
        return Node("index", (self.value(dt, (*shape[:axis], m, *shape[axis:]), depth),), (axis, i), dt, shape)

    def inexact(self, depth: int) -> Node:
        """A float sum/mean/prod over one axis, or a transcendental function, of an exact subtree."""
        dt, shape = self.pick(FLOATS), self.pick(SHAPES)
        if self.rng.random() < 0.5:
            name = self.pick(list(TRANSCENDENTAL))
            return Node(name, (self.value(dt, shape, depth),), None, dt, shape)
        axis, n = int(self.rng.integers(len(shape) + 1)), int(self.pick((1, 3, 8, 40)))
        src = (*shape[:axis], n, *shape[axis:])
        return Node(self.pick(INEXACT_REDUCE), (self.value(dt, src, depth),), (axis, False), dt, shape)


def is_inexact(node: Node) -> bool:
    """Whether `node` is compared within a bound (a float sum/mean/prod or a transcendental function)."""
    return node.op in TRANSCENDENTAL or (node.op in INEXACT_REDUCE and node.dtype in FLOATS)


def generate(seed: int) -> Program:
    """Program number `seed`: the same tree and inputs in every process."""
    d = _Drawer(seed)
    depth = int(d.rng.integers(1, 4))
    if d.rng.random() < 0.3:
        root = d.inexact(depth - 1)
    else:
        root = d.value(d.pick(DTYPES), d.pick(SHAPES), depth)
        if root.op == "input":  # at least one op
            root = Node("neg" if root.dtype in UNARY_DTYPES["neg"] else "invert", (root,), None, root.dtype,
                        root.shape)
    return Program(seed, root, d.inputs)


# ---------------------------------------------------------------- building and evaluating

MOVES: dict[str, tuple[Callable, Callable]] = {
    "flip": (lambda t, a: t.flip(a), lambda x, a: np.flip(x, a)),
    "permute": (lambda t, a: t.permute(*a), lambda x, a: np.transpose(x, a)),
    "reshape": (lambda t, a: t.reshape(*a), lambda x, a: x.reshape(a)),
    "expand": (lambda t, a: t.expand(*a), lambda x, a: np.broadcast_to(x, a)),
    "slice": (lambda t, a: t[tuple(slice(*s) for s in a)], lambda x, a: x[tuple(slice(*s) for s in a)]),
    "pad": (lambda t, a: t.pad(a), lambda x, a: np.pad(x, a)),
    "index": (lambda t, a: t[(slice(None),) * a[0] + (a[1],)], lambda x, a: x[(slice(None),) * a[0] + (a[1],)]),
}


def build(node: Node, tensors: list) -> Any:
    """The node on Tolk tensors (`tensors[i]` is input i)."""
    if node.op == "input":
        return tensors[node.arg]
    kids = [build(k, tensors) for k in node.kids]
    if node.op in UNARY or node.op in BINARY or node.op in COMPARE:
        return {**UNARY, **BINARY, **COMPARE}[node.op].tolk(kids, node.arg)
    if node.op in MOVES:
        return MOVES[node.op][0](kids[0], node.arg)
    if node.op in TRANSCENDENTAL:
        return TRANSCENDENTAL[node.op][0](kids[0])
    if node.op == "where":
        return kids[0].where(kids[1], kids[2])
    if node.op == "cast":
        return kids[0].cast(node.arg)
    if node.op == "gather":
        return kids[0][kids[1]]
    axis, keep = node.arg
    return getattr(kids[0], node.op)(axis=axis, keepdim=keep)


def _np_reduce(op: str, x: np.ndarray, axis: int, keep: bool, out_dt: str) -> np.ndarray:
    if op in ("argmax", "argmin"):
        r = getattr(np, op)(x, axis=axis, keepdims=keep)
    elif op in ("any", "all", "max", "min"):
        r = getattr(np, op)(x, axis=axis, keepdims=keep)
    elif op == "sum" and out_dt in INTS:
        with np.errstate(all="ignore"):
            r = x.astype(out_dt).sum(axis=axis, keepdims=keep, dtype=out_dt)
    else:  # the inexact float reductions: the float64 value, rounded once (compare.py bounds the difference)
        r = getattr(np, op)(x.astype(np.float64), axis=axis, keepdims=keep)
    return np.asarray(r).astype(np_dtype(out_dt))


def reference(node: Node, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(numpy value, defined mask) of `node`. Transcendental and inexact reductions yield the float64 value
    (not rounded) so the comparison can measure the error; every other node yields its dtype."""
    if node.op == "input":
        x = inputs[node.arg]
        return x, np.ones(x.shape, bool)
    vals, masks = zip(*(reference(k, inputs) for k in node.kids), strict=True)
    out_shape = node.shape
    if node.op in MOVES:
        return MOVES[node.op][1](vals[0], node.arg), MOVES[node.op][1](masks[0], node.arg)
    if node.op == "gather":
        idx = vals[1].astype(np.int64)
        return vals[0][idx], masks[0][idx] & masks[1].reshape(idx.shape + (1,) * (vals[0].ndim - 1))
    if node.op in INEXACT_REDUCE or node.op in _EXACT_REDUCE:
        return _reduce_ref(node, vals[0], masks[0])
    mask = np.ones(out_shape, bool)
    for m in masks:
        mask = mask & m
    if node.op in TRANSCENDENTAL:
        with np.errstate(all="ignore"):
            return TRANSCENDENTAL[node.op][1](vals[0].astype(np.float64)), mask
    if node.op == "where":
        return np.where(*vals).astype(np_dtype(node.dtype)), mask
    if node.op == "cast":
        bad = _cast_undef(vals, node.arg, None)
        return _cast_ref(vals, node.arg), mask & ~bad if bad is not None else mask
    if node.op in UNARY or node.op in BINARY or node.op in COMPARE:
        opdef = {**UNARY, **BINARY, **COMPARE}[node.op]
        out = np.asarray(opdef.ref(list(vals), node.arg))
        bad = opdef.undef(list(vals), node.arg, out) if opdef.undef else None
        return out, mask & ~bad if bad is not None and out.size else mask
    raise ValueError(f"unknown op {node.op}")


_EXACT_REDUCE = ("max", "min", "any", "all", "argmax", "argmin", "sum")


def _reduce_ref(node: Node, x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A reduction's value and defined mask: undefined where any reduced element is (an integer sum past its
    dtype's range wraps as numpy's, and is compared)."""
    axis, keep = node.arg
    with np.errstate(all="ignore"):
        out = _np_reduce(node.op, x, axis, keep, "float64" if is_inexact(node) else node.dtype)
    mask = np.all(mask, axis=axis, keepdims=keep)
    if node.op in ("max", "min") and is_float(x.dtype) and x.size:  # which zero: see _zero_sign_undef
        x64 = x.astype(np.float64)
        mask = mask & ~(np.any((x64 == 0) & np.signbit(x64), axis=axis, keepdims=keep) & (out == 0))
    return out, mask
