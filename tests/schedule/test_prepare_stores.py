"""prepare_rangeify's store rules, values against numpy on every compiled device: stores across devices, bit-run
stores, store hazards into whole flat storage. (Their normal forms are asserted in test_prepare.py, next to the
check that every rule fired; repeated stores and resolve_returned_after are reached from call bodies that store,
in test_prepare_calls.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import _available
from tests.frontend.helpers import close
from tolk_core.errors import TolkError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule import prepare
from tolk_core.schedule.prepare import BitRunStoreError, prepare_rangeify

A = np.random.default_rng(5).standard_normal(8).astype(np.float32)


def _store(dest: UOp, value: UOp) -> UOp:
    return UOp(Op.STORE, dtypes.void, (dest, value))


def _prepared(*stores: UOp) -> UOp:
    return prepare_rangeify(UOp(Op.SINK, dtypes.void, stores))


# ---------------------------------------------------------------- a store across devices
@pytest.mark.parametrize("into", ["whole", "slice", "bitcast"])
def test_assign_across_devices_equals_numpy(device, into) -> None:
    other = "CPU" if device == "OPENCL" else "OPENCL"
    ok, why = _available(other)
    if not ok:
        pytest.skip(why)
    x, want = Tensor(A.copy(), device=device).realize(), A.copy()
    value = Tensor(np.arange(8, dtype=np.float32), device=other)
    if into == "whole":
        x.assign(value * 2 + 1)
        want[:] = np.arange(8) * 2 + 1
    elif into == "slice":
        x[2:5].assign(value[:3].exp())
        want[2:5] = np.exp(np.arange(3, dtype=np.float32))
    else:
        x.bitcast(dtypes.int32).assign(value.bitcast(dtypes.int32) + 1)
        want.view(np.int32)[:] = np.arange(8, dtype=np.float32).view(np.int32) + 1
    close(x.numpy(), want)


# ---------------------------------------------------------------- bit-run stores


def test_a_store_through_a_bitcast_that_is_not_a_run_is_refused() -> None:
    buf = UOp.new_buffer("CPU", 4, dtypes.float32)
    half = UOp(Op.SHRINK, dtypes.uint8, (UOp(Op.BITCAST, dtypes.uint8, (buf,)),), ((4, 6),))  # half an element
    with pytest.raises(BitRunStoreError, match=r"cannot store through SHRINK \(2,\) of uint8: .* run of whole "
                                               "elements of its storage") as e:
        _prepared(_store(half, UOp.new_buffer("CPU", 2, dtypes.uint8)))
    assert isinstance(e.value, TolkError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("case", ["bytes", "halves", "widen", "row-2d"])
def test_bit_run_stores_equal_numpy(device, case) -> None:
    x, want = Tensor(A.copy(), device=device).realize(), A.copy()
    if case == "bytes":
        v = np.arange(1, 9, dtype=np.uint8)
        x.bitcast(dtypes.uint8)[4:12].assign(Tensor(v, device=device))
        want.view(np.uint8)[4:12] = v
    elif case == "halves":
        v = np.array([1.5, -2, 3, 65504], np.float16)
        x.bitcast(dtypes.float16)[6:10].assign(Tensor(v, device=device) * 1)
        want.view(np.float16)[6:10] = v
    elif case == "widen":
        v = np.array([[1 << 40], [-3], [7], [1]], np.int64)
        x.reshape(4, 2).bitcast(dtypes.int64).assign(Tensor(v, device=device))
        want.view(np.int64)[:] = v[:, 0]
    else:
        v = np.arange(16, dtype=np.uint8).reshape(2, 8)
        x.reshape(2, 4)[1].bitcast(dtypes.uint8).reshape(2, 8).assign(Tensor(v, device=device))
        want.reshape(2, 4)[1].view(np.uint8)[:] = v.reshape(-1)
    np.testing.assert_array_equal(x.numpy().view(np.uint32), want.view(np.uint32))


# ---------------------------------------------------------------- a repeated store; returned after



@pytest.mark.parametrize("hazard", ["flip", "flip-scaled", "shift", "sum"])
def test_store_hazards_into_whole_flat_storage_equal_numpy(device, hazard) -> None:
    # the destination is the BUFFER itself (a 1-d tensor): the materialised value still gets storage of its own
    x, a = Tensor(A.copy(), device=device).realize(), A.copy()
    if hazard == "flip":
        x.assign(x.flip(0))
        want = a[::-1]
    elif hazard == "flip-scaled":
        x.assign(x.flip(0) * 2)
        want = a[::-1] * 2
    elif hazard == "shift":
        x[1:].assign(x[:-1])
        want = np.concatenate([a[:1], a[:-1]])
    else:
        x.assign(x - x.sum())
        want = a - a.sum()
    close(x.numpy(), want, rtol=1e-5, atol=1e-5)


def test_one_device_spelled_two_ways_is_not_a_store_across_devices() -> None:
    ok, why = _available("OPENCL")
    if not ok:
        pytest.skip(why)
    # the front end puts canonical names into graphs, so prepare compares device names as they are
    dest, src = Tensor.empty(4, device="OPENCL"), Tensor.empty(4, device="opencl:0")
    assert dest.device == src.device == "OPENCL:0"
    value = UOp(Op.NEG, dtypes.float32, (src.uop,))
    assert prepare.pm_before_copies.rewrite(UOp(Op.STORE, dtypes.void, (dest.uop, value))) is None
    # while two devices are one store across devices (a copy of the value)
    other = UOp.new_buffer("CPU", 4, dtypes.float32)
    assert prepare.pm_before_copies.rewrite(UOp(Op.STORE, dtypes.void, (other, value))) is not None
