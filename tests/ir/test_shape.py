"""Movement maths: shapes, and output->input index mapping checked against numpy on arange data."""
import itertools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tolk_core.errors import ShapeError
from tolk_core.ir import Op, UOp, Variable, dtypes
from tolk_core.ir.shape import apply_movement_op, movement_shape


def _factor(nn: int) -> list[int]:
    fs, p = [], 2
    while nn > 1:
        while nn % p == 0:
            fs.append(p)
            nn //= p
        p += 1
    return fs


def _random_op(rng: random.Random, shape: tuple[int, ...]):
    nd = len(shape)
    kind = rng.choice([Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.PAD, Op.SHRINK, Op.FLIP])
    if kind is Op.RESHAPE or (kind is Op.EXPAND and 1 not in shape):
        fs = _factor(int(np.prod(shape)))
        rng.shuffle(fs)
        groups: list[int] = []
        for f in fs:
            if groups and rng.random() < 0.4:
                groups[-1] *= f
            else:
                groups.append(f)
        for _ in range(rng.randint(0, 2)):
            groups.insert(rng.randint(0, len(groups)), 1)
        if int(np.prod(shape)) == 0:
            groups.insert(rng.randint(0, len(groups)), 0)
        return Op.RESHAPE, tuple(groups) if groups else (1,)
    if kind is Op.PERMUTE:
        order = list(range(nd))
        rng.shuffle(order)
        return kind, tuple(order)
    if kind is Op.EXPAND:
        return kind, tuple(rng.randint(1, 3) if s == 1 else s for s in shape)
    if kind is Op.PAD:
        return kind, tuple((rng.randint(0, 2), rng.randint(0, 2)) if rng.random() < 0.5 else (0, 0) for _ in shape)
    if kind is Op.SHRINK:
        arg = []
        for s in shape:
            st_ = rng.randint(0, s)
            arg.append((st_, rng.randint(st_, s)))
        return kind, tuple(arg)
    return kind, tuple(rng.random() < 0.5 for _ in shape)


def _np_apply(x: np.ndarray, op: Op, arg) -> np.ndarray:
    if op is Op.RESHAPE:
        return x.reshape(arg)
    if op is Op.PERMUTE:
        return x.transpose(arg)
    if op is Op.EXPAND:
        return np.broadcast_to(x, arg)
    if op is Op.PAD:
        return np.pad(x, arg, constant_values=-1)
    if op is Op.SHRINK:
        return x[tuple(slice(s, e) for s, e in arg)]
    return np.flip(x, axis=tuple(i for i, f in enumerate(arg) if f)) if any(arg) else x


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32))
def test_movement_chains_match_numpy(seed):
    rng = random.Random(seed)
    shape0 = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))
    data = np.arange(int(np.prod(shape0))).reshape(shape0)
    chain, shape, x = [], shape0, data
    for _ in range(rng.randint(1, 5)):
        op, arg = _random_op(rng, shape)
        if int(np.prod(movement_shape(op, shape, arg))) > 400:
            continue
        chain.append((op, shape, arg))
        shape = movement_shape(op, shape, arg)
        x = _np_apply(x, op, arg)
        assert shape == x.shape
    out_vars = tuple(Variable(f"o{d}", 0, max(s - 1, 0)) for d, s in enumerate(shape))
    idxs, valid = out_vars, None
    for op, in_shape, arg in reversed(chain):
        idxs, v = apply_movement_op(op, in_shape, arg, idxs)
        if v is not None:
            valid = v if valid is None else (valid & v)
    flat = UOp.const(dtypes.index, 0)
    for ix, s in zip(idxs, shape0, strict=True):
        flat = flat * s + ix
    flat = flat.simplify()
    valid = valid.simplify() if valid is not None else None
    for pos in itertools.product(*(range(s) for s in shape)):
        vals = {f"o{d}": p for d, p in enumerate(pos)}
        ok = True if valid is None else valid.eval(vals)
        want = x[pos]
        assert ok == (want != -1), (chain, pos)
        if ok:
            assert flat.eval(vals) == want, (chain, pos, flat.render())


def test_symbolic_reshape_roundtrip():
    n = Variable("n", 1, 8)
    i, j = Variable("i", 0, 7), Variable("j", 0, 3)
    r0 = UOp(Op.RANGE, dtypes.index, (n,), 0)
    # (n*4,) -> (n, 4): one flat input index; (n, 4) -> (n*4,): the indices come back unchanged
    (flat,), v = apply_movement_op(Op.RESHAPE, (n * 4,), (n, 4), (r0, j))
    assert v is None and flat.render() == "((ridx0*4)+j)"
    (a, b), v = apply_movement_op(Op.RESHAPE, (n, 4), (n * 4,), (flat,))
    assert v is None and a.render() == "ridx0" and b.render() == "j"
    (p,), v = apply_movement_op(Op.PAD, (n,), ((1, 2),), (i,))
    assert p.render() == "(i-1)"
    assert v.eval({"i": 0, "n": 3}) is False and v.eval({"i": 1, "n": 3}) is True and v.eval({"i": 4, "n": 3}) is False
    (f,), v = apply_movement_op(Op.FLIP, (n,), (True,), (i,))
    assert v is None and f.eval({"i": 2, "n": 5}) == 2
    assert movement_shape(Op.PAD, (n, 4), ((1, 1), (0, 2)))[1] == 6
    assert str(movement_shape(Op.PAD, (n, 4), ((1, 1), (0, 2)))[0]) == "(n+2)"
    assert movement_shape(Op.EXPAND, (1, n), (3, n)) == (3, n)
    assert str(movement_shape(Op.SHRINK, (n, 4), ((0, n - 1), (1, 3)))[0]) == "(n-1)"


@pytest.mark.parametrize("op,shape,arg,msg", [
    (Op.RESHAPE, (2, 3), (4, 2), r"reshape \(2, 3\) -> \(4, 2\)"),
    (Op.PERMUTE, (2, 3), (0, 0), "not a permutation"),
    (Op.EXPAND, (2, 3), (4, 3), r"expand \(2, 3\) -> \(4, 3\)"),
    (Op.PAD, (2, 3), ((0, 1),), "per axis"),
    (Op.SHRINK, (2, 3), ((0, 3), (0, 3)), "start <= end <= size"),
    (Op.FLIP, (2, 3), (True,), "one bool per axis"),
])
def test_movement_errors_name_shapes(op, shape, arg, msg):
    with pytest.raises(ShapeError, match=msg):
        movement_shape(op, shape, arg)


def _sym_chains(n):
    """Chains over a symbolic first axis n (valid for every n >= 2)."""
    return [
        [(Op.RESHAPE, (n * 3,)), (Op.RESHAPE, (n, 3))],
        [(Op.PERMUTE, (1, 0)), (Op.FLIP, (True, True)), (Op.PAD, ((1, 0), (0, 2)))],
        [(Op.PAD, ((1, 2), (0, 0))), (Op.SHRINK, ((1, n + 2), (1, 3))), (Op.FLIP, (True, False))],
        [(Op.RESHAPE, (n, 1, 3)), (Op.EXPAND, (n, 2, 3)), (Op.PERMUTE, (2, 0, 1)), (Op.RESHAPE, (3, n * 2))],
        [(Op.SHRINK, ((1, n), (0, 3))), (Op.PAD, ((0, 1), (2, 0))), (Op.RESHAPE, (n * 5,)), (Op.FLIP, (True,))],
    ]


@pytest.mark.parametrize("which", range(5))
def test_symbolic_movement_chains_match_numpy(which):
    """The same chain built once over a symbolic size n, evaluated at several n, agrees with numpy."""
    n = Variable("n", 2, 5)
    chain = _sym_chains(n)[which]
    shapes = [(n, 3)]
    for op, arg in chain:
        shapes.append(movement_shape(op, shapes[-1], arg))
    out_vars = tuple(Variable(f"o{d}", 0, 64) for d in range(len(shapes[-1])))
    idxs, valid = out_vars, None
    for (op, arg), in_shape in zip(reversed(chain), reversed(shapes[:-1]), strict=True):
        idxs, v = apply_movement_op(op, in_shape, arg, idxs)
        if v is not None:
            valid = v if valid is None else valid & v
    flat = (idxs[0] * 3 + idxs[1]).simplify()
    for nv in range(2, 6):
        x = np.arange(nv * 3).reshape(nv, 3)
        for op, arg in _sym_chains(nv)[which]:
            x = _np_apply(x, op, arg)
        assert x.shape == tuple(s if isinstance(s, int) else s.eval({"n": nv}) for s in shapes[-1])
        for pos in itertools.product(*(range(s) for s in x.shape)):
            vals = {"n": nv, **{f"o{d}": p for d, p in enumerate(pos)}}
            ok = True if valid is None else valid.eval(vals)
            assert ok == (x[pos] != -1), (which, nv, pos)
            if ok:
                assert flat.eval(vals) == x[pos], (which, nv, pos, flat.render())
