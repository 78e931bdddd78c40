"""The CPU prelude's helpers (tolk_exp2f, the vector FMA, masked loads, lane runs) are inlined into every kernel of
a translation unit, however many kernels it holds. A plain `static inline` is a hint gcc stops taking once a unit
has used up its inlining budget: in a batch of 32 dot-plan kernels and a gate kernel, tolk_exp2f and the 16-lane
FMA were left out of line, and the calls kept the gate kernel's loop from vectorizing (10x slower)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tolk_core import Tensor, no_grad
from tolk_core.codegen import generate
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.plugins import Device


def test_a_large_unit_leaves_no_helper_out_of_line(tmp_path):
    from tolk_cpu.runtime import CPUCompiler
    if shutil.which("nm") is None:
        pytest.skip("binutils' nm is not installed: the compiled unit's symbols cannot be listed")
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((32, 16, 64)).astype(np.float32), device="CPU")
    w = Tensor(rng.standard_normal((384, 64)).astype(np.float32), device="CPU")
    with no_grad():
        outs = [x[t] @ w.T for t in range(32)] + [(x[0] @ w.T).sigmoid().tanh() * 2]
    renderer = Device["CPU"].renderer
    functions = [generate(call.src[0], renderer).source
                 for o in outs for call in schedule(target_for("CPU"), [o.uop])[0].src]
    src = tmp_path / "unit.c"
    src.write_text(renderer.render_module(functions))
    cc = CPUCompiler()
    subprocess.run([cc.cc, *cc.target_flags, "-shared", "-fPIC", "-o", str(tmp_path / "unit.so"), str(src)],
                   check=True, capture_output=True, timeout=300)
    symbols = subprocess.run(["nm", str(tmp_path / "unit.so")], capture_output=True, text=True, check=True).stdout
    assert "tolk_exp2f(" in src.read_text()  # the gate kernel uses the helper
    assert [ln for ln in symbols.splitlines() if " tolk_" in ln] == []


@pytest.mark.parametrize("fn", ["erf", "sigmoid_where"])
def test_a_loop_through_exp2_with_selects_vectorizes(tmp_path, fn):
    """tolk_exp2f inside a loop that also selects on comparisons (erf's two branches, a masked sigmoid) stays
    vectorizable: when the helper selected on two comparisons' combined mask (`x != x || x < -150`), gcc 12 found
    no vector form for the select of masks and left erf's loop scalar (4x slower)."""
    from tolk_cpu.runtime import CPUCompiler
    cc = CPUCompiler()
    version = subprocess.run([cc.cc, "--version"], capture_output=True, text=True).stdout
    if "gcc" not in version.lower() and "free software foundation" not in version.lower():
        pytest.skip(f"{cc.cc} is not gcc: -fopt-info-vec (gcc's vectorizer report) is how this test reads the loop")
    x = Tensor(np.linspace(-4, 4, 128 * 256, dtype=np.float32).reshape(128, 256), device="CPU")
    with no_grad():
        out = x.erf() if fn == "erf" else (x > 0).where(x.sigmoid(), x * 0.5)
    renderer = Device["CPU"].renderer
    functions = [generate(call.src[0], renderer).source for call in schedule(target_for("CPU"), [out.uop])[0].src]
    src = tmp_path / "unit.c"
    src.write_text(renderer.render_module(functions))
    assert "tolk_exp2f(" in src.read_text()
    report = subprocess.run([cc.cc, *cc.target_flags, "-fopt-info-vec-optimized", "-c", "-o", str(tmp_path / "u.o"),
                             str(src)], capture_output=True, text=True, check=True, timeout=300).stderr
    assert "loop vectorized" in report, report
