"""ONNX's own backend test suite on CPU: every node test, the `light/` architectures and the `simple/`,
`pytorch-converted/` and `pytorch-operator/` models, through tolk_core.onnx.backend. Known failures are
xfail(strict=True) from tests/onnx/known_failures.json (conftest.py). ONNX's runner compares with
numpy.testing, which the repository's conftest counts as the test's check. ONNX's CUDA variants of each case
are removed (not skipped): ONNX's "CPU" is the Tolk device under test (tolk_core/onnx/backend.py)."""
from __future__ import annotations

import warnings

import onnx.backend.test

import tolk_core.onnx.backend as backend

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the case generators warn about the casts they exercise
    _suite = onnx.backend.test.BackendTest(backend, __name__)
_cases = _suite.test_cases  # a property that builds new classes on every read: read once
for _case in _cases.values():
    for _name in [n for n in vars(_case) if n.endswith("_cuda")]:
        delattr(_case, _name)
del _case
globals().update(_cases)
