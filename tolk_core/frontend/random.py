"""Seeded random tensors: `manual_seed`, `rand`, `uniform`, `randn` (computed on the device from uint32 ops) and
`multinomial` (its uniform draws are `rand`'s; the search over the weights runs on the host).

An op belongs here when it draws values from the seeded stream (and so advances its counter).

Counter-based: element i of a draw is a hash of (seed, counter, i), built from uint32 XOR, shifts and
multiplies (two rounds of murmur3's 32-bit finaliser). Nothing is uploaded: the element index is itself
computed (an integer `arange`, an IOTA). Inside a JIT capture the key is a stored input instead, refilled before
every replay (docs/jit.md). Each draw advances the process-wide counter by one, so draws differ; `manual_seed(n)` sets
the seed and resets the counter. The uniform float is the hash's top 24 bits times 2^-24: integer maths and an
exact conversion, so one seed gives bit-identical `rand` values on every device. `uniform` scales them (a
compiler may contract that into an FMA, so devices can differ in the last bit) and `randn` uses Box-Muller
(its log/sqrt/cos may differ between devices in the last bits).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.ir.dtype import dtypes

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

_state = {"seed": 0, "counter": 0}
_GOLDEN = 0x9E3779B9
# pushed by the JIT around a capture: each draw appends the storage holding its key, which the JIT refills with
# the next key (next counter) before every replay, so replays draw as eager calls would
recording: list[list[Tensor]] = []


def _fmix32(x: Any) -> Any:
    """murmur3's finaliser: a bijection on uint32 with full avalanche; works on Tensors and numpy uint32 arrays."""
    x = x ^ (x >> 16)
    x = x * 0x85EBCA6B
    x = x ^ (x >> 13)
    x = x * 0xC2B2AE35
    return x ^ (x >> 16)


def next_key() -> np.ndarray:
    """The (k0, k1) uint32 key of the next draw, from (seed, counter); advances the counter."""
    seed, counter = _state["seed"], _state["counter"]
    _state["counter"] += 1
    key = np.array([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, counter & 0xFFFFFFFF], np.uint32)
    k0 = _fmix32(_fmix32(key[0:1] ^ _fmix32(key[1:2] + _GOLDEN)) ^ key[2:3])
    return np.concatenate([k0, _fmix32(k0 + _GOLDEN)])


class RandomMixin:
    """Random constructors; mixed into `Tensor`."""

    __slots__ = ()

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed every later draw (and restart the draw counter)."""
        _state["seed"], _state["counter"] = int(seed), 0

    @classmethod
    def _random_bits(cls: type[Tensor], shape: tuple[int, ...], device: str | None) -> Tensor:
        if any(s < 0 for s in shape):
            raise ShapeError(f"negative size in shape {shape}")
        keys = next_key()
        n = math.prod(shape)
        if n == 0:
            return cls.full(shape, 0, dtypes.uint32, device)
        k0: Any
        k1: Any
        if recording:  # the key is an input of the captured graph, not a constant baked into it
            stored = cls(keys, device=device)
            recording[-1].append(stored)
            k0, k1 = stored.shrink(((0, 1),)), stored.shrink(((1, 2),))
        else:
            k0, k1 = int(keys[0]), int(keys[1])
        h = _fmix32((cls.arange(n, dtype=dtypes.uint32, device=device) * _GOLDEN) ^ k0)
        return _fmix32(h ^ k1).reshape(shape)

    @classmethod
    def rand(cls: type[Tensor], *shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """Uniform floats in [0, 1), advancing the draw counter."""
        bits = cls._random_bits(cls._shape_arg(shape), device)
        u = (bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
        return u.cast(dtypes.parse(dtype or dtypes.default_float))

    @classmethod
    def uniform(cls: type[Tensor], *shape: Any, low: float = 0.0, high: float = 1.0, dtype: Any = None,
                device: str | None = None) -> Tensor:
        """Uniform floats in [low, high)."""
        u = cls.rand(*shape, dtype=dtypes.float32, device=device)
        return (u * (high - low) + low).cast(dtypes.parse(dtype or dtypes.default_float))

    @classmethod
    def randn(cls: type[Tensor], *shape: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """Standard normal floats (Box-Muller over two uniform draws)."""
        shape = cls._shape_arg(shape)
        u1 = cls.rand(shape, dtype=dtypes.float32, device=device)
        u2 = cls.rand(shape, dtype=dtypes.float32, device=device)
        radius = ((1 - u1).log() * -2).sqrt()  # 1 - u1 is in (0, 1]: the log is finite
        return (radius * (u2 * (2 * math.pi)).cos()).cast(dtypes.parse(dtype or dtypes.default_float))


    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """torch.multinomial: `num_samples` category indices per row of this (C,) or (R, C) tensor of
        non-negative weights (they need not sum to 1), int64, with or without replacement. The uniform draws
        are `Tensor.rand`'s (seeded by `manual_seed`); the inverse-CDF search runs on the host, so the weights
        are read back (not inside a JIT capture)."""
        if self.ndim not in (1, 2) or num_samples < 1:
            raise ShapeError(f"multinomial needs a 1-d or 2-d tensor of weights and num_samples >= 1, got shape "
                             f"{self.shape} and {num_samples}")
        w = self.numpy().astype(np.float64).reshape(-1, self.shape[-1])
        if not np.isfinite(w).all() or (w < 0).any() or (w.sum(axis=1) <= 0).any():
            raise ArgumentError("multinomial weights must be finite, non-negative, and not all zero in a row")
        if not replacement and num_samples > int((w > 0).sum(axis=1).min()):
            raise ArgumentError(f"multinomial without replacement of {num_samples} samples from a row with fewer "
                                "non-zero weights: lower num_samples or pass replacement=True")
        u = type(self).rand(w.shape[0], num_samples, dtype=dtypes.float32, device=self.device).numpy()
        out = np.zeros((w.shape[0], num_samples), np.int64)
        for r in range(w.shape[0]):
            row = w[r].copy()
            for j in range(num_samples):
                cdf = np.cumsum(row)
                out[r, j] = min(int(np.searchsorted(cdf, u[r, j] * cdf[-1], side="right")), len(row) - 1)
                if not replacement:
                    row[out[r, j]] = 0.0
        return type(self)(out.reshape(self.shape[:-1] + (num_samples,)), device=self.device)
