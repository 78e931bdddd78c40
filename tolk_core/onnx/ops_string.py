"""String ops: values of ONNX's string type are host arrays (numpy object or unicode arrays) through the whole
graph, never Tensors (a device holds numbers only); these converters compute on them with Python's string
methods (docs/onnx.md, "Strings"). A string graph input is host data that is never folded by ONNX's reference
implementation: the model runs these converters on it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tolk_core.errors import ShapeError
from tolk_core.onnx import ops_elementwise as E
from tolk_core.onnx.context import Ctx, Node, Value

Inputs = list[Value | None]


def is_strings(v: Any) -> bool:
    """Whether `v` is a host array of strings."""
    return isinstance(v, np.ndarray) and v.dtype.kind in "OUS"


def _strings(a: np.ndarray) -> np.ndarray:
    """`a` as an object array of Python str (bytes decoded as UTF-8), so every op below sees one element type."""
    out = np.empty(a.shape, dtype=object)
    for i, s in np.ndenumerate(a):
        out[i] = s.decode("utf-8") if isinstance(s, bytes) else str(s)
    return out


def equal(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """Equal: elementwise on numbers (a Tensor op), or on strings (a host array of bools, numpy broadcasting)."""
    a, b = x[0], x[1]
    if is_strings(a) or is_strings(b):
        sa, sb = np.broadcast_arrays(*(_strings(np.asarray(v)) for v in (a, b)))
        return np.asarray(sa == sb, dtype=bool)
    return E.binary(lambda p, q: p == q)(ctx, node, x)


def string_normalizer(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """StringNormalizer: the elements of a [C] or [1, C] string tensor that are not stop words (matched with or
    without case, `is_case_sensitive`), then lower- or upper-cased (`case_change_action`). When every element
    is a stop word the result is one empty string, shaped [1] or [1, 1]."""
    a = _strings(np.asarray(x[0]))
    if a.ndim not in (1, 2) or (a.ndim == 2 and a.shape[0] != 1):
        raise ShapeError(f"StringNormalizer takes a [C] or [1, C] string tensor, got shape {a.shape}")
    stops = [str(s.decode() if isinstance(s, bytes) else s) for s in node.attr("stopwords", []) or []]
    sensitive = bool(node.attr("is_case_sensitive", 0))
    action = node.attr("case_change_action", "NONE")
    action = action.decode() if isinstance(action, bytes) else action
    stop_set = set(stops) if sensitive else {s.casefold() for s in stops}
    kept = [s for s in a.reshape(-1) if (s if sensitive else s.casefold()) not in stop_set]
    changed = [s.lower() if action == "LOWER" else s.upper() if action == "UPPER" else s for s in kept] or [""]
    out = np.empty(len(changed), dtype=object)
    out[:] = changed
    return out.reshape(1, -1) if a.ndim == 2 else out


def string_concat(ctx: Ctx, node: Node, x: Inputs) -> Value:
    """StringConcat: elementwise concatenation with numpy broadcasting."""
    a, b = np.broadcast_arrays(_strings(np.asarray(x[0])), _strings(np.asarray(x[1])))
    out = np.empty(a.shape, dtype=object)
    for i in np.ndindex(a.shape):
        out[i] = a[i] + b[i]
    return out


def string_split(ctx: Ctx, node: Node, x: Inputs) -> list[Value | None]:
    """StringSplit: each string split by `delimiter` (absent or empty: runs of whitespace, leading and trailing
    whitespace ignored, as Python's str.split()), at most `maxsplit` times; Y holds the pieces along a new
    last axis padded with empty strings to the longest, Z (int64) each string's count of pieces."""
    a = _strings(np.asarray(x[0]))
    delim = node.attr("delimiter")
    delim = (delim.decode() if isinstance(delim, bytes) else delim) or None
    maxsplit = node.attr("maxsplit")
    pieces = {i: s.split(delim, -1 if maxsplit is None else int(maxsplit)) for i, s in np.ndenumerate(a)}
    width = max((len(p) for p in pieces.values()), default=0)
    y = np.full(a.shape + (width,), "", dtype=object)
    z = np.zeros(a.shape, dtype=np.int64)
    for i, p in pieces.items():
        y[i][:len(p)] = p
        z[i] = len(p)
    return [y, z]
