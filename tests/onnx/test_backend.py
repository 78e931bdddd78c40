"""ONNX's own backend test suite on CPU: every node test, the `light/` architectures and the `simple/`,
`pytorch-converted/` and `pytorch-operator/` models, through tolk_core.onnx.backend. Known failures are
xfail(strict=True) from tests/onnx/known_failures.json (conftest.py). ONNX's runner compares with
numpy.testing, which the repository's conftest counts as the test's check."""
from __future__ import annotations

import onnx.backend.test

import tolk_core.onnx.backend as backend

_suite = onnx.backend.test.BackendTest(backend, __name__)
_suite.include(r".*_cpu$")
globals().update(_suite.test_cases)
