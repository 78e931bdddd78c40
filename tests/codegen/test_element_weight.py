"""Elementwise kernels take the CPU threads by their work (codegen/optimize.py `_element_weight`): an exp2, log2, sin or
cos counts as TRANSCENDENTAL_OPS operations, so an exp over 196k floats runs on the threads and one over 65k, or a
plain add over 196k, does not; the values stay numpy's."""
from __future__ import annotations

import numpy as np
import pytest
from tolk_cpu.renderer import CRenderer

from tolk_core import Tensor, no_grad
from tolk_core.codegen import generate
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for


def _sources(fn, n: int) -> list[str]:
    x = Tensor(np.linspace(-3, 3, n, dtype=np.float32), device="CPU")
    with no_grad():
        out = fn(x)
    return [generate(c.src[0], CRenderer()).source for c in schedule(target_for("CPU"), [out.uop])[0].src]


@pytest.mark.parametrize("name,fn,n,threads", [
    ("exp", Tensor.exp, 196608, True), ("exp", Tensor.exp, 65536, False), ("log2", Tensor.log2, 196608, True),
    ("sin", Tensor.sin, 196608, True), ("add", lambda x: x + 1, 196608, False),
    ("add", lambda x: x + 1, 1 << 21, True)])
def test_transcendental_kernels_take_the_threads_by_their_work(name, fn, n, threads):
    srcs = _sources(fn, n)
    assert any("#pragma omp parallel" in s for s in srcs) == threads, (name, n, srcs)
    x = np.linspace(-3, 3, n, dtype=np.float32)
    ref = {"exp": np.exp, "log2": lambda v: np.log2(np.abs(v) + 1), "sin": np.sin, "add": lambda v: v + 1}[name]
    got = fn(Tensor(np.abs(x) + 1 if name == "log2" else x)).numpy()
    np.testing.assert_allclose(got, ref(x), rtol=2e-6, atol=1e-6)
