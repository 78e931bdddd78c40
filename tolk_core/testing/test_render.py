"""Tier render: core's kernels in the device's dialect compile with the renderer spec's compiler. No launch and
no device are needed, so a GPU plugin's CI without a GPU still runs this tier."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.errors import CompileError
from tolk_core.testing import kernels
from tolk_core.testing.checks import require
from tolk_core.testing.plugin import capabilities
from tolk_core.testing.programs import PROGRAMS

pytestmark = pytest.mark.render


def _built(name: str, device: str):
    case = PROGRAMS[name]
    return kernels.build(case.fn, *((s, np.dtype(case.dtype).name) for s in case.shapes), device=device)


@pytest.fixture(scope="session")
def rendered(tolk_record, tolk_renderer):
    """Every program the device's capabilities allow, rendered into one module, plus the kernel sources."""
    caps = capabilities(tolk_record.name)
    out = {}
    for name, case in PROGRAMS.items():
        if all(caps.get(c) for c in case.needs):
            out[name] = kernels.render(_built(name, tolk_record.name), tolk_renderer)
    functions = {ks.name: ks.source for _, sources in out.values() for ks in sources}
    return tolk_renderer.render_module(list(functions.values())), out


def test_renderer_returns_text(rendered):
    module, per_program = rendered
    require(isinstance(module, str) and module.strip(), "renderer.render_module", "must return non-empty text")
    for name, (_, sources) in per_program.items():
        for ks in sources:
            require(ks.name in ks.source, "renderer.render_kernel",
                    f"{name}: kernel {ks.name} does not appear in its own source (the KERNEL placeholder must be the "
                    "function's name)")


def test_rendering_is_deterministic(tolk_record, tolk_renderer):
    a = kernels.render(_built("softmax", tolk_record.name), tolk_renderer)[0]
    b = kernels.render(_built("softmax", tolk_record.name), tolk_renderer)[0]
    require(a == b, "renderer.render_kernel", "the same kernel rendered twice gave different text (breaks caching)")


@pytest.mark.smoke
def test_all_programs_compile_in_one_unit(rendered, tolk_compiler):
    module, _ = rendered
    try:
        lib = tolk_compiler.compile(module)
    except CompileError as e:
        raise AssertionError(f"contract Compiler.compile broken: core's kernels do not compile: {e}\n{e.log}") from e
    require(isinstance(lib, bytes) and lib, "Compiler.compile", f"must return non-empty bytes, got {type(lib)}")


def test_compiler_identity_and_cache_key(tolk_compiler):
    ident = tolk_compiler.identity()
    require(isinstance(ident, str) and ident, "Compiler.identity", "must return a non-empty string")
    require(tolk_compiler.cache_key("x") == tolk_compiler.cache_key("x"), "Compiler.identity",
            "the cache key of one source changed between calls: identity() must be stable")


def test_bad_source_raises_compile_error(tolk_compiler):
    with pytest.raises(CompileError):
        tolk_compiler.compile("this is not a kernel @@@ {{{")
