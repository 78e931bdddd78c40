"""torch's MultiheadAttention (self- and cross-attention, keys and values of their own sizes).

Parameters under torch's names and in its order, so torch's state dict loads unchanged: in_proj_weight
(3E, E) (the query, key and value projections stacked in that order; Xavier-uniform initialised) when key and
value have the embedding size, else q_proj_weight (E, E), k_proj_weight (E, kdim) and v_proj_weight (E, vdim)
(each Xavier-uniform); in_proj_bias (3E,) (zeros); bias_k and bias_v (1, 1, E) with add_bias_kv
(Xavier-normal); out_proj.weight and out_proj.bias (a Linear; its bias starts at zero). Mask conventions are
torch's for this layer, the opposite of scaled_dot_product_attention's: a boolean attn_mask or
key_padding_mask is True where attention is *not* allowed; float masks are added to the scores.
"""
from __future__ import annotations

import math

import numpy as np

from tolk_core.errors import ArgumentError, ShapeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.nn.module import RNG, Module, param, uniform_init


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
        e = embed_dim
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = e, num_heads, dropout, batch_first
        self.kdim, self.vdim = kdim or e, vdim or e
        self.add_zero_attn = add_zero_attn
        if self.kdim == e and self.vdim == e:
            self.in_proj_weight = param(uniform_init(math.sqrt(6 / (4 * e)), 3 * e, e), device)
        else:
            self.q_proj_weight, self.k_proj_weight, self.v_proj_weight = (
                param(uniform_init(math.sqrt(6 / (e + d)), e, d), device) for d in (e, self.kdim, self.vdim))
        self.in_proj_bias = param(np.zeros(3 * e), device) if bias else None
        if add_bias_kv:  # Xavier-normal of a (1, 1, E) tensor: fan in = fan out = E
            self.bias_k, self.bias_v = (param(RNG[0].normal(0.0, math.sqrt(1 / e), (1, 1, e)), device)
                                        for _ in range(2))
        self.out_proj = _OutProj(e, bias, device)

    def _project(self, x: Tensor, i: int) -> Tensor:
        """Projection i (0 query, 1 key, 2 value) of (N, T, d_i) to (N, T, E)."""
        e = self.embed_dim
        w = self.in_proj_weight[i * e:(i + 1) * e] if "in_proj_weight" in self.__dict__ else \
            (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        y = x @ w.T
        return y + self.in_proj_bias[i * e:(i + 1) * e] if self.in_proj_bias is not None else y

    def _heads(self, y: Tensor) -> Tensor:
        """(N, T, E) as (N, H, T, E / H)."""
        n, t = y.shape[:2]
        return y.reshape(n, t, self.num_heads, self.embed_dim // self.num_heads).permute(0, 2, 1, 3)

    def _keys_values(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, int]:
        """The keys and values as heads, with bias_k/bias_v and then a zero key and value appended as torch
        does (add_bias_kv, add_zero_attn), and how many key positions were appended."""
        k, v, extra = self._project(key, 1), self._project(value, 2), 0
        if "bias_k" in self.__dict__:
            n = k.shape[0]
            k = k.cat(self.bias_k.expand(n, 1, self.embed_dim), dim=1)
            v = v.cat(self.bias_v.expand(n, 1, self.embed_dim), dim=1)
            extra += 1
        k, v = self._heads(k), self._heads(v)
        if self.add_zero_attn:
            k, v = (t.pad(((0, 0), (0, 0), (0, 1), (0, 0))) for t in (k, v))
            extra += 1
        return k, v, extra

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        single = query.ndim == 2
        q, k, v = (t.unsqueeze(1 if not self.batch_first else 0) if single else t for t in (query, key, value))
        if not self.batch_first:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # now (N, T, E)
        if q.shape[-1] != self.embed_dim or k.shape[-1] != self.kdim or v.shape[-1] != self.vdim or \
                k.shape[:2] != v.shape[:2] or k.shape[0] != q.shape[0]:
            raise ShapeError(f"MultiheadAttention(embed_dim={self.embed_dim}, kdim={self.kdim}, vdim={self.vdim}): "
                             f"query {query.shape}, key {key.shape}, value {value.shape} do not fit (one batch "
                             "size, as many keys as values, the last axes embed_dim, kdim and vdim)")
        (n, lq), s, h = q.shape[:2], k.shape[1], self.num_heads
        kh, vh, extra = self._keys_values(k, v)
        scores = self._heads(self._project(q, 0)) @ kh.transpose(-1, -2) * (self.embed_dim // h) ** -0.5
        if attn_mask is None and is_causal:
            attn_mask = Tensor.full((lq, s), True, dtypes.bool, q.device).triu(1)
        if attn_mask is not None:  # appended keys are allowed: their mask columns are False (bool) or 0
            m = _additive(attn_mask if attn_mask.ndim == 2 else attn_mask.reshape(n, h, lq, s))
            scores = scores + m.pad([(0, 0)] * (m.ndim - 1) + [(0, extra)])
        if key_padding_mask is not None:
            scores = scores + _additive(key_padding_mask.reshape(n, 1, 1, s)).pad(((0, 0),) * 3 + ((0, extra),))
        weights = scores.softmax(-1)
        dropped = F.dropout(weights, self.dropout, self.training)
        out = (dropped @ vh).permute(0, 2, 1, 3).reshape(n, lq, self.embed_dim)
        out = self.out_proj(out)
        if not self.batch_first:
            out = out.transpose(0, 1)
        if single:
            out = out.squeeze(1 if not self.batch_first else 0)
        if not need_weights:
            return out, None
        w = weights.mean(1) if average_attn_weights else weights
        return out, w.squeeze(0) if single else w
