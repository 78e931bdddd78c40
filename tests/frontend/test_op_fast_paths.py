"""The front end's fast paths for its most used ops (elementwise operands, permute, split/chunk, two-shape
broadcast) build exactly the nodes of the general paths they bypass (interned nodes: the same objects), and
interned dtypes keep value semantics. Values against numpy where the result is data."""
from __future__ import annotations

import copy
import itertools
import pickle

import numpy as np
import pytest

from tolk_core import Tensor
from tolk_core.errors import ShapeError
from tolk_core.frontend.movement import broadcast_shape
from tolk_core.ir.dtype import AddrSpace, DType, PtrDType, dtypes
from tolk_core.ir.ops import Op


def _lazy(shape, dtype=np.float32, seed=0):
    """A computed (not stored) tensor of `shape`: the operand an op usually gets."""
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype)) * 1


BINARY = {"add": (Op.ADD, lambda a, b: a + b), "radd": (Op.ADD, lambda a, b: b + a),
          "mul": (Op.MUL, lambda a, b: a * b), "rmul": (Op.MUL, lambda a, b: b * a)}
OTHERS = {"same shape": lambda: _lazy((3, 5), seed=1), "row": lambda: _lazy((5,), seed=1),
          "column": lambda: _lazy((3, 1), seed=1), "int": lambda: 3, "float": lambda: -2.5, "minus zero": lambda: -0.0}


@pytest.mark.parametrize("other", sorted(OTHERS))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_fast_path_makes_the_general_paths_node(name, other):
    op, fn = BINARY[name]
    a, b = _lazy((3, 5)), OTHERS[other]()
    got = fn(a, b)
    x, y = a._coerce(b, reflected=name.startswith("r"))  # the general path: operands as Tensors, then the node
    assert got.uop is x._alu(op, y).uop
    want = fn(a.numpy(), b.numpy() if isinstance(b, Tensor) else np.float32(b))
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("other", sorted(OTHERS))
def test_difference_fast_path_makes_the_general_paths_node(other):
    a, b = _lazy((3, 5)), OTHERS[other]()
    for reflected, got in ((False, a - b), (True, b - a)):
        x, y = a._coerce(b, reflected)
        assert got.uop is x._alu(Op.ADD, -y).uop
    bn = b.numpy() if isinstance(b, Tensor) else np.float32(b)
    np.testing.assert_array_equal((a - b).numpy(), a.numpy() - bn)
    np.testing.assert_array_equal((b - a).numpy(), bn - a.numpy())


def test_difference_keeps_the_sign_of_zero():
    # 0.0 - 0.0 is +0.0 and -0.0 - 0.0 is -0.0: NEG then ADD as numpy's subtraction gives them
    z = Tensor(np.array([0.0, -0.0], np.float32)) * 1
    np.testing.assert_array_equal(np.signbit((0.0 - z).numpy()), np.signbit(np.float32(0.0) - z.numpy()))
    np.testing.assert_array_equal(np.signbit((-0.0 - z).numpy()), np.signbit(np.float32(-0.0) - z.numpy()))


def test_operands_the_fast_path_leaves_to_the_general_path():
    i = Tensor(np.array([1, 2, 3], np.int32)) + 0
    f = _lazy((3,))
    # a float scalar with ints promotes; ints of two dtypes promote; bools do not subtract
    np.testing.assert_allclose((i * 0.5).numpy(), np.array([1, 2, 3], np.int32) * 0.5)
    assert (i * 0.5).dtype == dtypes.default_float
    assert (i + f).dtype == dtypes.float32
    big = Tensor(np.array([1, 2], np.int64)) + 0
    assert (i[:2] + big).dtype == dtypes.int64
    with pytest.raises(TypeError):
        _ = (Tensor(np.array([True, False])) * 1 > 0) - (Tensor(np.array([True, True])) * 1 > 0)
    with pytest.raises(ShapeError):
        _ = _lazy((3, 5)) + _lazy((4,))


@pytest.mark.parametrize("order", [(1, 0, 2), (2, 1, 0), (0, 1, 2), (2, 0, 1)])
def test_permute_fast_path_makes_the_checked_node(order):
    a = _lazy((2, 3, 4))
    got = a.permute(order)
    assert got.uop is (a if order == (0, 1, 2) else a._mop(Op.PERMUTE, order)).uop
    np.testing.assert_array_equal(got.numpy(), a.numpy().transpose(order))
    np.testing.assert_array_equal(a.permute(*order).numpy(), a.numpy().transpose(order))


def test_permute_general_cases_still_checked():
    a = _lazy((2, 3, 4))
    np.testing.assert_array_equal(a.permute(-1, 0, 1).numpy(), a.numpy().transpose(2, 0, 1))
    for bad in ((0, 0, 1), (0, 1), (0, 1, 3)):
        with pytest.raises(ShapeError):
            a.permute(bad)
    assert a.T.uop is a.permute(2, 1, 0).uop
    np.testing.assert_array_equal(a.T.numpy(), a.numpy().T)


@pytest.mark.parametrize("size,n,dim", [(12, 3, 1), (10, 3, 1), (7, 7, 0), (7, 1, 0), (5, 2, -1), (0, 3, 1)])
def test_chunk_and_split_pieces_are_shrinks(size, n, dim):
    shape = (size, 4) if dim == 0 else (4, size)
    a = _lazy(shape)
    axis = dim % 2
    pieces = a.chunk(n, dim)
    step = max(-(-size // n), 1)
    starts = list(range(0, size, step)) or [0]
    assert len(pieces) == len(starts)
    ends = [min(s + step, size) for s in starts]
    for piece, s, e in zip(pieces, starts, ends, strict=True):  # nodes first: reading values realizes `a`
        window = tuple((s, e) if ax == axis else (0, d) for ax, d in enumerate(shape))
        assert piece.uop is (a if e - s == size else a._mop(Op.SHRINK, window)).uop
    for piece, s, e in zip(pieces, starts, ends, strict=True):
        np.testing.assert_array_equal(piece.numpy(), a.numpy()[(slice(None),) * axis + (slice(s, e),)])
    if size:  # a split size below one is refused where there is something to split
        with pytest.raises(ShapeError):
            a.split(0, dim)


SHAPES = [(), (1,), (3,), (2, 3), (1, 3), (2, 1), (4, 1, 3), (4, 2, 3), (0,), (1, 0), (0, 3), (3, 1, 1)]


def test_broadcast_shape_of_two_is_numpys():
    for a, b in itertools.product(SHAPES, SHAPES):
        try:
            want = np.broadcast_shapes(a, b)
        except ValueError:
            with pytest.raises(ShapeError):
                broadcast_shape(a, b)
            continue
        assert broadcast_shape(a, b) == want, (a, b)


def test_dtypes_are_interned_values():
    f = dtypes.float32
    assert DType("float32", 4, "f") is f and f.vec(4) is f.vec(4) and f.vec(4).scalar() is f
    assert f.vec(4) == DType("float32", 4, "f", 4) and hash(f.vec(4)) == hash(DType("float32", 4, "f", 4))
    p = f.ptr()
    assert p is f.ptr() and p is PtrDType("float32", 4, "f", 1, base=f) and p != f
    assert f.ptr(16, AddrSpace.LOCAL) is not f.ptr(16) and f.ptr(16, AddrSpace.LOCAL) == f.ptr(16, AddrSpace.LOCAL)
    for dt in (f, f.vec(8), p, f.ptr(16, AddrSpace.LOCAL).vec(2), dtypes.bfloat16):
        assert pickle.loads(pickle.dumps(dt)) is dt and copy.deepcopy(dt) is dt and copy.copy(dt) is dt
    assert {dtypes.int32: 1}[DType("int32", 4, "i")] == 1


def test_realized_views_and_detaches_record_the_shape_their_op_gives():
    """A realized tensor's storage view and a detach carry their shape from construction; it is the one the op
    gives (`_compute_shape` over the node), values unchanged."""
    from tolk_core.ir.uop import _compute_shape
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = Tensor(x)
    for t, want in [(a, x), ((a * 2).realize(), x * 2), (a.detach(), x), ((a + 1).detach(), x + 1),
                    (a[1].contiguous().realize(), x[1])]:
        u = t.uop
        assert u.op in (Op.RESHAPE, Op.DETACH, Op.BUFFER), u.op
        recorded = u.shape
        for s in u.src:
            s.shape  # noqa: B018  (sources first: _compute_shape reads their shapes)
        assert recorded == _compute_shape(u) == want.shape
        np.testing.assert_array_equal(t.numpy(), want)
