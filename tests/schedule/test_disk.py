"""The DISK device (copy-only, file-backed) and prepare_rangeify's disk rules (docs/prepare.md): values against numpy on
every compiled target, the normal form of a copy from a disk, and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.engine.target import reading, target_for
from tolk_core.errors import DiskError, TolkError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.pattern import graph_rewrite
from tolk_core.ir.uop import UOp
from tolk_core.nn.state import safe_load, safe_save
from tolk_core.plugins import Device
from tolk_core.schedule.prepare import disk_run, expand_bitcast, on_disk, pm_disk_copies, rule_fires

RNG = np.random.default_rng(7)
DATA = RNG.standard_normal((6, 8)).astype(np.float32)
PREFIX = b"8 bytes!"


@pytest.fixture
def disk(tmp_path) -> Tensor:
    """The file PREFIX + DATA's bytes, as a DISK tensor of bytes."""
    path = tmp_path / "data.bin"
    path.write_bytes(PREFIX + DATA.tobytes())
    return Tensor.empty(len(PREFIX) + DATA.nbytes, dtype=dtypes.uint8, device=f"DISK:{path}")


def _floats(disk: Tensor) -> Tensor:
    return disk[len(PREFIX):].bitcast(dtypes.float32).reshape(6, 8)


RAW = np.frombuffer(PREFIX + DATA.tobytes(), np.uint8)
CASES = [  # (name, view of the disk tensor, the same view of the file's bytes in numpy)
    ("whole file", lambda d: d, lambda: RAW),
    ("prefix bytes", lambda d: d[:8], lambda: RAW[:8]),
    ("floats", _floats, lambda: DATA),
    ("rows 1..2 (a run)", lambda d: _floats(d)[1:3], lambda: DATA[1:3]),
    ("a column block (not a run)", lambda d: _floats(d)[1:4, 2:5], lambda: DATA[1:4, 2:5]),
    ("transpose", lambda d: _floats(d).T, lambda: DATA.T),
    ("flip and reshape", lambda d: _floats(d).flip(0).reshape(4, 12), lambda: DATA[::-1].reshape(4, 12)),
    ("int16 halves of a row", lambda d: d[8:].bitcast(dtypes.int16).reshape(6, 16)[2], lambda: DATA.view(np.int16)[2]),
    ("int64 pairs", lambda d: _floats(d).bitcast(dtypes.int64)[3], lambda: DATA.view(np.int64)[3]),
    ("bytes of one float row, widened", lambda d: _floats(d)[4].bitcast(dtypes.uint8).bitcast(dtypes.int32),
     lambda: DATA[4].view(np.int32)),
    ("strided bytes", lambda d: d[8:40:4], lambda: RAW[8:40:4]),
    ("empty", lambda d: _floats(d)[2:2], lambda: DATA[2:2]),
]


def test_disk_views_copied_equal_numpy(disk, device) -> None:
    outs = [view(disk).to(device) for _, view, _ in CASES]
    Tensor.realize(*outs)  # every target kernel compiles in one unit
    for (name, _, want), got in zip(CASES, outs, strict=True):
        assert got.device.startswith(device)
        np.testing.assert_array_equal(got.numpy(), want(), err_msg=name)


def test_a_whole_disk_tensor_reads_back(disk) -> None:
    np.testing.assert_array_equal(disk.numpy(), RAW)


def test_the_disk_device_says_disk(disk) -> None:
    assert Device.is_disk(disk.device) and not Device.is_disk("CPU")
    assert Device.capabilities(disk.device).extras["disk"] is True
    cpu = Tensor([1.0], device="CPU")
    target = reading(target_for("CPU"), [*disk.uop.toposort(), *cpu.uop.toposort()])
    assert on_disk(disk.uop, target) and not on_disk(cpu.uop, target)
    assert not on_disk(disk.uop, None)  # without a target's facts nothing is a disk


# ---------------------------------------------------------------- the rule's normal form
def _copy_form(t: Tensor) -> UOp:
    """The graph of `t.to("CPU")` after prepare's disk-copy rule."""
    sink = UOp(Op.SINK, dtypes.void, (t.to("CPU").uop,))
    return graph_rewrite(sink, pm_disk_copies, ctx=reading(target_for("CPU"), sink.toposort())).src[0]


def _the_copy(u: UOp) -> UOp:
    (copy,) = [x for x in u.toposort() if x.op is Op.COPY]
    return copy


def test_views_of_a_disk_copy_move_to_its_result(disk) -> None:
    before = rule_fires["disk_copy_views_move_to_result"]
    out = _copy_form(_floats(disk)[1:3].T)
    copy = _the_copy(out)
    # the copy reads rows 1..2 of the floats: bytes 8 + 32*4 ... as float32, the byte run bitcast once
    assert copy.src[0].op is Op.BITCAST and copy.dtype == dtypes.float32
    buf, offset, nbytes, dt = disk_run(copy.src[0])
    assert buf.op is Op.BUFFER and (offset, nbytes, dt) == (8 + 8 * 4, 2 * 8 * 4, dtypes.float32)
    # the transpose and the reshape to rows happen after the copy, on the target
    assert out.op is Op.PERMUTE and out.src[0].op is Op.RESHAPE and out.src[0].src[0] is copy
    assert rule_fires["disk_copy_views_move_to_result"] > before


def test_a_copy_of_a_non_run_reads_the_smallest_run_below_it(disk) -> None:
    out = _copy_form(disk[8:40:4])  # a strided view: its shrink [8, 40) is the run, the steps apply after
    buf, offset, nbytes, dt = disk_run(_the_copy(out).src[0])
    assert (offset, nbytes, dt) == (8, 29, dtypes.uint8)  # the steps shrink to [8, 37) first


def test_a_disk_copy_in_normal_form_is_left_alone(disk) -> None:
    form = _copy_form(disk[8:16])
    sink = UOp(Op.SINK, dtypes.void, (form,))
    assert graph_rewrite(sink, pm_disk_copies, ctx=reading(target_for("CPU"), sink.toposort())).src[0] is form


def test_expand_bitcast_is_none_on_a_disk(disk) -> None:
    bc = disk[8:].bitcast(dtypes.float32).uop
    target = reading(target_for("CPU"), bc.toposort())
    assert bc.op is Op.BITCAST and expand_bitcast(bc, target) is None
    on_cpu = Tensor(np.zeros(8, np.uint8), device="CPU").bitcast(dtypes.float32).uop
    assert expand_bitcast(on_cpu, target) is not None


# ---------------------------------------------------------------- refusals
def test_computing_on_a_disk_is_refused(disk) -> None:
    f = _floats(disk)
    for make in (lambda: (f + 1).numpy(), lambda: (f + 1).to("CPU").numpy(),
                 lambda: (f * 2).reshape(48).to("CPU").numpy(), lambda: f.sum().to("CPU").numpy()):
        with pytest.raises(DiskError, match=r"DISK:.*data\.bin is a disk: a disk value can only be copied.* "
                                            r"(ADD|MUL|REDUCE_AXIS)") as e:
            make()
        assert isinstance(e.value, TolkError) and isinstance(e.value, ValueError)


def test_a_disk_view_is_read_through_a_copy_only(disk) -> None:
    with pytest.raises(DiskError, match="SHRINK was asked to be computed on it"):
        disk[:8].numpy()


def test_writing_a_disk_is_refused(disk) -> None:
    with pytest.raises(DiskError, match="is read-only"):
        Tensor(np.zeros(8, np.uint8)).to(disk.device).realize()
    with pytest.raises(DiskError, match="is a disk: .* SHRINK was asked to be computed on it"):
        disk[:8].assign(disk[8:16])


def test_a_file_too_small_or_missing_is_named(tmp_path) -> None:
    small = tmp_path / "small.bin"
    small.write_bytes(b"1234")
    with pytest.raises(DiskError, match=r"small\.bin: storage of 8 bytes does not fit in the file's 4 bytes"):
        Tensor.empty(8, dtype=dtypes.uint8, device=f"DISK:{small}").to("CPU").numpy()
    with pytest.raises(DiskError, match="cannot open the file"):
        Tensor.empty(8, dtype=dtypes.uint8, device=f"DISK:{tmp_path / 'missing.bin'}").to("CPU").numpy()
    with pytest.raises(DiskError, match="a disk device names a file"):
        Tensor.empty(8, dtype=dtypes.uint8, device="DISK:")


# ---------------------------------------------------------------- safetensors through the disk
def test_safe_load_reads_through_the_disk(tmp_path, device) -> None:
    arrays = {"f32": RNG.standard_normal((3, 5)).astype(np.float32), "i64": np.arange(7, dtype=np.int64) - 3,
              "u8": np.arange(5, dtype=np.uint8), "f16": RNG.standard_normal(4).astype(np.float16),
              "scalar": np.array(2.5, np.float64), "empty": np.zeros((0, 3), np.int32),
              "flags": np.array([True, False, True])}
    path = tmp_path / "t.safetensors"
    # (Tensor(0-d array) comes out as shape (1,): np.ascontiguousarray makes it 1-d; reshaped back here)
    safe_save({k: Tensor(v, device="CPU").reshape(v.shape) for k, v in arrays.items()}, path)
    before = rule_fires["disk_copy_views_move_to_result"]
    loaded = safe_load(path, device=device)
    assert rule_fires["disk_copy_views_move_to_result"] > before
    path.write_bytes(b"")  # loaded at once: the tensors no longer read the file
    for k, v in arrays.items():
        assert loaded[k].device.startswith(device) and loaded[k].shape == v.shape, k
        np.testing.assert_array_equal(loaded[k].numpy(), v, err_msg=k)
