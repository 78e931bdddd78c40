"""A padded convolution reads its input through the PAD in one kernel (codegen/borders.py): the row is split into
an ungated interior and border vectors read with masked loads. Values against numpy's cross-correlation at rows
that fill no vector, rows with no interior, asymmetric padding, dilation and the input gradient; the plan's
shape (one kernel, masked loads, an interior without them) on the CPU source; the masked load's portable
fallback compiled for a target without AVX; lane index vectors are bounded (so the kernel keeps 32-bit
indices)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tolk_core.codegen import generate
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device


def _reference(x: np.ndarray, w: np.ndarray, pads: tuple[tuple[int, int], tuple[int, int]],
               dilation: int = 1) -> np.ndarray:
    """numpy's cross-correlation of x (N, C, H, W) with w (O, C, kh, kw), zero padding `pads` per axis."""
    xp = np.pad(x, ((0, 0), (0, 0), *pads)).astype(np.float64)
    kh, kw = w.shape[2:]
    ho, wo = xp.shape[2] - dilation * (kh - 1), xp.shape[3] - dilation * (kw - 1)
    out = np.zeros((x.shape[0], w.shape[0], ho, wo))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dilation:i * dilation + ho, j * dilation:j * dilation + wo]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, i, j])
    return out


def _sources(t: Tensor) -> list[str]:
    linear, _, _ = schedule(target_for("CPU"), [t.uop])
    return [generate(call.src[0], Device["CPU"].renderer).source for call in linear.src]


@pytest.mark.parametrize("width", [32, 33, 24, 13, 7, 4])
def test_padded_convolution_is_one_kernel_and_matches_numpy(width):
    """Rows of whole vectors (32, 24), rows no vector divides (33, 13: the interior's last vector overlaps),
    a row with no interior (7, 4: every vector is a border one). No pad copy: one kernel."""
    rng = np.random.default_rng(width)
    x = rng.standard_normal((2, 5, 6, width)).astype(np.float32)
    w = rng.standard_normal((8, 5, 3, 3)).astype(np.float32)
    t = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1)
    srcs = _sources(t)
    assert len(srcs) == 1, [s[:200] for s in srcs]
    np.testing.assert_allclose(t.numpy(), _reference(x, w, ((1, 1), (1, 1))), rtol=1e-4, atol=1e-4)


def test_wide_rows_split_into_masked_borders_and_an_ungated_interior():
    """At rows four vectors wide (the ResNet's 32 with AVX2's 8 lanes; 64 with AVX-512's 16, where a 32-wide row
    is two border vectors) the kernel has masked border loads and a second loop nest (the interior) whose vector
    loads carry no mask."""
    lanes = Device["CPU"].renderer.vector_bytes // 4
    x = np.random.default_rng(0).standard_normal((2, 16, 32, max(32, 4 * lanes))).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((16, 16, 3, 3)).astype(np.float32)
    t = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1)
    (src,) = _sources(t)
    assert f"tolk_maskload{lanes}_float(&b1[" in src, src
    # the vector loads of the input that are not masked: the interior's
    assert f"(*(const tolk_float_x{lanes}*)(&b1[" in src, src
    assert "long long" not in src  # the lane masks compare 32-bit index vectors
    np.testing.assert_allclose(t.numpy(), _reference(x, w, ((1, 1), (1, 1))), rtol=1e-4, atol=1e-4)


def test_asymmetric_padding_dilation_and_the_input_gradient_match_numpy():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 9, 26)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=(2, 1, 0, 3)).numpy()  # (l, r, t, b)
    np.testing.assert_allclose(got, _reference(x, w, ((0, 3), (2, 1))), rtol=1e-4, atol=1e-4)
    got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=2, dilation=2).numpy()
    np.testing.assert_allclose(got, _reference(x, w, ((2, 2), (2, 2)), dilation=2), rtol=1e-4, atol=1e-4)
    # d/dx of sum(conv(x) * g) is the correlation of g with the flipped, transposed weight, padded by 1
    xt = Tensor(x, device="CPU").requires_grad_()
    g = rng.standard_normal((2, 4, 9, 26)).astype(np.float32)
    (xt.conv2d(Tensor(w, device="CPU"), padding=1) * Tensor(g, device="CPU")).sum().backward()
    assert xt.grad is not None
    want = _reference(g, w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1].copy(), ((1, 1), (1, 1)))
    np.testing.assert_allclose(xt.grad.numpy(), want, rtol=1e-4, atol=1e-4)


def test_special_values_at_the_border_stay_inside_their_window():
    """An inf or NaN in the input's first and last columns reaches only the outputs whose windows hold it:
    the masked lanes read nothing (a neighbouring row's inf times a zero weight would be NaN)."""
    x = np.ones((1, 1, 4, 16), np.float32)
    x[0, 0, 1, 0], x[0, 0, 2, 15] = np.inf, np.nan
    w = np.ones((1, 1, 3, 3), np.float32)
    got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1).numpy()
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, _reference(x, w, ((1, 1), (1, 1))).astype(np.float32))


_FALLBACK = """
import numpy as np
from tolk_core.frontend.tensor import Tensor
rng = np.random.default_rng(2)
x, w = rng.standard_normal((2, 3, 5, 20)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1).numpy()
xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
want = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 5, j:j + 20], w[:, :, i, j]) for i in range(3) for j in range(3))
np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_masked_loads_without_avx_fall_back_lane_by_lane(tmp_path):
    """Compiled for a target without AVX (no -march=native: SSE2's 16-byte vectors), the masked load is the
    prelude's lane loop, and the values are still numpy's."""
    env = {**os.environ, "TOLK_CFLAGS": "-O2 -fno-math-errno", "TOLK_CACHE_DIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", _FALLBACK], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]


def test_lane_index_vectors_are_bounded_by_their_lanes():
    lanes = UOp(Op.VECTORIZE, dtypes.index.vec(4), tuple(UOp.const(dtypes.index, i) for i in (3, 0, 2, 1)))
    assert (lanes.vmin, lanes.vmax) == (0, 3)
    r = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, 10),), (0, AxisType.LOOP))
    shifted = UOp(Op.ADD, dtypes.index.vec(4), (lanes, UOp(Op.VECTORIZE, dtypes.index.vec(4), (r,) * 4)))
    assert (shifted.vmin, shifted.vmax) == (0, 12)


@pytest.mark.parametrize("npdt", [np.int32, np.uint32, np.float64])
def test_other_dtypes_read_through_the_pad_exactly(npdt):
    """Integer and float64 convolutions read through the same pieces (AVX masked loads for 32-bit ints and
    doubles, lane loops for other element types): exact against numpy's integer sums."""
    rng = np.random.default_rng(9)
    x, w = rng.integers(0, 5, (2, 3, 5, 20)).astype(npdt), rng.integers(0, 3, (4, 3, 3, 3)).astype(npdt)
    got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1).numpy()
    want = _reference(x.astype(np.float64), w.astype(np.float64), ((1, 1), (1, 1)))
    np.testing.assert_array_equal(got, want.astype(got.dtype))


_WIDTHS = """
import numpy as np
from tolk_core.frontend.tensor import Tensor
rng = np.random.default_rng(3)
for dt in (np.float32, np.float64):
    x, w = rng.standard_normal((2, 3, 5, 37)).astype(dt), rng.standard_normal((4, 3, 3, 3)).astype(dt)
    got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 5, j:j + 37], w[:, :, i, j]) for i in range(3)
               for j in range(3))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
print("ok")
"""


@pytest.mark.parametrize("vector_bytes", ["16", "32", "64"])
def test_masked_loads_of_every_vector_width_match_numpy(tmp_path, vector_bytes):
    """Border vectors of 4 to 16 float32 and 2 to 8 float64 lanes: AVX's masked loads, AVX-512's (a bit mask) or the
    lane loop, whichever this CPU's compiler offers for the width, read what numpy's padded correlation reads."""
    env = {**os.environ, "TOLK_CPU_VECTOR_BYTES": vector_bytes, "TOLK_CACHE_DIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", _WIDTHS], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]
