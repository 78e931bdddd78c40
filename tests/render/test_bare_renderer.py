"""A renderer declaring none of Renderer's optional capabilities gets plain kernels that still compute the right
values: every default is safe. Run on real devices (CPU, and OPENCL where present) against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from tolk_cpu.renderer import CRenderer
from tolk_opencl.renderer import OpenCLRenderer

from tests.render.kernels import kernel_asts
from tests.render.test_errors import renderer_plugin
from tolk_core.codegen import generate
from tolk_core.errors import DTypeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.plugins import Device, RendererSpec, register
from tolk_core.render.cstyle import CStyleRenderer
from tolk_core.render.renderer import Renderer
from tolk_core.testing.plugin import capabilities
from tolk_core.testing.programs import PROGRAMS, Case, compare, inputs, run_cases


class BareC(CStyleRenderer):
    """Loop-style C declaring no capability: no vector lanes, no loop pragmas, every Renderer default. Its only
    hook is the header CStyleRenderer's NAN/INFINITY literals need."""
    device = "CPU"

    def prelude(self, sources):
        return "#include <math.h>\n\n" + super().prelude(sources)


class BareCL(OpenCLRenderer):
    """OpenCL C with the work-item limits alone (has_local, local_max): no shared memory, no vector lanes, no
    CPU-thread launch shapes; those three back at Renderer's defaults."""
    shared_bytes = Renderer.shared_bytes
    max_lanes = Renderer.max_lanes

    def __init__(self, device=None):
        super().__init__(device)
        self.cpu_threads = Renderer.cpu_threads


def _layernorm(x, g):
    m = x.mean(axis=-1, keepdim=True)
    return (x - m) / (((x - m) * (x - m)).mean(axis=-1, keepdim=True) + 1e-5).sqrt() * g


def _layernorm_ref(x, g):
    m = x.mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) * (x - m)).mean(axis=-1, keepdims=True) + 1e-5) * g


# kernels the full renderers optimize (register blocking, threads, row groups, group reductions), beside the
# conformance programs
EXTRA = {
    "matmul_blocked": Case([(64, 48), (48, 32)], lambda a, b: a @ b),
    "column_sums": Case([(96, 64)], lambda a: a.sum(axis=0), lambda a: a.sum(0)),
    "wide_elementwise": Case([(1024, 1024)], lambda a: a * 2 + 1),
    "few_long_rows": Case([(4, 4096)], lambda a: a.max(axis=1), lambda a: a.max(1)),
    "layernorm": Case([(300, 64), (64,)], _layernorm, _layernorm_ref, low=-1, high=1),
}
# the dtype each capability a program needs names
NEEDS = {"float64": dtypes.float64, "half": dtypes.float16}
# each device's bare renderer and the compiler of its own plugin
BARE = {"CPU": (BareC, "tolk_cpu.runtime:CPUCompiler"), "OPENCL": (BareCL, "tolk_opencl.runtime:OpenCLCompiler")}


@pytest.fixture
def bare(device, tolk_env):
    """`device` with its bare renderer registered as the default (a higher-priority RendererSpec)."""
    cls, compiler = BARE[device]
    spec = RendererSpec(device, "bare", renderer=cls, compiler=compiler, priority=100)
    register(renderer_plugin(f"bare_{device.lower()}", spec), name=f"bare_{device.lower()}")
    assert type(Device[device].renderer) is cls
    return device


def test_bare_renderers_compute_what_numpy_computes(bare):
    """Every conformance program the device can run, and kernels the full dialects optimize, match numpy; a
    program over a dtype the bare dialect names no type for fails with DTypeError (CStyleRenderer has no half)."""
    caps, renderer = capabilities(bare), Device[bare].renderer
    cases = {n: c for n, c in {**PROGRAMS, **EXTRA}.items() if all(caps.get(need) for need in c.needs)}
    refused = {n for n, c in cases.items() if not all(renderer.supports(NEEDS[need]) for need in c.needs)}
    assert len(cases) - len(refused) > len(EXTRA) + 10
    got = run_cases(bare, cases)
    for name, case in cases.items():
        if name in refused:
            assert isinstance(got[name], DTypeError), f"{name}: {got[name]!r}"
            continue
        assert not isinstance(got[name], Exception), f"{name}: {got[name]!r}"
        want = (case.ref or case.fn)(*inputs(name, case))
        assert (why := compare(got[name].numpy(), np.asarray(want))) is None, f"{name}: {why}"


def _sources(renderer: Renderer, *names: str) -> str:
    """The kernels of programs `names`, scheduled by the engine for the CPU (which fuses rows into kernel-local
    arrays), rendered by `renderer`."""
    cases = {**PROGRAMS, **EXTRA}
    outs = [cases[n].fn(*(Tensor.empty(*s, device="CPU") for s in cases[n].shapes)) for n in names]
    return "\n".join(generate(a, renderer).source for a in kernel_asts(outs))


def test_the_bare_kernels_are_plain_where_the_full_dialects_optimize():
    """The same kernels: the CPU dialect blocks a matmul into vectors and annotates loops, the OpenCL dialect keeps
    a softmax row in shared memory and computes outputs in vectors; the bare dialects do neither."""
    full_c, bare_c = _sources(CRenderer(), "matmul_blocked", "wide_elementwise"), \
        _sources(BareC(), "matmul_blocked", "wide_elementwise")
    assert f"tolk_float_x{CRenderer().vector_bytes // 4}" in full_c and "#pragma omp" in full_c
    assert "tolk_float_x" not in bare_c and "#pragma" not in bare_c
    full_cl, bare_cl = _sources(OpenCLRenderer(), "softmax", "wide_elementwise"), \
        _sources(BareCL(), "softmax", "wide_elementwise")
    assert "__local float" in full_cl and "vstore16" in full_cl
    assert "__local" not in bare_cl and "vstore" not in bare_cl and "vload" not in bare_cl
