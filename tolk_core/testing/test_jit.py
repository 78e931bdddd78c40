"""Tier jit: end-to-end programs through the Tensor front end on the device, compared with numpy.

`tolk_core.jit` is not in this tolk-core yet; the programs run through `Tensor` (schedule, codegen, the
device's renderer, compiler and Program). When the JIT lands this tier also runs them captured and replayed."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.counters import GlobalCounters
from tolk_core.testing.checks import require
from tolk_core.testing.plugin import capabilities
from tolk_core.testing.programs import PROGRAMS, compare, inputs, run_cases

pytestmark = pytest.mark.jit
_RESULTS: dict[str, dict] = {}


def _results(dev) -> dict:
    if dev.name not in _RESULTS:
        caps = capabilities(dev.name.partition(":")[0])
        _RESULTS[dev.name] = run_cases(dev.name, {n: c for n, c in PROGRAMS.items()
                                                  if all(caps.get(x) for x in c.needs)})
    return _RESULTS[dev.name]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.requires(*c.needs)] if c.needs else [])
                                  for n, c in PROGRAMS.items()])
def test_program_matches_numpy(tolk_device, name):
    case = PROGRAMS[name]
    got = _results(tolk_device)[name]
    if isinstance(got, Exception):
        raise got
    want = np.asarray((case.ref or case.fn)(*inputs(name, case)))
    why = compare(got.numpy(), want)
    require(why is None, "end-to-end", f"{name} on {tolk_device.name} differs from numpy: {why}")


def test_second_run_compiles_nothing(tolk_device):
    """Running the same programs again reuses the compiled programs (no compile, identical results)."""
    case = PROGRAMS["mlp"]
    from tolk_core.frontend.tensor import Tensor
    xs = inputs("mlp", case)
    first = case.fn(*(Tensor(x, device=tolk_device.name) for x in xs)).numpy()
    before = GlobalCounters.compiles
    again = case.fn(*(Tensor(x, device=tolk_device.name) for x in xs)).numpy()
    require(GlobalCounters.compiles == before, "Compiler.compile_cached", "an identical program compiled again")
    require(first.tobytes() == again.tobytes(), "end-to-end", "the same program gave different results twice")


def test_symbolic_program_compiles_once(tolk_device):
    """A program over a bound Variable: each value matches numpy, and only the first value compiles."""
    from tolk_core.frontend.tensor import Tensor
    from tolk_core.ir.uop import Variable
    data = np.random.default_rng(6).uniform(-2, 2, (48, 16)).astype(np.float32)
    x, n = Tensor(data, device=tolk_device.name), Variable("rows", 1, 48)

    def program(v):
        w = x.shrink(((0, v), None))
        return (w * 3 + 1).sum(axis=0) + w.exp().sum(axis=0) * 0.5
    program(n.bind(2)).numpy()
    before = GlobalCounters.compiles + GlobalCounters.disk_cache_hits
    for value in (1, 7, 48):
        w = data[:value]
        why = compare(program(n.bind(value)).numpy(), (w * 3 + 1).sum(0) + np.exp(w).sum(0) * 0.5, atol=1e-3)
        require(why is None, "end-to-end", f"rows={value}: {why}")
    require(GlobalCounters.compiles + GlobalCounters.disk_cache_hits == before, "Program.__call__",
            "a new value of a bound Variable compiled again (values must be passed as arguments)")
