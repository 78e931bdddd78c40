"""A fixed sample of ONNX's node tests on OPENCL: for every op of the committed list, its first node test
(by name) that passes on CPU. Failures known on OPENCL are xfail(strict=True) from
tests/onnx/known_failures.json; the whole module skips when OPENCL is unavailable here.

The whole sample is built lazily first, case after case, and realized in one schedule, so its kernels compile
together: one OpenCL program build for all of them instead of one per case (docs/onnx.md, "In CI"). A case
whose graph cannot be built keeps its error for its own test; when the joint realize fails, each case realizes
alone in its test, so a failure names its case."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner, _normalize_tensor

import tolk_core.onnx.backend as backend
from tests.conftest import has_opencl
from tests.onnx.conftest import known_failures
from tolk_core import Tensor
from tolk_core.counters import GlobalCounters
from tolk_core.engine.compile import CompileTimeWarning
from tolk_core.onnx.model import as_numpy, lazy_tensors
from tolk_core.onnx.scoreboard import LISTED_OPS


def sample() -> list:
    """(op, case) per listed op: the first of its node tests by name (no `_expanded` form) that CPU passes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators warn about the casts they exercise
        cases = sorted(load_model_tests(kind="node"), key=lambda c: c.name)
    cpu_fails = known_failures("CPU")
    picked: dict[str, object] = {}
    for case in cases:
        op = case.model.graph.node[0].op_type if case.model.graph.node else ""
        if op in LISTED_OPS and op not in picked and "_expanded" not in case.name and case.name not in cpu_fails:
            picked[op] = case
    return sorted(picked.items())


SAMPLE = sample()
OPENCL_KNOWN = known_failures("OPENCL")


def _param(op, case):
    marks = [pytest.mark.xfail(strict=True, reason=OPENCL_KNOWN[case.name])] if case.name in OPENCL_KNOWN else []
    return pytest.param(case, id=f"{op}-{case.name}", marks=marks)


needs_opencl = pytest.mark.skipif(not has_opencl(),
                                  reason="OPENCL unavailable here (no OpenCL platform: `make opencl`)")


class Joint:
    """The sample's outputs built lazily, then realized together; `compiler_calls` counts the compiler
    invocations of the joint realize (a disk-cache hit counts as one: the unit was compiled once before)."""

    def __init__(self) -> None:
        self.outputs: dict[tuple[str, int], dict] = {}
        self.errors: dict[tuple[str, int], Exception] = {}
        for _, case in SAMPLE:
            for i, (inputs, _) in enumerate(case.data_sets):
                try:
                    rep = backend.prepare(case.model, "OPENCL")
                    self.outputs[(case.name, i)] = rep.model(*[_normalize_tensor(x) for x in inputs])
                except Exception as e:  # noqa: BLE001 - re-raised by the case's own test
                    self.errors[(case.name, i)] = e
        tensors = [t for outs in self.outputs.values() for t in lazy_tensors(outs)]
        before = GlobalCounters.compiles + GlobalCounters.disk_cache_hits, GlobalCounters.kernels_compiled
        try:
            with warnings.catch_warnings():  # one unit of ~116 kernels is expected to pass the slow-compile warning
                warnings.simplefilter("ignore", CompileTimeWarning)
                Tensor.realize(*tensors) if tensors else None
            self.failed: Exception | None = None
        except Exception as e:  # noqa: BLE001 - every case then realizes alone in its own test
            self.failed = e
        self.compiler_calls = GlobalCounters.compiles + GlobalCounters.disk_cache_hits - before[0]
        self.kernels = GlobalCounters.kernels_compiled - before[1]

    def results(self, name: str, i: int) -> list:
        if (name, i) in self.errors:
            raise self.errors[(name, i)]
        return as_numpy(self.outputs[(name, i)])


@pytest.fixture(scope="module")
def joint() -> Joint:
    return Joint()


@needs_opencl
@pytest.mark.parametrize("case", [_param(op, c) for op, c in SAMPLE])
def test_node_on_opencl(case, joint):
    for i, (_, outputs) in enumerate(case.data_sets):
        got = joint.results(case.name, i)
        Runner.assert_similar_outputs([_normalize_tensor(o) for o in outputs], list(got), rtol=case.rtol,
                                      atol=case.atol)


@needs_opencl
def test_sample_kernels_compile_together(joint):
    """The joint realize compiled every missing kernel of the sample in one compiler call."""
    assert joint.failed is None, f"the joint realize failed: {joint.failed!r}"
    assert joint.kernels > len(SAMPLE) // 2, f"only {joint.kernels} kernels were left for the joint realize"
    assert joint.compiler_calls == 1, f"{joint.compiler_calls} compiler calls for {joint.kernels} kernels"


def test_sample_covers_every_listed_op_cpu_passes():
    covered = {op for op, _ in SAMPLE}
    missing = sorted(set(LISTED_OPS) - covered)
    cpu_fails = known_failures("CPU")
    # an op is left out only when none of its node tests passes on CPU (then it is on the CPU list)
    for op in missing:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            names = [c.name for c in load_model_tests(kind="node")
                     if c.model.graph.node and c.model.graph.node[0].op_type == op]
        assert all(n in cpu_fails for n in names), f"{op} has a CPU-passing node test but is not sampled"
    assert len(covered) + len(missing) == len(LISTED_OPS)
    np.testing.assert_equal(len(SAMPLE), len(covered))
