"""Numerical helpers shared by the front-end tests: numpy comparison and numpy references."""
from __future__ import annotations

import zlib

import numpy as np


def close(got, want, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """Assert tolk's result equals numpy's: exact for integers and bools; for float32, within rtol and atol
    (float32 sums of a few thousand terms of magnitude ~1 differ from numpy's pairwise sums by ~1e-4)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def np_mlp(x, w1, b1, w2, b2):
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layernorm(x: np.ndarray) -> np.ndarray:
    """Layer norm over the last axis without the affine part (eps 1e-5); `layernorm` is Tolk's."""
    d = x - x.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)


def layernorm(x):
    d = x - x.mean(axis=-1, keepdim=True)
    return d / ((d * d).mean(axis=-1, keepdim=True) + 1e-5).sqrt()


def check_cases_together(cases, device: str, **tol) -> None:
    """`cases` are (name, build(T) -> Tensor, numpy result) with T making a Tensor on `device` from an array:
    every case is built, all are realized together (one compile), and each must equal numpy (`close`)."""
    from tolk_core.frontend.tensor import Tensor
    outs = [fn(lambda x: Tensor(x, device=device)) for _, fn, _ in cases]
    outs[0].realize(*outs[1:])
    for (name, _, want), got in zip(cases, outs, strict=True):
        assert got.shape == np.shape(want), name
        close(got.numpy(), want, **tol)


def np_attention(q, k, v):
    s = (q @ k.transpose(0, 2, 1)) / 8
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def seeded_inputs(name: str, case) -> list[np.ndarray]:
    """A parity case's inputs (`case.shapes`, `case.dtype`, uniform in [`case.low`, `case.high`]), seeded by
    the case's name: the same in every process, unlike hash()."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if case.dtype in (bool, np.bool_):
        return [rng.integers(0, 2, size=s).astype(bool) for s in case.shapes]
    if np.issubdtype(case.dtype, np.integer):
        return [rng.integers(int(case.low), int(case.high) + 1, size=s).astype(case.dtype) for s in case.shapes]
    return [rng.uniform(case.low, case.high, size=s).astype(case.dtype) for s in case.shapes]


_REALIZED: dict[tuple[int, str], dict] = {}


def realized_case(cases: dict, device: str, name: str, inputs=seeded_inputs):
    """Case `name` of `cases` computed on `device`: every case of that dict is built (`inputs(name, case)`
    gives its arrays) and realized together the first time any is asked for, so each suite compiles once per
    device. Raises the case's own error if it failed to build or run."""
    from tolk_core.testing.programs import run_cases
    key = (id(cases), device)
    if key not in _REALIZED:
        _REALIZED[key] = run_cases(device, cases, inputs)
    got = _REALIZED[key][name]
    if isinstance(got, Exception):
        raise got
    return got
