"""State dicts through safetensors files: identical predictions after a round trip, files that the safetensors
library reads and writes, exact resumption of training (model, Adam moments, step count, dropout stream)."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import nn
from tolk_core.errors import ShapeError
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import F, optim
from tolk_core.nn.state import (
    StateDictError,
    load_checkpoint,
    safe_load,
    safe_save,
    save_checkpoint,
)


class _Net(nn.Module):
    def __init__(self, device=None):
        self.l1, self.drop, self.l2 = nn.Linear(8, 16, device=device), nn.Dropout(0.2), nn.Linear(16, 3, device=device)

    def forward(self, x):
        return self.l2(self.drop(self.l1(x).relu()))


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((10, 8)).astype(np.float32), rng.integers(0, 3, 10).astype(np.int32))
            for _ in range(n)]


def _train(net, opt, batches, device=None):
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(net(Tensor(x, device=device)), Tensor(y, device=device))
        loss.backward()
        opt.step(loss)


def test_round_trip_restores_identical_predictions(tmp_path, device) -> None:
    nn.manual_seed(0)
    a = _Net(device).eval()
    x = Tensor(np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32), device=device)
    want = a(x).numpy()
    safe_save(a.state_dict(), tmp_path / "net.safetensors")
    nn.manual_seed(99)
    b = _Net(device).eval()
    assert not np.array_equal(b(x).numpy(), want)
    b.load_state_dict(safe_load(tmp_path / "net.safetensors", device))
    np.testing.assert_array_equal(b(x).numpy(), want)


def test_files_interchange_with_the_safetensors_library(tmp_path) -> None:
    st = pytest.importorskip("safetensors.numpy", reason="the safetensors library is not installed: only "
                                                         "tolk's own reader and writer are checked")
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.array([1, -2], np.int64),
              "b": np.array([True, False]), "h": np.array([0.5], np.float16)}
    safe_save({k: Tensor(v) for k, v in arrays.items()}, tmp_path / "ours.safetensors", metadata={"by": "tolk"})
    theirs = st.load_file(str(tmp_path / "ours.safetensors"))
    st.save_file(arrays, str(tmp_path / "theirs.safetensors"))
    ours = safe_load(tmp_path / "theirs.safetensors")
    for k, v in arrays.items():
        np.testing.assert_array_equal(theirs[k], v)
        np.testing.assert_array_equal(ours[k].numpy(), v)
        assert ours[k].numpy().dtype == v.dtype


def test_resumed_training_continues_exactly(tmp_path) -> None:
    batches = _batches(8)
    nn.manual_seed(0)
    net = _Net()
    opt = optim.Adam(net.parameters(), lr=0.01)
    _train(net, opt, batches[:4])
    save_checkpoint(tmp_path / "ckpt.safetensors", net, opt)
    _train(net, opt, batches[4:])
    nn.manual_seed(5)
    resumed = _Net()
    resumed.drop.seed = net.drop.seed  # the mask stream's seed is configuration; its position is state
    ropt = optim.Adam(resumed.parameters(), lr=0.01)
    load_checkpoint(tmp_path / "ckpt.safetensors", resumed, ropt)
    assert ropt.t.item() == 4
    _train(resumed, ropt, batches[4:])
    for (k, v), (_, w) in zip(net.state_dict().items(), resumed.state_dict().items(), strict=True):
        np.testing.assert_array_equal(w.numpy(), v.numpy(), err_msg=k)
    for (k, v), (_, w) in zip(opt.state_dict().items(), ropt.state_dict().items(), strict=True):
        np.testing.assert_array_equal(w.numpy(), v.numpy(), err_msg=k)


def test_state_errors(tmp_path) -> None:
    net = _Net()
    state = net.state_dict()
    with pytest.raises(StateDictError, match=r"missing keys \['l2.bias'\]"):
        net.load_state_dict({k: v for k, v in state.items() if k != "l2.bias"})
    with pytest.raises(ShapeError, match="'l2.bias' has shape"):
        net.load_state_dict({**state, "l2.bias": Tensor(np.zeros(4, np.float32))})
    (tmp_path / "junk").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    with pytest.raises(StateDictError, match="not JSON"):
        safe_load(tmp_path / "junk")
    opt = optim.SGD(net.parameters(), momentum=0.9)
    with pytest.raises(StateDictError, match="optimizer state does not match"):
        opt.load_state_dict({"t": opt.t})
