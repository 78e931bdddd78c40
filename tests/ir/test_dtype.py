import itertools

import ml_dtypes
import numpy as np
import pytest

from tolk_core.errors import DTypeError
from tolk_core.ir.dtype import (
    AddrSpace,
    PtrDType,
    dtypes,
    least_upper_dtype,
    promote_types,
    sum_acc_dtype,
    weak_promote,
)

# pairs where Tolk deliberately differs from numpy (documented in docs/ir.md)
NUMPY_DIFFERS = {
    # int with float: the float operand's type (numpy widens, e.g. int32+float16 -> float64)
    **{frozenset((i, f)): f for i in dtypes.ints for f in dtypes.floats},
    frozenset((dtypes.uint64, dtypes.int8)): dtypes.int64, frozenset((dtypes.uint64, dtypes.int16)): dtypes.int64,
    frozenset((dtypes.uint64, dtypes.int32)): dtypes.int64, frozenset((dtypes.uint64, dtypes.int64)): dtypes.int64,
    frozenset((dtypes.float16, dtypes.bfloat16)): dtypes.float32,
}


@pytest.mark.parametrize("a,b", list(itertools.combinations_with_replacement(dtypes.all, 2)))
def test_promotion_pairwise(a, b):
    r = promote_types(a, b)
    assert r == promote_types(b, a)
    key = frozenset((a, b))
    if key in NUMPY_DIFFERS:
        assert r == NUMPY_DIFFERS[key]
    elif dtypes.bfloat16 in key:  # numpy has no opinion on bf16 we trust; category rule
        other = b if a == dtypes.bfloat16 else a
        assert r == (other if other.kind == "f" and other.itemsize > 2 else dtypes.bfloat16)
    else:
        assert dtypes.to_np(r) == np.result_type(dtypes.to_np(a), dtypes.to_np(b)), (a, b, r)


def test_promotion_rules():
    assert promote_types(dtypes.bool, dtypes.int8) == dtypes.int8
    assert promote_types(dtypes.int32, dtypes.float16) == dtypes.float16
    assert promote_types(dtypes.uint8, dtypes.int8) == dtypes.int16
    assert promote_types(dtypes.bfloat16, dtypes.float16) == dtypes.float32
    assert promote_types(dtypes.index, dtypes.int32) == dtypes.index
    assert least_upper_dtype(dtypes.bool, dtypes.uint8, dtypes.float32) == dtypes.float32
    assert promote_types(dtypes.float32.vec(4), dtypes.float16.vec(4)) == dtypes.float32.vec(4)
    assert weak_promote(dtypes.int8, 2.0) == dtypes.float32 and weak_promote(dtypes.int8, 3) == dtypes.int8
    assert weak_promote(dtypes.bool, 3) == dtypes.int32 and weak_promote(dtypes.float16, 3.0) == dtypes.float16


def test_sum_acc():
    assert sum_acc_dtype(dtypes.bool) == dtypes.int64
    assert sum_acc_dtype(dtypes.int8) == dtypes.int64
    assert sum_acc_dtype(dtypes.uint16) == dtypes.uint64
    assert sum_acc_dtype(dtypes.int32) == dtypes.int64 and sum_acc_dtype(dtypes.uint32) == dtypes.uint64
    assert sum_acc_dtype(dtypes.int64) == dtypes.int64
    assert sum_acc_dtype(dtypes.bfloat16) == dtypes.float32
    assert sum_acc_dtype(dtypes.float64) == dtypes.float64


def test_numpy_roundtrip_and_limits():
    for d in dtypes.all:
        assert dtypes.from_np(dtypes.to_np(d)) == d
        if d.kind in "iu":
            info = np.iinfo(dtypes.to_np(d))
            assert (dtypes.min(d), dtypes.max(d)) == (info.min, info.max)
    assert dtypes.to_np(dtypes.bfloat16) == np.dtype(ml_dtypes.bfloat16)
    assert dtypes.min(dtypes.float32) == -float("inf") and dtypes.max(dtypes.bool) is True


def test_parse_and_repr():
    assert dtypes.parse("half") == dtypes.float16 and dtypes.parse(np.float32) == dtypes.float32
    assert dtypes.parse(bool) == dtypes.bool and dtypes.parse(np.dtype("int8")) == dtypes.int8
    assert dtypes.from_py(True) == dtypes.bool and dtypes.from_py(1) == dtypes.int32
    assert dtypes.from_py(1.0) == dtypes.float32
    with pytest.raises(DTypeError, match="unknown dtype name"):
        dtypes.parse("float7")
    with pytest.raises(DTypeError):
        dtypes.parse(object())
    assert repr(dtypes.float32) == "dtypes.float32" and repr(dtypes.int8.vec(4)) == "dtypes.int8.vec(4)"
    p = dtypes.float32.ptr(16, AddrSpace.LOCAL)
    assert isinstance(p, PtrDType) and p.base == dtypes.float32 and p.size == 16 and p.addrspace is AddrSpace.LOCAL
    assert p != dtypes.float32 and hash(p) != hash(dtypes.float32)
    assert dtypes.float32.vec(4).scalar() == dtypes.float32 and dtypes.float32.vec(4) == dtypes.float32.vec(4)
    assert dtypes.is_int(dtypes.index) and not dtypes.is_int(dtypes.bool) and dtypes.is_unsigned(dtypes.uint8)
