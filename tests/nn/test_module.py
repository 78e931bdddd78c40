"""Module state beyond parameters: buffers (in the state dict, not in parameters(); non-persistent ones in
neither), train()/eval() reaching nested modules, to(device) moving parameters and buffers in place,
tolk_core.no_grad at the top level, and a model's state dict with buffers round-tripping through a
safetensors file and loading into torch's module of the same shape (torch's names, strict)."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tests.nn.torch_check import copy_params
from tolk_core import nn
from tolk_core.frontend.autograd import GradientError
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn.state import safe_load, safe_save

torch = pytest.importorskip("torch", reason="torch is not installed: the torch comparisons need it (pip install "
                                            "torch==2.13.0, CPU)")


class Net(nn.Module):
    def __init__(self, device: str | None = None):
        self.conv = nn.Conv2d(2, 3, 3, padding=1, device=device)
        self.bn = nn.BatchNorm2d(3, device=device)
        self.blocks = [nn.Linear(12, 4, device=device), nn.LayerNorm(4, device=device)]
        self.drop = nn.Dropout(0.5)
        self.register_buffer("scale", Tensor(np.full(4, 2.0, np.float32), device=device))
        self.register_buffer("cache", Tensor(np.zeros(3, np.float32), device=device), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        y = nn.F.max_pool2d(self.bn(self.conv(x)).relu(), 2).reshape(x.shape[0], -1)
        return self.blocks[1](self.drop(self.blocks[0](y))) * self.scale


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(12, 4), torch.nn.LayerNorm(4)])
        self.drop = torch.nn.Dropout(0.5)
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.register_buffer("cache", torch.zeros(3), persistent=False)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(self.bn(self.conv(x)).relu(), 2).reshape(x.shape[0], -1)
        return self.blocks[1](self.drop(self.blocks[0](y))) * self.scale


def test_buffers_parameters_and_modes() -> None:
    net = Net()
    keys = set(net.state_dict())
    assert {"scale", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"} <= keys and "cache" not in keys
    assert all(p.requires_grad for p in net.parameters())
    assert not any(b is p for b in net.buffers() for p in net.parameters())
    assert net.cache.shape == (3,)  # a non-persistent buffer is still an attribute
    assert len(net.parameters()) == len(list(TorchNet().parameters()))
    net.eval()
    assert not any(m.training for m in net.modules())
    assert not net.blocks[0].training and not net.bn.training
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(ValueError, match="requires grad"):
        net.register_buffer("bad", Tensor(np.ones(2, np.float32)).requires_grad_())


def test_state_dict_round_trip_into_torch(device, tmp_path) -> None:
    nn.manual_seed(3)
    net = Net(device)
    x = np.random.default_rng(0).standard_normal((4, 2, 4, 4)).astype(np.float32)
    net.drop.p = 0.0  # the running statistics move; dropout would differ between the two libraries
    net(Tensor(x, device=device))
    net(Tensor(x * 2, device=device))
    assert net.bn.num_batches_tracked.item() == 2
    ours = {k: v for k, v in net.state_dict().items() if not k.startswith("drop.")}  # Dropout's stream counter
    safe_save(ours, tmp_path / "net.safetensors")
    from safetensors.torch import load_file
    theirs = TorchNet()
    theirs.load_state_dict(load_file(tmp_path / "net.safetensors"), strict=True)
    for k, v in theirs.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), ours[k].numpy(), err_msg=k)
    assert theirs.bn.num_batches_tracked.dtype == torch.int64
    # and back: a fresh tolk model loads the file and computes what torch's computes in eval mode
    again = Net(device)
    again.load_state_dict({**safe_load(tmp_path / "net.safetensors", device), "drop.counter": again.drop.counter})
    again.eval()
    theirs.eval()
    np.testing.assert_allclose(again(Tensor(x, device=device)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_module_to_moves_in_place(device) -> None:
    net = Net("CPU")
    params, buffers = net.parameters(), net.buffers()
    before = {k: v.numpy() for k, v in net.state_dict().items()}
    net.to(device)
    want = Tensor.zeros(1, device=device).device  # the device's full name ("OPENCL:0")
    assert all(a is b for a, b in zip(net.parameters() + net.buffers(), params + buffers, strict=True))
    assert all(t.device == want for t in [*net.state_dict().values(), net.cache])
    assert all(p.requires_grad for p in params)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    out = net(Tensor(np.ones((2, 2, 4, 4), np.float32), device=device)).sum()
    out.backward()
    assert all(p.grad is not None and p.grad.device == want for p in params)


def test_no_grad_at_top_level() -> None:
    x = Tensor(np.ones(3, np.float32)).requires_grad_()
    with tolk_core.no_grad():
        with pytest.raises(GradientError, match="no_grad"):
            (x * 2).sum().backward()
    (x * 2).sum().backward()
    assert x.grad is not None and x.grad.numpy().tolist() == [2.0, 2.0, 2.0]


def test_copy_params_pairs_every_parameter() -> None:
    ours, theirs = Net(), TorchNet()
    pairs = copy_params(ours, theirs)
    assert len(pairs) == len(list(theirs.parameters()))
