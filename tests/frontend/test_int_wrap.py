"""Signed integer arithmetic wraps as numpy's on every device (docs/dtypes.md): sums past int64, int32 add, mul,
neg and abs at the extremes, int8/int16 arithmetic whose C promotion to int must be cut back, shifts into the
sign bit, scans and matmuls; and the C the renderers emit for it (signed + - * negation and << through the
unsigned type of the same width, never raw signed overflow, which C, OpenCL C and CUDA leave undefined)."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.plugins import Device

SIGNED = ("int8", "int16", "int32", "int64")


def _pairs(dt: str) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dt)
    vals = np.array([info.min, info.min + 1, -2, -1, 0, 1, 2, info.max - 1, info.max], dt)
    return np.repeat(vals, len(vals)), np.tile(vals, len(vals))


def test_int64_sum_past_the_maximum_wraps_as_numpy(device):
    got = Tensor.full((2,), 2**63 - 2, "int64", device=device).sum().numpy()
    with np.errstate(over="ignore"):
        want = np.full((2,), 2**63 - 2, np.int64).sum()
    assert got == want == -4


@pytest.mark.parametrize("dt", SIGNED)
def test_add_sub_mul_of_extremes_wrap_as_numpy(device, dt):
    a, b = _pairs(dt)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    with np.errstate(over="ignore"):
        for name, got, want in (("+", ta + tb, a + b), ("-", ta - tb, a - b), ("*", ta * tb, a * b)):
            g = got.numpy()
            assert g.dtype == want.dtype, name
            np.testing.assert_array_equal(g, want, err_msg=f"{dt} {name}")


@pytest.mark.parametrize("dt", SIGNED)
def test_neg_abs_square_of_the_minimum_wrap_as_numpy(device, dt):
    """-INT_MIN and abs(INT_MIN) are INT_MIN (numpy's), squares wrap."""
    info = np.iinfo(dt)
    x = np.array([info.min, info.max, -1, 0, info.min + 1] * 4, dt)
    t = Tensor(x, device=device)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal((-t).numpy(), -x)
        np.testing.assert_array_equal(t.abs().numpy(), np.abs(x))
        np.testing.assert_array_equal(t.square().numpy(), x * x)
    assert (-t).numpy()[0] == info.min


@pytest.mark.parametrize("dt", SIGNED)
def test_shift_into_the_sign_bit_wraps_as_numpy(device, dt):
    bits = 8 * np.dtype(dt).itemsize
    x = np.array([1, -1, 3, np.iinfo(dt).max, np.iinfo(dt).min], dt)
    s = np.array([bits - 1, 1, bits - 2, 1, 1], dt)
    np.testing.assert_array_equal((Tensor(x, device=device) << Tensor(s, device=device)).numpy(), np.left_shift(x, s))


def test_narrow_sums_scans_and_matmuls_wrap(device):
    """An int32 accumulator (sum(dtype=)), an int64 cumsum, an int32 matmul: all wrap as numpy's."""
    with np.errstate(over="ignore"):
        x = np.full(40, 2**30, np.int32)
        np.testing.assert_array_equal(Tensor(x, device=device).sum(dtype="int32").numpy(), x.sum(dtype=np.int32))
        big = np.full(20, 2**62, np.int64)
        np.testing.assert_array_equal(Tensor(big, device=device).cumsum(0).numpy(), np.cumsum(big))
        m = np.full((4, 4), 2**20, np.int32)
        np.testing.assert_array_equal((Tensor(m, device=device) @ Tensor(m, device=device)).numpy(), m @ m)
        rng = np.random.default_rng(0)
        for dt in ("int8", "int32", "int64"):  # big enough for vector registers (lanes of an unsigned vector)
            a, b = (rng.integers(-2**31, 2**31, (64, 64)).astype(dt) for _ in range(2))
            np.testing.assert_array_equal((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a @ b)
            np.testing.assert_array_equal(Tensor(a * b, device=device).sum(axis=0, dtype=dt).numpy(),
                                          (a * b).sum(axis=0, dtype=dt))
        i8 = np.array([100, 27, -128, 127], np.int8)
        np.testing.assert_array_equal((Tensor(i8, device=device) * 3 + 100).numpy(), i8 * np.int8(3) + np.int8(100))


_UBSAN_PROGRAM = """
import numpy as np
from tolk_core import Tensor
with np.errstate(all="ignore"):
    for dt in ("int8", "int16", "int32", "int64"):
        info = np.iinfo(dt)
        a = np.array([info.min, info.max, info.max, -1, 3, info.min + 1, 7, 0] * 4, dt)
        b = np.array([-1, 1, info.max, info.min, info.max, 2, -7, 5] * 4, dt)
        ta, tb = Tensor(a), Tensor(b)
        for got, want in ((ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (-ta, -a), (ta.abs(), np.abs(a)),
                          (ta << 3, a << 3), (ta.sum(dtype=dt), a.sum(dtype=dt)), (ta.cumsum(0), np.cumsum(a)),
                          (ta.reshape(4, 8) @ tb.reshape(8, 4), a.reshape(4, 8) @ b.reshape(8, 4))):
            assert (got.numpy() == want).all(), (dt, got.numpy(), want)
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-2**31, 2**31, (64, 64)).astype(np.int32) for _ in range(2))
    assert ((Tensor(a) @ Tensor(b)).numpy() == a @ b).all()
    assert Tensor.full((2,), 2**63 - 2, "int64").sum().item() == -4
print("clean")
"""


def test_cpu_kernels_have_no_signed_overflow_under_ubsan(tmp_path):
    """The CPU kernels of wrapping programs, compiled with -fsanitize=signed-integer-overflow (aborting on the
    first overflow): they run clean and give numpy's results. Rendering signed + - * as plain C fails here."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "TOLK_DEVICE": "CPU", "TOLK_CACHE_DIR": str(tmp_path),
           "TOLK_CFLAGS": "-O1 -fno-math-errno -fsanitize=signed-integer-overflow -fno-sanitize-recover=all"}
    run = subprocess.run([sys.executable, "-c", _UBSAN_PROGRAM], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "clean" in run.stdout, run.stderr[-3000:]
    assert "runtime error" not in run.stderr


@pytest.mark.parametrize("renderer_name", ["OPENCL", "CUDA"])
@pytest.mark.parametrize("dt", SIGNED)
def test_gpu_dialects_render_signed_ops_through_unsigned(renderer_name, dt):
    """OpenCL C and CUDA (no sanitizer here): each signed + - * negation and << is computed in an unsigned type
    and converted back; unsigned and index arithmetic is left as it was."""
    r = Device.renderer_for(renderer_name)
    sdt = getattr(dtypes, dt)
    unsigned = r.type_name(dtypes.uint64 if sdt.itemsize == 8 else dtypes.uint32)
    for op, sym in ((Op.ADD, "+"), (Op.SUB, "-"), (Op.MUL, "*"), (Op.SHL, "<<")):
        text = r.alu(op, ["x", "y"], sdt)
        assert text == f"(({r.type_name(sdt)})((({unsigned})x){sym}" + ("y" if op is Op.SHL else f"(({unsigned})y)") + \
            "))", text
    assert r.alu(Op.NEG, ["x"], sdt) == f"(({r.type_name(sdt)})(-(({unsigned})x)))"
    assert r.alu(Op.ADD, ["x", "y"], dtypes.index) == "(x+y)"
    assert r.alu(Op.MUL, ["x", "y"], dtypes.uint32) == "(x*y)"


def test_opencl_vectors_wrap_by_reinterpreting_their_lanes():
    r = Device.renderer_for("OPENCL")
    assert r.wrapping(Op.ADD, ["x", "y"], dtypes.int32.vec(4), [dtypes.int32.vec(4), dtypes.int32]) == \
        "as_int4((as_uint4(x)+((uint)y)))"
    assert r.wrapping(Op.NEG, ["x"], dtypes.int8.vec(4)) == "as_char4((-as_uchar4(x)))"
