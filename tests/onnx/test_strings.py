"""ONNX's string ops on host arrays (tolk_core/onnx/ops_string.py), checked against hand-computed results,
through a model built with onnx.helper (ONNX's own suite covers the spec's examples: tests/onnx/test_backend.py)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed: pip install 'tolk-core[onnx]'")
from onnx import TensorProto, helper  # noqa: E402

from tolk_core.onnx import load  # noqa: E402


def _model(op: str, n_in: int, outs: list[tuple[str, int]], opset: int, **attrs):
    node = helper.make_node(op, [f"x{i}" for i in range(n_in)], [n for n, _ in outs], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(f"x{i}", TensorProto.STRING, None)
                                            for i in range(n_in)],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outs])
    return load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


@pytest.mark.parametrize(("kw", "x", "want"), [
    ({"stopwords": ["the", "A"], "case_change_action": "UPPER", "is_case_sensitive": 1}, ["The", "cat", "a", "the"],
     ["THE", "CAT", "A"]),
    ({"stopwords": ["the", "A"], "case_change_action": "LOWER", "is_case_sensitive": 0}, ["The", "cat", "a"],
     ["cat"]),
    ({"stopwords": ["x"]}, ["x", "x"], [""]),  # everything removed: one empty string
])
def test_string_normalizer(kw, x, want) -> None:
    m = _model("StringNormalizer", 1, [("y", TensorProto.STRING)], 10, **kw)
    got = m(np.array(x, dtype=object))["y"]
    assert isinstance(got, np.ndarray) and got.tolist() == want
    two = m(np.array([x], dtype=object))["y"]  # a [1, C] input keeps its leading axis
    assert two.tolist() == [want]


def test_string_split_pads_and_counts() -> None:
    m = _model("StringSplit", 1, [("y", TensorProto.STRING), ("z", TensorProto.INT64)], 20, delimiter="-")
    out = m(np.array(["a-b", "c", "--"], dtype=object))
    assert out["y"].tolist() == [["a", "b", ""], ["c", "", ""], ["", "", ""]]
    np.testing.assert_array_equal(out["z"].numpy(), [2, 1, 3])


def test_string_equal_feeds_numeric_ops() -> None:
    m = _model("Equal", 2, [("y", TensorProto.BOOL)], 19)
    got = m(np.array(["a", "b", "c"], dtype=object), np.array(["a"], dtype=object))["y"]
    np.testing.assert_array_equal(got.numpy(), [True, False, False])
