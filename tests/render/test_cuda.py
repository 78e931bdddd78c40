"""CUDA C without a GPU: every distinct kernel of the parity suites renders for CUDA and compiles to an sm_90
cubin, batched into few compiler calls (one module a batch); and the dialect's spellings, checked on the text."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.frontend import test_dtypes, test_parity
from tests.render.kernels import kernel_asts
from tolk_core.codegen import generate
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.plugins import Device

EM_CUDA = 190
BATCH = 256  # kernels a module: nvcc takes ~2 s for 200 small kernels, one process start per batch


def is_cubin(b: bytes) -> bool:
    return b[:4] == b"\x7fELF" and int.from_bytes(b[18:20], "little") == EM_CUDA


def suite_tensors() -> list[Tensor]:
    """Every output of the parity suites' cases, built lazily on CPU (kernel ASTs do not depend on the device)."""
    out: list[Tensor] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy overflow in the float16 inputs, intended
        for name, case in test_parity.CASES.items():
            out.append(case.fn(*(Tensor(x, device="CPU") for x in test_parity._inputs(name, case))))
        for case in test_dtypes.CASES.values():
            got = case.fn(*(Tensor(x, device="CPU") for x in case.inputs))
            out.extend(got if isinstance(got, tuple) else (got,))
    return out


@pytest.fixture(scope="module")
def cuda_sources() -> dict[str, str]:
    """Kernel name -> CUDA C function, for every distinct kernel of the parity suites."""
    renderer = Device.renderer_for("CUDA")
    sources = (generate(ast, renderer) for ast in kernel_asts(suite_tensors()))
    return {ks.name: ks.source for ks in sources}


def test_every_parity_kernel_compiles_to_an_sm90_cubin(cuda_sources) -> None:
    compiler = Device.compiler_for("CUDA")
    if compiler.tool == "none":
        pytest.skip("neither NVRTC nor nvcc is installed: CUDA C cannot be compiled here")
    assert compiler.arch == "sm_90"
    names = sorted(cuda_sources)
    assert len(names) > 600  # the parity suites of the core ops, the full op surface and the dtype matrix
    renderer = Device.renderer_for("CUDA")
    for start in range(0, len(names), BATCH):
        batch = names[start:start + BATCH]
        cubin = compiler.compile_cached(renderer.render_module([cuda_sources[n] for n in batch]))
        assert is_cubin(cubin)
        missing = [n for n in batch if n.encode() not in cubin]
        assert not missing, f"kernels missing from the cubin: {missing[:5]}"


def test_dialect_spellings(cuda_sources) -> None:
    text = "\n".join(cuda_sources.values())
    first = next(iter(cuda_sources.values()))
    assert first.startswith('extern "C" __global__ void __launch_bounds__(256) ')
    assert "(int)(blockIdx.x*blockDim.x+threadIdx.x)" in text and "__restrict__" in text
    assert "__half2float(" in text and "__float2half_rn(" in text            # half storage, float compute
    assert "__bfloat162float(" in text and "__float2bfloat16_rn(" in text    # bfloat16 likewise
    assert "__int_as_float(0x7f800000)" in text                              # inf by its bits, no header
    assert "__float_as_int(" in text and "__longlong_as_double(" in text     # bitcasts by the intrinsics
    assert "__bfloat16_as_ushort(" in text and "__ushort_as_half(" in text   # and through half bits
    module = Device.renderer_for("CUDA").render_module(list(cuda_sources.values()))
    assert "#include <cuda_fp16.h>" in module and "#include <cuda_bf16.h>" in module


def test_barrier_and_shared_memory_spellings() -> None:
    r = Device.renderer_for("CUDA")
    assert (r.barrier, r.shared_qualifier) == ("__syncthreads();", "__shared__ ")


def test_non_finite_literals() -> None:
    r = Device.renderer_for("CUDA")
    assert r.render_const(float("-inf"), dtypes.float32) == "(-__int_as_float(0x7f800000))"
    assert r.render_const(float("nan"), dtypes.float64) == "__longlong_as_double(0x7ff8000000000000LL)"
    assert r.render_const(float("inf"), dtypes.bfloat16) == "__int_as_float(0x7f800000)"  # held in float
    assert r.render_const(np.float16(0.5).item(), dtypes.float16) == "0.5f"
