"""Index width: a kernel whose index values pass the int32 range (a tensor of more than 2^31 elements) computes
them in 64-bit integers; a kernel within int32 keeps its 32-bit `int` indices (docs/dtypes.md, index width).

The rendering tests build their graphs on PYTHON with `Tensor.empty`/`Tensor.zeros` (nothing is allocated or
run) and compile the source with the device's own compiler. The sums over 2^31 + 64 uint8 elements run on CPU
and OPENCL (about 2.2 GB of device memory and as much host memory, freed after each device)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tests.render.kernels import kernel_asts
from tolk_core.codegen import generate
from tolk_core.errors import IndexWidthError
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device
from tolk_core.render.renderer import index_extent

BIG = 2 ** 31 + 64  # elements: the last 64 lie past int32's largest index


def _available(name: str) -> None:
    try:
        Device[name]
    except Exception as e:  # noqa: BLE001 - the reason is the skip message
        pytest.skip(f"{name} unavailable here: {e}")


def _sources(t: Tensor, device: str) -> list[str]:
    """The rendered source of every kernel computing `t`, for `device`'s renderer."""
    renderer = Device.renderer_for(device)
    return [generate(ast, renderer).source for ast in kernel_asts([t])]


def _plus_one(n: int, dtype: str = "float32") -> Tensor:
    return Tensor.empty(n, dtype=dtype, device="PYTHON") + 1


# ---- which kernels are wide: decided by the bounds of their index values
@pytest.mark.parametrize("device", ["CPU", "OPENCL", "CUDA"])
def test_a_kernel_within_int32_renders_int_indices(device) -> None:
    # 2^31 - 1 elements: the loop counter reaches 2^31 - 2 and its bound 2^31 - 1 still fits an int
    for src in _sources(_plus_one(2 ** 31 - 1, "uint8"), device) + _sources(_plus_one(1000), device):
        assert "long" not in src, src


@pytest.mark.parametrize(("device", "wide"), [("CPU", "long long"), ("OPENCL", "long"), ("CUDA", "long long")])
def test_a_kernel_past_int32_renders_64_bit_indices(device, wide) -> None:
    # 2^31 elements: the loop's bound 2^31 is not an int, so the counter (or work-item id) must be wide
    src, = _sources(_plus_one(2 ** 31, "uint8"), device)
    assert f"{wide} " in src and " int " not in src.replace("unsigned int ", ""), src


def test_cuda_work_item_ids_are_64_bit_products() -> None:
    # blockIdx.x*blockDim.x is a 32-bit unsigned product: the block offset must be widened before multiplying
    src, = _sources(_plus_one(10 ** 12), "CUDA")
    assert "((long long)blockIdx.x*blockDim.x+threadIdx.x)" in src, src


def test_index_extent_is_the_largest_index_past_int32() -> None:
    from tolk_core.codegen.linearize import linearize
    from tolk_core.codegen.optimize import optimize
    renderer = Device.renderer_for("PYTHON")

    def extent(t: Tensor) -> int | None:
        ast, = kernel_asts([t])
        plan = optimize(ast.simplify(), renderer)
        return index_extent(linearize(plan.ast, plan.guard))
    x = Tensor.empty(BIG, dtype="uint8", device="PYTHON")
    assert extent(x[:1000].sum()) is None
    assert extent(x[2 ** 31:].sum()) == BIG - 1  # the last element's offset
    assert extent(x[:2 ** 31 - 1] + 1) is None


# ---- the rendered wide kernels compile
@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_the_wide_elementwise_kernel_compiles(device) -> None:
    # (Tensor.zeros(10**12) + 1).realize() failed in the C compiler ("invalid controlling predicate": an int
    # loop counter against the bound 10^12); rendered and compiled, not run (it would need 4 TB)
    _available(device)
    sources = _sources(Tensor.zeros(10 ** 12, device="PYTHON") + 1, device)
    sources += _sources(Tensor.empty(BIG, dtype="uint8", device="PYTHON").sum(), device)
    assert any("1000000000000" in s for s in sources)
    renderer, compiler = Device.renderer_for(device), Device[device].compiler
    assert compiler.compile(renderer.render_module(sources))


def test_cuda_wide_kernels_compile() -> None:
    compiler = Device.compiler_for("CUDA")
    if compiler.tool == "none":
        pytest.skip("neither NVRTC nor nvcc is installed: CUDA C cannot be compiled here")
    sources = _sources(Tensor.zeros(10 ** 12, device="PYTHON") + 1, "CUDA")
    sources += _sources(Tensor.empty(BIG, dtype="uint8", device="PYTHON").sum(), "CUDA")
    assert compiler.compile_cached(Device.renderer_for("CUDA").render_module(sources))


# ---- a device without 64-bit indices
def test_a_renderer_without_index64_names_the_index_and_the_device() -> None:
    base = type(Device.renderer_for("CPU"))
    narrow = type("NarrowRenderer", (base,), {"index64": False})(None)
    ast, = kernel_asts([_plus_one(1000)])
    assert "int r0" in generate(ast, narrow).source  # kernels within int32 are unaffected
    ast, = kernel_asts([_plus_one(BIG)])
    with pytest.raises(IndexWidthError) as err:
        generate(ast, narrow)
    msg = str(err.value)
    assert str(BIG) in msg and "CPU" in msg and "64-bit" in msg, msg


# ---- sums over 2^31 + 64 elements, against numpy
@pytest.fixture(scope="module", params=["CPU", "OPENCL"])
def big_uint8(request):
    """(device, x, expected): `x` a realized uint8 tensor of BIG elements on the device: ones, then 1..64 in
    the 64 elements past index 2^31 - 1; `expected` numpy's sums of all of it and of those 64 (uint64)."""
    _available(request.param)
    cl_device = getattr(Device[request.param], "cl_device", None)  # an OpenCL device caps one allocation
    if cl_device is not None and cl_device.max_mem_alloc_size < BIG:
        pytest.skip(f"{cl_device.name} allocates at most {cl_device.max_mem_alloc_size} bytes at once, "
                    f"fewer than the {BIG} this sum needs")
    host = np.ones(BIG, np.uint8)
    host[2 ** 31:] = np.arange(1, 65, dtype=np.uint8)
    expected = {"all": host.sum(dtype=np.uint64), "tail": host[2 ** 31:].sum(dtype=np.uint64)}
    x = Tensor(host, device=request.param).realize()
    del host
    yield request.param, x, expected
    del x
    gc.collect()


@pytest.mark.timeout(300)
def test_a_uint8_sum_past_int32_elements_matches_numpy(big_uint8) -> None:
    _, x, expected = big_uint8
    got = x.sum().numpy()
    assert got.dtype == np.uint64  # numpy's rule for integer sums (docs/dtypes.md)
    assert int(got) == int(expected["all"]) == 2 ** 31 + 2080


@pytest.mark.timeout(300)
def test_a_uint8_sum_of_the_elements_past_index_2_31_matches_numpy(big_uint8) -> None:
    # every offset of this kernel is at least 2^31: as int it was negative (a segfault on CPU)
    _, x, expected = big_uint8
    assert int(x[2 ** 31:].sum().numpy()) == int(expected["tail"]) == 64 * 65 // 2


def test_a_variable_bound_past_int32_is_refused_before_launch() -> None:
    # integer kernel arguments are 32-bit: 3e9 would be passed wrapped (a negative trip count, a sum of 0)
    from tolk_core.ir.uop import Variable
    n = Variable("n", 1, 2 ** 40)
    assert Tensor.ones(n.bind(10), device="CPU").sum().item() == 10  # its kernel has 64-bit indices
    with pytest.raises(IndexWidthError, match="'n' is bound to 3000000000"):
        Tensor.ones(n.bind(3 * 10 ** 9), device="CPU").sum().numpy()
