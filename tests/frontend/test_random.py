"""Seeded random tensors: reproducible, bit-identical across devices, statistically sane, computed on device."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import _available
from tolk_core.frontend.random import _fmix32
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import Op

N = 1 << 17  # 131072 draws: the mean of U(0,1) has standard error 0.0008


def _draws(device: str, seed: int = 1234) -> dict[str, np.ndarray]:
    Tensor.manual_seed(seed)
    ts = {"rand": Tensor.rand(N, device=device), "rand2": Tensor.rand(3, 5, 7, device=device),
          "randn": Tensor.randn(N, device=device), "uniform": Tensor.uniform(N, low=-2.0, high=5.0, device=device)}
    ts["rand"].realize(*ts.values())
    return {k: v.numpy() for k, v in ts.items()}


def test_same_seed_bit_identical_across_devices() -> None:
    devices = [d for d in ("CPU", "OPENCL") if _available(d)[0]]
    if len(devices) < 2:
        pytest.skip(f"needs CPU and OPENCL; available: {devices}")
    a, b = _draws("CPU"), _draws("OPENCL")
    for k in ("rand", "rand2"):
        assert a[k].tobytes() == b[k].tobytes(), k
    # derived draws go through float maths that compilers may round differently (gcc contracts u*(h-l)+l into an
    # FMA; log/cos differ in the last bits): equal to a few ulps, not bitwise
    np.testing.assert_allclose(a["uniform"], b["uniform"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(a["randn"], b["randn"], rtol=1e-5, atol=1e-5)


def test_reproducible_and_advancing(device) -> None:
    Tensor.manual_seed(7)
    first, second = Tensor.rand(64, device=device).numpy(), Tensor.rand(64, device=device).numpy()
    Tensor.manual_seed(7)
    again = Tensor.rand(64, device=device).numpy()
    Tensor.manual_seed(8)
    other = Tensor.rand(64, device=device).numpy()
    assert first.tobytes() == again.tobytes()
    assert not np.array_equal(first, second) and not np.array_equal(first, other)


def test_values_match_the_documented_hash(device) -> None:
    """rand = top 24 bits of fmix32(fmix32(i * golden ^ k0) ^ k1) / 2^24, with keys from (seed, counter)."""
    Tensor.manual_seed(5)
    got = Tensor.rand(1000, device=device).numpy()
    key = np.array([5, 0, 0], np.uint32)
    k0 = _fmix32(_fmix32(key[0:1] ^ _fmix32(key[1:2] + 0x9E3779B9)) ^ key[2:3])
    k1 = _fmix32(k0 + 0x9E3779B9)
    h = _fmix32(_fmix32(np.arange(1000, dtype=np.uint32) * np.uint32(0x9E3779B9) ^ k0) ^ k1)
    assert got.tobytes() == ((h >> 8).astype(np.float32) * np.float32(2 ** -24)).tobytes()


def test_statistics(device) -> None:
    d = _draws(device)
    r, n, u = d["rand"], d["randn"], d["uniform"]
    assert r.dtype == np.float32 and r.shape == (N,) and d["rand2"].shape == (3, 5, 7)
    assert 0 <= r.min() and r.max() < 1
    assert abs(r.mean() - 0.5) < 0.005 and abs(r.var() - 1 / 12) < 0.003
    counts = np.histogram(r, bins=16, range=(0, 1))[0]
    chi2 = ((counts - N / 16) ** 2 / (N / 16)).sum()
    assert chi2 < 50, chi2  # 15 degrees of freedom: p < 1e-5 above 50
    assert abs(np.corrcoef(r[:-1], r[1:])[0, 1]) < 0.01  # neighbours are independent
    assert abs(n.mean()) < 0.02 and abs(n.var() - 1) < 0.03 and abs((n ** 3).mean()) < 0.05
    assert abs((np.abs(n) < 1).mean() - 0.6827) < 0.01
    assert -2 <= u.min() and u.max() < 5 and abs(u.mean() - 1.5) < 0.05


def test_rand_is_one_kernel_and_uploads_nothing(device, kernels) -> None:
    Tensor.manual_seed(0)
    t = Tensor.rand(300, 301, device=device)
    assert not [u for u in t.uop.toposort() if u.op is Op.BUFFER]  # built from constants only
    with kernels() as k:
        t.realize()
    assert k.count == 1


def test_empty_and_dtype(device) -> None:
    assert Tensor.rand(0, 3, device=device).numpy().shape == (0, 3)
    assert Tensor.randn(2, 2, dtype="float32", device=device).numpy().dtype == np.float32
