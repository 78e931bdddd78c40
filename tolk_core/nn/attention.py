"""torch's MultiheadAttention (self- and cross-attention with one embedding size for query, key and value).

Parameters under torch's names, so torch's state dict loads unchanged: in_proj_weight (3E, E) (the query, key
and value projections stacked in that order; Xavier-uniform initialised), in_proj_bias (3E,) (zeros),
out_proj.weight and out_proj.bias (a Linear; its bias starts at zero). Mask conventions are torch's for this
layer, the opposite of scaled_dot_product_attention's: a boolean attn_mask or key_padding_mask is True where
attention is *not* allowed; float masks are added to the scores.
"""
from __future__ import annotations

import math

import numpy as np

from tolk_core.errors import ArgumentError, ShapeError, UnsupportedError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.nn.module import Module, param, uniform_init


class _OutProj(Module):
    """The output projection: torch's Linear(E, E) with its bias set to zero."""

    def __init__(self, e: int, bias: bool, device: str | None):
        self.weight = param(uniform_init(1 / math.sqrt(e), e, e), device)
        self.bias = param(np.zeros(e), device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y


def _additive(mask: Tensor) -> Tensor:
    """A torch MHA mask as scores to add: a boolean True (not allowed) becomes -inf, a float mask is itself."""
    return mask.where(float("-inf"), 0.0) if dtypes.is_bool(mask.dtype) else mask


class MultiheadAttention(Module):
    """torch's MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first). `forward(query, key,
    value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal)` returns (output,
    weights): output (L, N, E), or (N, L, E) with batch_first, or (L, E) unbatched; weights the attention
    weights averaged over heads (N, L, S) (per head (N, H, L, S) without average_attn_weights), None
    without need_weights. is_causal with no attn_mask masks key j > query i."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: str | None = None):
        if embed_dim % num_heads:
            raise ArgumentError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or vdim not in (None, embed_dim):
            raise UnsupportedError("MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim other than "
                                      "embed_dim are not supported; project key and value to embed_dim first")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.in_proj_weight = param(uniform_init(math.sqrt(6 / (4 * embed_dim)), 3 * embed_dim, embed_dim), device)
        self.in_proj_bias = param(np.zeros(3 * embed_dim), device) if bias else None
        self.out_proj = _OutProj(embed_dim, bias, device)

    def _heads(self, x: Tensor, i: int) -> Tensor:
        """Projection i (0 query, 1 key, 2 value) of (N, T, E) as (N, H, T, E / H)."""
        e = self.embed_dim
        y = x @ self.in_proj_weight[i * e:(i + 1) * e].T
        if self.in_proj_bias is not None:
            y = y + self.in_proj_bias[i * e:(i + 1) * e]
        n, t = x.shape[:2]
        return y.reshape(n, t, self.num_heads, e // self.num_heads).permute(0, 2, 1, 3)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        single = query.ndim == 2
        q, k, v = (t.unsqueeze(1 if not self.batch_first else 0) if single else t for t in (query, key, value))
        if not self.batch_first:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # now (N, T, E)
        if q.shape[-1] != self.embed_dim or k.shape != v.shape or k.shape[0] != q.shape[0]:
            raise ShapeError(f"MultiheadAttention(embed_dim={self.embed_dim}): query {query.shape}, key {key.shape}, "
                             f"value {value.shape} do not fit (one batch size, key and value alike)")
        (n, lq), s, h = q.shape[:2], k.shape[1], self.num_heads
        scores = self._heads(q, 0) @ self._heads(k, 1).transpose(-1, -2) * (self.embed_dim // h) ** -0.5
        if attn_mask is None and is_causal:
            attn_mask = Tensor.full((lq, s), True, dtypes.bool, q.device).triu(1)
        if attn_mask is not None:
            scores = scores + _additive(attn_mask if attn_mask.ndim == 2 else attn_mask.reshape(n, h, lq, s))
        if key_padding_mask is not None:
            scores = scores + _additive(key_padding_mask.reshape(n, 1, 1, s))
        weights = scores.softmax(-1)
        dropped = F.dropout(weights, self.dropout, self.training)
        out = (dropped @ self._heads(v, 2)).permute(0, 2, 1, 3).reshape(n, lq, self.embed_dim)
        out = self.out_proj(out)
        if not self.batch_first:
            out = out.transpose(0, 1)
        if single:
            out = out.squeeze(1 if not self.batch_first else 0)
        if not need_weights:
            return out, None
        w = weights.mean(1) if average_attn_weights else weights
        return out, w.squeeze(0) if single else w
