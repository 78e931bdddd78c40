"""Tier runtime: launch semantics of the device's Program on kernels core generated, dtypes by capability."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.ir.uop import Variable
from tolk_core.testing import checks, kernels
from tolk_core.testing.checks import require

pytestmark = pytest.mark.runtime


@pytest.mark.smoke
def test_self_test(tolk_device):
    checks.check_self_test(tolk_device)


@pytest.mark.smoke
def test_generated_kernel(tolk_device):
    try:
        checks.check_generated_kernel(tolk_device)
    except checks.CheckSkipped as e:
        pytest.skip(str(e))


def test_multi_kernel_library_and_inputs_untouched(tolk_device):
    """One compiled library holds several kernels, each selected by name; launches leave their inputs alone."""
    k = kernels.build(lambda a, b: (a.sum(axis=1) * b).softmax(), ((13, 11), "float32"), ((13,), "float32"),
                      device=tolk_device.name)
    require(len(k.calls) >= 2, "test setup", "expected a multi-kernel program")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((13, 11)).astype(np.float32), rng.standard_normal(13).astype(np.float32)
    bound = kernels.bind(tolk_device, k, [a, b])
    kernels.launch_all(bound)
    tolk_device.synchronize()
    s = a.sum(1) * b
    want = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    got = bound.result()
    require(np.allclose(got, want, rtol=1e-5, atol=1e-6), "Program.__call__",
            lambda: f"a {len(k.calls)}-kernel program from one library gave max error {np.abs(got - want).max()}")
    back = np.empty_like(a)
    bound.bufs[k.inputs[0]].copyout(back.reshape(-1).view(np.uint8).data)
    require(np.array_equal(back, a), "Program.__call__", "a launch modified a buffer it only reads")


def test_rebinding_buffers_between_launches(tolk_device):
    """A Program launched again with other buffers computes on those (nothing is cached per launch)."""
    k = kernels.build(lambda a: a * 3 + 1, ((100,), "float32"), device=tolk_device.name)
    xs = [np.arange(100, dtype=np.float32) * s for s in (1, -2)]
    b1, b2 = kernels.bind(tolk_device, k, [xs[0]]), kernels.bind(tolk_device, k, [xs[1]])
    prg = b1.launches[0].program
    for bound, x in ((b1, xs[0]), (b2, xs[1]), (b1, xs[0])):
        ln = bound.launches[0]
        prg(*ln.bufs, global_size=ln.global_size, local_size=ln.local_size)
        tolk_device.synchronize()
        require(np.array_equal(bound.result(), x * 3 + 1), "Program.__call__",
                "launching one Program with different buffers must compute on the buffers passed")


def test_values_are_passed_after_the_buffers(tolk_device):
    """A kernel over a bound Variable takes its value as an int after the buffers; one program, any value."""
    x = np.random.default_rng(4).standard_normal((64, 12)).astype(np.float32)
    n = Variable("n", 1, 64)
    k = kernels.build(lambda a: (a.shrink(((0, n.bind(5)), None)) * 2).sum(axis=0), ((64, 12), "float32"),
                      device=tolk_device.name)
    bound = kernels.bind(tolk_device, k, [x])
    require(all(len(ln.vals) == 1 for ln in bound.launches), "test setup", "expected one value per launch")
    for value in (5, 1, 64, 17):
        for ln in bound.launches:
            ln.program(*ln.bufs, global_size=ln.global_size, local_size=ln.local_size, vals=(value,))
        tolk_device.synchronize()
        got, want = bound.result(), (x[:value] * 2).sum(0)
        require(np.allclose(got, want, rtol=1e-5, atol=1e-5), "Program.__call__",
                f"vals=({value},): max error {np.abs(got - want).max()}; int values follow the buffers")


@pytest.mark.parametrize("wait", [False, True])
def test_wait_returns_time(tolk_device, tolk_record, wait):
    k = kernels.build(lambda a: a + 1, ((10,), "float32"), device=tolk_device.name)
    bound = kernels.bind(tolk_device, k, [np.zeros(10, np.float32)])
    t = kernels.launch_all(bound, wait=wait)[0]
    if not wait:
        require(t is None, "Program.__call__", f"wait=False must return None, got {t!r}")
    elif tolk_record.spec.capabilities.timing:
        require(isinstance(t, float) and t >= 0, "Program.__call__",
                f"wait=True on a device declaring timing must return seconds, got {t!r}")
    require(np.array_equal(bound.result(), np.ones(10, np.float32)), "Program.__call__", "a+1 gave wrong values")


DTYPES = [pytest.param(d, id=d, marks=[pytest.mark.requires(*caps)] if caps else [])
          for d, caps in (("bool", ()), ("int8", ()), ("uint8", ()), ("int16", ()), ("int32", ()), ("int64", ()),
                          ("uint32", ()), ("float32", ()), ("float64", ("float64",)), ("float16", ("half",)))]


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_roundtrip(tolk_device, dtype):
    """Load, compute and store each dtype: where(x < 1, x, x + x) (bools: a != true)."""
    npdt = np.dtype(np.bool_ if dtype == "bool" else dtype)
    x = (np.arange(-20, 44) % (2 if dtype == "bool" else 40)).astype(npdt)
    if dtype == "bool":
        k = kernels.build(lambda a: (a != (a == a)), ((64,), dtype), device=tolk_device.name)
        want = ~x
    else:
        k = kernels.build(lambda a: (a < 1).where(a, a + a), ((64,), dtype), device=tolk_device.name)
        want = np.where(x < 1, x, x + x).astype(npdt)
    got = kernels.run_on(tolk_device, k, [x])
    require(got.dtype == want.dtype and np.array_equal(got, want), "Program.__call__",
            lambda: f"{dtype}: got {got[:8]}... want {want[:8]}...")


def test_local_size_geometry(tolk_device, tolk_record):
    """Devices declaring local_size run codegen's guarded launch; the guard stops items past the end."""
    if not tolk_record.spec.capabilities.local_size:
        pytest.skip(f"{tolk_record.name} does not declare capability 'local_size'")
    k = kernels.build(lambda a: a * 2, ((1000,), "float32"), device=tolk_device.name)
    x = np.arange(1000, dtype=np.float32)
    bound = kernels.bind(tolk_device, k, [x])
    ln = bound.launches[0]
    require(ln.local_size is not None, "renderer.has_local", "a local_size device's renderer gave no local size")
    kernels.launch_all(bound)
    tolk_device.synchronize()
    require(np.array_equal(bound.result(), x * 2), "Program.__call__",
            f"global_size={ln.global_size} local_size={ln.local_size} gave wrong values")
