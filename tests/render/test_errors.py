"""Render-time errors: a dtype the device cannot compute (DTypeError naming both), a compiler rejecting the
rendered source (CompileError carrying the source and the compiler's message), and the dtype capabilities."""
from __future__ import annotations

import types

import numpy as np
import pytest
from tolk_cpu.renderer import CRenderer
from tolk_opencl.renderer import OpenCLRenderer

from tests.conftest import has_opencl
from tolk_core.errors import CompileError, DTypeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device, RendererSpec, hookimpl, register
from tolk_core.render.cstyle import KernelParam


def renderer_plugin(name: str, spec: RendererSpec) -> types.ModuleType:
    """A plugin, registered at runtime, whose only hook supplies `spec`."""
    mod = types.ModuleType(name)
    mod.tolk_renderers = hookimpl(lambda: [spec])
    return mod


# ---- DTypeError


def test_float64_on_an_opencl_device_without_fp64_names_dtype_and_device(tolk_env) -> None:
    if not has_opencl():
        pytest.skip("no OpenCL platform here")
    # the same OpenCL device, with a renderer that sees no cl_khr_fp64 in the device's extensions
    spec = RendererSpec("OPENCL", "OpenCL C without fp64", priority=100,
                        renderer=lambda dev: OpenCLRenderer(dev, extensions=("cl_khr_byte_addressable_store",)),
                        compiler="tolk_opencl.runtime:OpenCLCompiler")
    register(renderer_plugin("no_fp64", spec), name="no_fp64")
    x = Tensor(np.arange(4, dtype=np.float64), device="OPENCL") * 2
    with pytest.raises(DTypeError) as e:
        x.numpy()
    assert str(e.value) == ("dtype float64 is not supported on OPENCL:0: the device does not report cl_khr_fp64; "
                            "use float32")
    assert (Tensor(np.arange(4, dtype=np.float32), device="OPENCL") * 2).tolist() == [0, 2, 4, 6]


def test_opencl_capabilities_follow_the_device_extensions() -> None:
    assert not OpenCLRenderer(extensions=()).supports(dtypes.float64)
    assert OpenCLRenderer(extensions=("cl_khr_fp64",)).supports(dtypes.float64)
    baseline = OpenCLRenderer()  # no device: the OpenCL 1.2 baseline, every extension absent
    assert dtypes.float64 not in baseline.supported_dtypes and dtypes.float16 in baseline.supported_dtypes
    with pytest.raises(DTypeError, match=r"^dtype float64 is not supported on OPENCL \(no device\): .*cl_khr_fp64"):
        baseline.check_dtype(dtypes.float64)
    if has_opencl():
        dev = Device["OPENCL"]
        assert dev.extensions == frozenset(dev.cl_device.extensions.split())
        assert dev.renderer.supports(dtypes.float64) == ("cl_khr_fp64" in dev.extensions)
        assert (dtypes.float16 in dev.renderer.emulated) == ("cl_khr_fp16" not in dev.extensions)
    assert set(CRenderer().supported_dtypes) == set(dtypes.all)


def test_half_storage_follows_cl_khr_fp16() -> None:
    """Without cl_khr_fp16 half is stored by vload/vstore_half and computed in float; with it, native."""
    a = UOp(Op.PARAM, dtypes.float16.ptr(8), (), 1)
    out = UOp(Op.PARAM, dtypes.float16.ptr(8), (), 0)
    i = UOp(Op.SPECIAL, dtypes.index, (UOp.const(dtypes.index, 8),), ("gidx0", 0))
    x = UOp(Op.LOAD, dtypes.float16, (UOp(Op.INDEX, a.dtype, (a, i)),))
    y = UOp(Op.MUL, dtypes.float16, (x, x))
    store = UOp(Op.STORE, dtypes.void, (UOp(Op.INDEX, out.dtype, (out, i)), y))
    params = [KernelParam(0, dtypes.float16, True), KernelParam(1, dtypes.float16)]
    emulated = OpenCLRenderer(extensions=()).render_kernel("k", [i, x, y, store], params)
    assert "vload_half(gidx0, b1)" in emulated and "vstore_half_rte(v1, gidx0, b0);" in emulated
    assert "const float v1 = tolk_half_round((v0*v0));" in emulated
    native = OpenCLRenderer(extensions=("cl_khr_fp16",)).render_kernel("k", [i, x, y, store], params)
    assert "const half v1 = (v0*v0);" in native and "vload_half" not in native
    assert "cl_khr_fp16 : enable" in OpenCLRenderer(extensions=("cl_khr_fp16",)).render_module([native])


def test_bitcast_between_sizes_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="bitcast from float32 to int16: .* one size"):
        CRenderer().render_bitcast("x", dtypes.int16, dtypes.float32)


# ---- CompileError


class BrokenC(CRenderer):
    """Emits invalid C: every kernel body starts with a statement that is not C."""

    def render_kernel(self, name, lin, params, loop_kinds=None) -> str:
        return super().render_kernel(name, lin, params, loop_kinds).replace("{", "{\n  this is not C;", 1)


def test_compile_failure_carries_source_and_compiler_message(tolk_env) -> None:
    spec = RendererSpec("CPU", "broken C", renderer=BrokenC, compiler="tolk_cpu.runtime:CPUCompiler", priority=100)
    register(renderer_plugin("broken_c", spec), name="broken_c")
    assert isinstance(Device["CPU"].renderer, BrokenC)
    x = Tensor(np.ones(5, np.float32), device="CPU") * 1234.5  # a kernel no earlier test compiled
    with pytest.raises(CompileError) as e:
        x.numpy()
    err = e.value
    # named by the engine (device, plugin, kernels), then the compiler's own message
    assert str(err).startswith("compiling kernel(s) E_") and " for CPU (plugin tolk-cpu " in str(err)
    assert f"): {Device['CPU'].compiler.cc} failed (exit 1): " in str(err)
    assert "this is not C;" in err.source and "1234.5f" in err.source  # the whole rendered module
    assert "error: unknown type name 'this'" in err.log.replace("‘", "'").replace("’", "'")
    assert "--- compiler output ---" in str(err) and err.log in str(err)
