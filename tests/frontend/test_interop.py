"""Memory shared with numpy and torch (docs/interop.md): `__array__`, `__dlpack__`, `Tensor.from_dlpack`,
`ndarray op Tensor`, what shared memory sees after writes, jitted outputs, CopyRequiredError."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import tolk_core
from tests.conftest import has_opencl
from tolk_core import Tensor
from tolk_core.errors import CopyRequiredError

torch = pytest.importorskip("torch", reason="torch 2.13 CPU (make install) is the DLPack peer")


def ptr(t: Tensor) -> int:
    return np.from_dlpack(t).ctypes.data


def test_numpy_tolk_torch_tolk_round_trip_shares_one_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor.from_dlpack(a, device="CPU")
    tt = torch.from_dlpack(t)
    back = Tensor.from_dlpack(tt, device="CPU")
    assert a.ctypes.data == ptr(t) == tt.data_ptr() == ptr(back) == np.asarray(back).ctypes.data
    assert tt.shape == (3, 4) and tt.dtype == torch.float32
    np.testing.assert_array_equal((back + 1).numpy(), a + 1)
    np.testing.assert_array_equal(tt.numpy(), a)


@pytest.mark.parametrize("dt", [np.int64, np.bool_, np.float64, np.uint8])
def test_round_trip_keeps_dtype_and_memory(dt):
    a = (np.arange(6) % 3).astype(dt)
    t = Tensor.from_dlpack(a, device="CPU")
    assert t.dtype.name == {np.int64: "int64", np.bool_: "bool", np.float64: "float64", np.uint8: "uint8"}[dt]
    tt = torch.from_dlpack(t)
    assert tt.data_ptr() == a.ctypes.data
    np.testing.assert_array_equal(np.asarray(t), a)


def test_writes_seen_through_shared_memory():
    a = np.zeros(4, np.float32)
    t = Tensor.from_dlpack(a, device="CPU")
    view = np.asarray(t)
    t[1] = 5.0  # a Tolk write into the storage: seen by the array it came from and by exports
    assert a.tolist() == [0, 5, 0, 0] and view.tolist() == [0, 5, 0, 0]
    lazy = t * 2  # built before the next write, computed after it: reads the memory as it then is
    a[2] = 7.0  # a write through numpy: Tolk's eager-semantics bookkeeping does not see it
    assert t.numpy().tolist() == [0, 5, 7, 0]
    assert lazy.numpy().tolist() == [0, 10, 14, 0]
    t.assign(Tensor([1.0, 2.0, 3.0, 4.0], device="CPU"))
    assert view.tolist() == [1, 2, 3, 4] and a.tolist() == [1, 2, 3, 4]


def test_export_of_a_computed_tensor_is_shared_and_keeps_its_storage():
    t = (Tensor(np.arange(256, dtype=np.float32), device="CPU") * 2).realize()
    arr = np.asarray(t)
    assert arr.ctypes.data == ptr(t) and not arr.flags.owndata
    del t
    gc.collect()
    # same-sized allocations after the Tensor is gone: the allocator must not hand out the exported memory
    others = [(Tensor.full((256,), float(i), device="CPU") + 1).realize() for i in range(8)]
    np.testing.assert_array_equal(arr, np.arange(256, dtype=np.float32) * 2)
    assert all(np.asarray(o)[0] == i + 1 for i, o in enumerate(others))


def test_ndarray_op_tensor_is_a_tensor():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    t = Tensor([10.0, 20.0, 30.0], device="CPU")
    for got, want in ((a + t, a + 10 * a), (a * t, a * 10 * a), (a - t, a - 10 * a), (a < t, a < 10 * a)):
        assert isinstance(got, Tensor)
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(TypeError, match="does not support ufuncs"):
        np.exp(t)


def test_copy_true_copies():
    a = np.arange(4, dtype=np.float32)
    t = Tensor.from_dlpack(a, device="CPU", copy=True)
    assert ptr(t) != a.ctypes.data
    arr = np.asarray(t, copy=True)
    assert arr.ctypes.data != ptr(t)
    np.testing.assert_array_equal(arr, a)


def test_copy_false_where_a_copy_is_needed_is_a_named_error():
    ro = np.arange(4, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(CopyRequiredError, match="read-only"):
        Tensor.from_dlpack(ro, device="CPU", copy=False)
    strided = np.arange(8, dtype=np.float32)[::2]
    with pytest.raises(CopyRequiredError, match="not C-contiguous"):
        Tensor.from_dlpack(strided, device="CPU", copy=False)
    # copy=None copies those: the values are the array's, the memory is new
    t = Tensor.from_dlpack(strided, device="CPU")
    assert t.numpy().tolist() == [0, 2, 4, 6] and ptr(t) != strided.ctypes.data
    with pytest.raises(CopyRequiredError, match="converting float32 to float64"):
        np.asarray(t, dtype=np.float64, copy=False)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError):  # numpy's contract for copy=False: a ValueError
        np.asarray(t, dtype=np.float64, copy=False)


@pytest.mark.skipif(not has_opencl(), reason="no OpenCL platform (make opencl installs PoCL)")
def test_a_device_whose_memory_is_not_the_hosts_copies():
    a = np.arange(4, dtype=np.float32)
    with pytest.raises(CopyRequiredError, match="OPENCL:0's memory is not the host's"):
        Tensor.from_dlpack(a, device="OPENCL", copy=False)
    t = Tensor.from_dlpack(a, device="OPENCL")
    with pytest.raises(CopyRequiredError, match="OPENCL:0's memory is not the host's"):
        np.asarray(t, copy=False)
    assert torch.from_dlpack(t).tolist() == [0, 1, 2, 3]


def test_export_of_a_jitted_output_is_a_copy_the_next_call_does_not_change():
    @tolk_core.jit
    def f(x):
        return (x * 2 + 1).realize()
    outs, arrays = [], []
    for i in range(4):
        out = f(Tensor.full((16,), float(i), device="CPU").realize())
        outs.append(out)
        arrays.append(np.asarray(out))
        if i >= 1:  # the first call runs eagerly: its output is ordinary storage, shared
            with pytest.raises(CopyRequiredError, match="jitted function's output"):
                np.asarray(out, copy=False)
    # the replays (calls 2 and 3) wrote into the same memory: each exported array kept its call's values
    from tolk_core.engine import buffers
    assert buffers.base_buffer(outs[2].uop) is buffers.base_buffer(outs[3].uop)
    for i, arr in enumerate(arrays):
        np.testing.assert_array_equal(arr, np.full(16, 2.0 * i + 1, np.float32))


def test_from_dlpack_inside_a_jitted_function_reads_each_calls_argument():
    @tolk_core.jit
    def f(a):
        return (Tensor.from_dlpack(a, device="CPU") + 1).realize()
    for i in range(4):
        a = np.full(8, float(i), np.float32)
        np.testing.assert_array_equal(f(a).numpy(), a + 1)
