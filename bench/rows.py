"""The benchmark rows: one workload each, computed by Tolk and by every peer that is importable.

A row builds its inputs from a seeded generator (`setup`), so the numpy child process rebuilds exactly the
same arrays. Each implementation returns a callable that computes the result once (synchronously) and returns
it as something `np.asarray` accepts; timing calls it repeatedly. `work` is the row's bytes (read + written)
for memory-bound rows or flops for compute-bound ones.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Impl = Callable[[dict[str, np.ndarray]], Callable[[], Any]]


def _f32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@dataclass
class Row:
    """One workload. `unit` is "GB/s" (work = bytes) or "GFLOP/s" (work = flops); `out_elems` sizes the copy
    baseline of a memory-bound row."""
    name: str
    setup: Callable[[np.random.Generator], dict[str, np.ndarray]]
    numpy: Impl
    tolk: Impl
    torch: Impl | None
    tinygrad: Impl | None
    work: float
    unit: str
    out_elems: int = 0
    quick: bool = True
    rtol: float = 1e-3


# ---- per-library helpers: inputs as the library's tensors, results realized

def _tolk(fn: Callable[..., Any], device: str) -> Impl:
    def make(inp: dict[str, np.ndarray]) -> Callable[[], Any]:
        from tolk_core.frontend.tensor import Tensor
        from tolk_core.plugins import Device
        ts = {k: Tensor(v, device=device).realize() for k, v in inp.items()}
        dev = Device[next(iter(ts.values())).device]

        def call() -> Any:
            out = fn(**ts).realize()
            dev.synchronize()  # launches may be asynchronous (OpenCL): time until the result exists
            return out
        return call
    return make


def _torch(fn: Callable[..., Any]) -> Impl:
    def make(inp: dict[str, np.ndarray]) -> Callable[[], Any]:
        import torch
        ts = {k: torch.from_numpy(v.copy()) for k, v in inp.items()}
        return lambda: fn(**ts)
    return make


# tinygrad's device of the same kind as Tolk's: OpenCL rows run on tinygrad's CL device (PoCL here), the rest on CPU
TINYGRAD_DEVICE = {"OPENCL": "CL", "CUDA": "CUDA"}


def tiny_device(device: str) -> str:
    return TINYGRAD_DEVICE.get(device.partition(":")[0].upper(), "CPU")


def _tiny(fn: Callable[..., Any], device: str) -> Impl:
    def make(inp: dict[str, np.ndarray]) -> Callable[[], Any]:
        from tinygrad import Device, Tensor
        dev = Device[tiny_device(device)]
        ts = {k: Tensor(v, device=tiny_device(device)).realize() for k, v in inp.items()}
        return lambda: (fn(**ts).realize(), dev.synchronize())  # CL launches are asynchronous: wait, as Tolk's
    return make


def _np(fn: Callable[..., Any]) -> Impl:
    return lambda inp: (lambda: fn(**inp))


def _same(fn: Callable[..., Any], device: str) -> tuple[Impl, Impl, Impl, Impl]:
    """numpy, Tolk, torch, tinygrad implementations of one expression written with methods all four share."""
    return _np(fn), _tolk(fn, device), _torch(fn), _tiny(fn, device)


def _softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layernorm(x, w, b):
    m = x.mean(-1, keepdims=True) if isinstance(x, np.ndarray) else x.mean(axis=-1, keepdim=True)
    d = x - m
    v = (d * d).mean(-1, keepdims=True) if isinstance(x, np.ndarray) else (d * d).mean(axis=-1, keepdim=True)
    return d / ((v + 1e-5) ** 0.5 if isinstance(x, np.ndarray) else (v + 1e-5).sqrt()) * w + b


def _conv_np(x, w):
    """3x3 'valid' convolution, NCHW x OIHW, through numpy's BLAS (sliding windows + tensordot)."""
    win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # N C H' W' 3 3
    return np.ascontiguousarray(np.tensordot(win, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2))


def _conv_tolk(x, w):
    """The same convolution in Tolk's Tensor surface: nine shifted windows, each a reduction over channels."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    out = None
    for ky in range(3):
        for kx in range(3):
            win = x[:, :, ky:ky + h - 2, kx:kx + wd - 2].reshape(n, 1, c, h - 2, wd - 2)
            term = (win * w[:, :, ky, kx].reshape(1, o, c, 1, 1)).sum(axis=2)
            out = term if out is None else out + term
    return out


def _mlp(x, w1, b1, w2, b2):
    return (x @ w1 + b1).relu() @ w2 + b2 if not isinstance(x, np.ndarray) else np.maximum(x @ w1 + b1, 0) @ w2 + b2


def _attention(q, k, v):
    s = q @ k.transpose(-1, -2) * 64 ** -0.5 if not isinstance(q, np.ndarray) else q @ k.transpose(0, 2, 1) * 0.125
    return (s.softmax(-1) if not isinstance(q, np.ndarray) else _softmax_np(s)) @ v


def mlp_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The demo's MLP (784-256-10, batch 64)."""
    return {"x": _f32(rng, 64, 784), "w1": _f32(rng, 784, 256, scale=784 ** -0.5), "b1": _f32(rng, 256),
            "w2": _f32(rng, 256, 10, scale=256 ** -0.5), "b2": _f32(rng, 10)}


def rows(device: str) -> list[Row]:
    """Every row of the suite for Tolk device `device` (numpy and torch run on CPU, tinygrad on `tiny_device`)."""
    n_ew = 1 << 24
    out: list[Row] = []

    fma = lambda a, b, c: a * b + c  # noqa: E731
    out.append(Row("elementwise a*b+c (2^24 f32)", lambda r: {k: _f32(r, n_ew) for k in "abc"},
                   *_same(fma, device), work=16 * n_ew, unit="GB/s", out_elems=n_ew))

    def ewr_np(a, b, c):
        return np.maximum(a * b + c, 0).sum(dtype=np.float32)

    def ewr(a, b, c):
        return (a * b + c).relu().sum()
    out.append(Row("elementwise+reduce relu(a*b+c).sum() (2^24)", lambda r: {k: _f32(r, n_ew) for k in "abc"},
                   _np(ewr_np), _tolk(ewr, device), _torch(ewr), _tiny(ewr, device), work=12 * n_ew, unit="GB/s",
                   out_elems=n_ew, rtol=1e-2))

    rs = lambda a: a.sum(axis=1)  # noqa: E731
    out.append(Row("row sum (4096x4096).sum(1)", lambda r: {"a": _f32(r, 4096, 4096)},
                   _np(rs), _tolk(rs, device), _torch(lambda a: a.sum(1)), _tiny(rs, device), work=4 * 4096 * 4097,
                   unit="GB/s", out_elems=4096 * 4096))

    sm_shape = (4096, 1024)
    out.append(Row("softmax (4096x1024, last axis)", lambda r: {"x": _f32(r, *sm_shape)}, _np(_softmax_np),
                   _tolk(lambda x: x.softmax(-1), device), _torch(lambda x: x.softmax(-1)),
                   _tiny(lambda x: x.softmax(-1), device), work=8 * 4096 * 1024, unit="GB/s", out_elems=4096 * 1024))
    out.append(Row("layernorm (4096x1024)", lambda r: {"x": _f32(r, *sm_shape), "w": _f32(r, 1024),
                                                      "b": _f32(r, 1024)},
                   *_same(_layernorm, device), work=8 * 4096 * 1024, unit="GB/s", out_elems=4096 * 1024))

    for n in (256, 512, 1024, 2048):
        mm = lambda a, b: a @ b  # noqa: E731
        out.append(Row(f"matmul N={n} f32", lambda r, n=n: {"a": _f32(r, n, n), "b": _f32(r, n, n)},
                       *_same(mm, device), work=2.0 * n ** 3, unit="GFLOP/s", quick=n <= 1024))

    cn, cc, co, hw = 8, 32, 64, 34
    out.append(Row(f"conv2d 3x3 ({cn}x{cc}x{hw}x{hw} -> {co})",
                   lambda r: {"x": _f32(r, cn, cc, hw, hw), "w": _f32(r, co, cc, 3, 3, scale=0.2)},
                   _np(_conv_np), _tolk(_conv_tolk, device),
                   _torch(lambda x, w: __import__("torch").nn.functional.conv2d(x, w)),
                   _tiny(lambda x, w: x.conv2d(w), device), work=2.0 * cn * co * cc * 9 * (hw - 2) ** 2,
                   unit="GFLOP/s"))

    out.append(Row("demo MLP forward (64x784-256-10)", mlp_inputs, *_same(_mlp, device),
                   work=2.0 * 64 * (784 * 256 + 256 * 10), unit="GFLOP/s"))
    out.append(Row("attention head (1x128x64)", lambda r: {k: _f32(r, 1, 128, 64) for k in "qkv"},
                   *_same(_attention, device), work=2.0 * 2 * 128 * 128 * 64, unit="GFLOP/s"))
    return out
