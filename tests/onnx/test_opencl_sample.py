"""A fixed sample of ONNX's node tests on OPENCL: for every op of the committed list, its first node test
(by name) that passes on CPU. Failures known on OPENCL are xfail(strict=True) from
tests/onnx/known_failures.json; the whole module skips when OPENCL is unavailable here."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner, _normalize_tensor

import tolk_core.onnx.backend as backend
from tests.conftest import has_opencl
from tests.onnx.conftest import known_failures
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


@pytest.mark.skipif(not has_opencl(), reason="OPENCL unavailable here (no OpenCL platform: `make opencl`)")
@pytest.mark.parametrize("case", [_param(op, c) for op, c in SAMPLE])
def test_node_on_opencl(case):
    rep = backend.prepare(case.model, "OPENCL")
    for inputs, outputs in case.data_sets:
        got = rep.run([_normalize_tensor(i) for i in inputs])
        Runner.assert_similar_outputs([_normalize_tensor(o) for o in outputs], list(got), rtol=case.rtol,
                                      atol=case.atol)


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
