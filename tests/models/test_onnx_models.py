"""Models nobody here wrote, exported to ONNX by torch's exporter (into tmp_path, at test time) and run through
tolk_core.onnx on every compiled device:

- all-MiniLM-L6-v2 (its real weights, through the torch twin of bench/pretrained_torch.py), against that torch
  module: every element of the normalised embeddings within 1e-4, and the same similarity ranking.
- resnet50 (torchvision's architecture, seeded weights, eval; bench/pretrained_torch.py), against onnxruntime
  (CPU execution provider) on the same file. Batch 1 at 64x64 (resnet50 takes any size from 32 up): the 53
  convolutions of a real-sized model, small enough to compile in CI. Tolerance: max|tolk - ort| / max|ort|
  <= 1e-4 over the 1000 logits (normwise: a logit near 0 has no relative precision of its own after 50 layers
  of float32 sums; ort and torch differ by ~6e-5 here).

Both export with the TorchScript exporter (`dynamo=False`): it needs no onnxscript and takes half the dynamo
exporter's time, which CI pays on every run. MiniLM exports without the exporter's constant folding (half the
export time again; Tolk folds the weights' transposes itself on the first call).
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.models.conftest import ranking

TOL = 1e-4
REL = 1e-4


@pytest.fixture(scope="module")
def minilm_onnx(tmp_path_factory, torch_bert, batch):
    """torch_bert exported to ONNX at the batch's shape."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx", reason="onnx (the onnx extra)")
    path = tmp_path_factory.mktemp("minilm") / "minilm.onnx"
    with torch.no_grad():
        torch.onnx.export(torch_bert, (torch.tensor(batch[0]), torch.tensor(batch[1])), str(path),
                          input_names=["input_ids", "attention_mask"], output_names=["embeddings"],
                          opset_version=18, dynamo=False, do_constant_folding=False)
    return path


def test_onnx_export_matches_torch(device, minilm_onnx, batch, torch_embeddings):
    import tolk_core.onnx
    model = tolk_core.onnx.load(minilm_onnx, device=device)
    out = model(input_ids=batch[0], attention_mask=batch[1])["embeddings"].numpy()
    assert np.abs(out - torch_embeddings).max() <= TOL
    assert ranking(out) == ranking(torch_embeddings)


@pytest.fixture(scope="module")
def resnet_onnx(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="torch, the exporter")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime, the reference (the models extra)")
    pytest.importorskip("onnx", reason="onnx (the onnx extra)")
    from bench.pretrained_torch import resnet50
    model = resnet50(seed=0)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    path = tmp_path_factory.mktemp("resnet50") / "resnet50.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (torch.tensor(x),), str(path), input_names=["x"], output_names=["logits"],
                          opset_version=18, dynamo=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return path, x, sess.run(None, {"x": x})[0]


def test_resnet50_matches_onnxruntime(device, resnet_onnx):
    import tolk_core.onnx
    path, x, ref = resnet_onnx
    out = tolk_core.onnx.load(path, device=device)(x=x)["logits"].numpy()
    assert out.shape == (1, 1000)
    assert np.abs(ref).max() > 0.1  # the calibrated batch norms keep the logits at a real scale
    assert np.abs(out - ref).max() / np.abs(ref).max() <= REL
    assert int(out.argmax()) == int(ref.argmax())
