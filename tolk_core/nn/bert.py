"""BERT's encoder from a Hugging Face checkpoint (config.json + model.safetensors), and sentence embeddings.

`Bert.from_pretrained(model_dir, device)` reads the config and the weights (`nn.state.safe_load`) into a Module
whose state dict uses the checkpoint's names ("encoder.layer.0.attention.self.query.weight", ...), so the
file's tensors are the module's, uploaded once. `bert(input_ids, attention_mask)` is the last hidden state
(batch, seq, hidden); `bert.sentence_embeddings(input_ids, attention_mask)` mean-pools it over the tokens the
mask keeps and L2-normalises each row (sentence-transformers' Pooling(mean) + Normalize: what
all-MiniLM-L6-v2 serves).

The architecture (the original BERT's): embeddings = word + absolute position + token type (type 0 for every
token: one-segment inputs) then LayerNorm; each layer is post-norm: x = LN(x + attn(x)); x = LN(x + ffn(x)) with
an exact (erf) GELU. Padded keys get an additive bias of float32's lowest value (not -inf), as the checkpoint's
own implementation does, so a row whose keys are all masked still averages its values instead of NaN.
The token lookup is `weight[ids]`, Tolk's one-hot gather (frontend/indexing.py), which rangeify turns into a
load of each token's row (schedule/gather.py): tokens x hidden work, not tokens x vocab (docs/performance.md).
Tokenising is the caller's (the `tokenizers` library reads the checkpoint's tokenizer.json; docs/training.md).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tolk_core.errors import DTypeError, ShapeError, StateDictError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.nn import functional as F
from tolk_core.nn.module import Module
from tolk_core.nn.state import safe_load


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> BertConfig:
        """The fields above from a Hugging Face config.json (other keys ignored); a missing one is a
        StateDictError naming it."""
        with open(path) as f:
            raw = json.load(f)
        names = [n for n in cls.__dataclass_fields__]
        missing = [n for n in names[:6] if n not in raw]
        if missing:
            raise StateDictError(f"{path}: BERT config lacks {missing}")
        return cls(**{n: raw[n] for n in names if n in raw})


class _Dense(Module):
    """x @ weight.T + bias with the checkpoint's (out, in) weight."""

    def __init__(self, weight: Tensor, bias: Tensor):
        self.weight, self.bias = weight, bias

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.weight.T + self.bias


class _Norm(Module):
    def __init__(self, weight: Tensor, bias: Tensor, eps: float):
        self.weight, self.bias, self.eps = weight, bias, eps

    def forward(self, x: Tensor) -> Tensor:
        return F.layernorm(x, -1, self.eps) * self.weight + self.bias


class _Table(Module):
    def __init__(self, weight: Tensor):
        self.weight = weight


class _Namespace(Module):
    """A node of the checkpoint's name tree ("attention", "output", ...): attributes only."""

    def __init__(ns, /, **parts: Any):  # noqa: N805 - positional-only, so a part may be named "self"
        ns.__dict__.update(parts)


class _Layer(Module):
    def __init__(self, w: _Weights, p: str, heads: int, eps: float):
        self.heads = heads
        self.attention = _Namespace(
            self=_Namespace(query=w.dense(f"{p}.attention.self.query"), key=w.dense(f"{p}.attention.self.key"),
                            value=w.dense(f"{p}.attention.self.value")),
            output=_Namespace(dense=w.dense(f"{p}.attention.output.dense"),
                              LayerNorm=w.norm(f"{p}.attention.output.LayerNorm", eps)))
        self.intermediate = _Namespace(dense=w.dense(f"{p}.intermediate.dense"))
        self.output = _Namespace(dense=w.dense(f"{p}.output.dense"), LayerNorm=w.norm(f"{p}.output.LayerNorm", eps))

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        b, s, d = x.shape
        att = self.attention.self
        split = lambda t: t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(att.query(x)), split(att.key(x)), split(att.value(x))
        ctx = q.scaled_dot_product_attention(k, v, attn_mask=bias).transpose(1, 2).reshape(b, s, d)
        out = self.attention.output
        x = out.LayerNorm(out.dense(ctx) + x)
        h = F.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(self.output.dense(h) + x)


class _Weights:
    """The checkpoint's tensors by name; building takes each one at most once, and a missing one is a
    StateDictError naming it."""

    def __init__(self, tensors: dict[str, Tensor], where: str):
        self.tensors, self.where = tensors, where

    def get(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise StateDictError(f"{self.where}: no tensor {name!r} (is this a BERT checkpoint?)")
        return self.tensors[name].cast(dtypes.float32) if self.tensors[name].dtype != dtypes.float32 \
            else self.tensors[name]

    def dense(self, p: str) -> _Dense:
        return _Dense(self.get(p + ".weight"), self.get(p + ".bias"))

    def norm(self, p: str, eps: float) -> _Norm:
        return _Norm(self.get(p + ".weight"), self.get(p + ".bias"), eps)


class Bert(Module):
    """BERT's encoder (see the module docstring). Build with `from_pretrained`, or from a config and a dict of
    Tensors in the checkpoint's layout (extra entries, e.g. the pooler or `position_ids`, are ignored)."""

    def __init__(self, config: BertConfig, tensors: dict[str, Tensor], where: str = "weights"):
        w, c = _Weights(tensors, where), config
        self.config = c
        self.embeddings = _Namespace(word_embeddings=_Table(w.get("embeddings.word_embeddings.weight")),
                                     position_embeddings=_Table(w.get("embeddings.position_embeddings.weight")),
                                     token_type_embeddings=_Table(w.get("embeddings.token_type_embeddings.weight")),
                                     LayerNorm=w.norm("embeddings.LayerNorm", c.layer_norm_eps))
        self.encoder = _Namespace(layer=[_Layer(w, f"encoder.layer.{i}", c.num_attention_heads, c.layer_norm_eps)
                                         for i in range(c.num_hidden_layers)])

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, device: str | None = None) -> Bert:
        """The encoder of `model_dir` (config.json, model.safetensors) on `device`."""
        path = os.path.join(model_dir, "model.safetensors")
        return cls(BertConfig.from_json(os.path.join(model_dir, "config.json")), safe_load(path, device), path)

    def _ids(self, input_ids: Tensor | np.ndarray) -> Tensor:
        """Token ids on the weights' device (an array is uploaded as int32)."""
        device = self.embeddings.word_embeddings.weight.device
        if isinstance(input_ids, Tensor):
            return input_ids.to(device)
        arr = np.asarray(input_ids)
        if not np.issubdtype(arr.dtype, np.integer):
            raise DTypeError(f"input_ids must be integer token ids, got {arr.dtype}")
        return Tensor(arr.astype(np.int32), device=device)

    def _mask(self, input_ids: Tensor, attention_mask: Tensor | np.ndarray | None) -> Tensor:
        if attention_mask is None:
            return Tensor.ones(*input_ids.shape, device=input_ids.device)
        m = attention_mask if isinstance(attention_mask, Tensor) else Tensor(np.asarray(attention_mask),
                                                                               device=input_ids.device)
        if tuple(m.shape) != tuple(input_ids.shape):
            raise ShapeError(f"attention_mask has shape {m.shape}, input_ids {input_ids.shape}: give one per token")
        return m.cast(dtypes.float32)

    def forward(self, input_ids: Tensor | np.ndarray, attention_mask: Tensor | np.ndarray | None = None) -> Tensor:
        """The last hidden state (batch, seq, hidden) of int token ids (batch, seq); `attention_mask` (1 keep,
        0 padding; default all ones)."""
        ids = self._ids(input_ids)
        return self._encode(ids, self._mask(ids, attention_mask))

    def _encode(self, ids: Tensor, m: Tensor) -> Tensor:
        if not dtypes.is_int(ids.dtype):
            raise DTypeError(f"input_ids must be integer token ids, got {ids.dtype}")
        if ids.ndim != 2:
            raise ShapeError(f"input_ids must be (batch, seq), got shape {ids.shape}")
        s, e = ids.shape[1], self.embeddings
        if s > self.config.max_position_embeddings:
            raise ShapeError(f"sequence length {s} exceeds max_position_embeddings "
                             f"{self.config.max_position_embeddings}")
        x = e.word_embeddings.weight[ids] + e.position_embeddings.weight[:s] + e.token_type_embeddings.weight[0]
        x = e.LayerNorm(x)
        bias = ((1.0 - m) * float(np.finfo(np.float32).min)).reshape(m.shape[0], 1, 1, s)
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return x

    def sentence_embeddings(self, input_ids: Tensor | np.ndarray,
                            attention_mask: Tensor | np.ndarray | None = None) -> Tensor:
        """(batch, hidden): the mean of the kept tokens' hidden states, divided by its L2 norm (floored at
        1e-12, torch's F.normalize)."""
        ids = self._ids(input_ids)
        m = self._mask(ids, attention_mask)
        x = self._encode(ids, m)
        pooled = (x * m.unsqueeze(-1)).sum(axis=1) / m.sum(axis=1, keepdim=True).maximum(1e-9)
        return pooled / (pooled * pooled).sum(axis=1, keepdim=True).sqrt().maximum(1e-12)
