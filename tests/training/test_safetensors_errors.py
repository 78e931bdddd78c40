"""Malformed safetensors files are a SafetensorsError naming the file and the tensor, found before any data is
read (never a KeyError, an OverflowError, a MemoryError, nor header bytes loaded as a tensor's data); and
`load_state_dict` takes ndarrays as well as Tensors."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from tolk_core import nn
from tolk_core.errors import ArgumentTypeError, SafetensorsError, StateDictError
from tolk_core.nn.state import load_state_dict, safe_load, safe_save

DATA = np.arange(4, dtype=np.float32).tobytes()  # 16 bytes
GOOD = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}


def write(path, header, data: bytes = DATA, size: int | None = None):
    """A safetensors file at `path`: `header` (an object, dumped as JSON, or raw bytes), then `data`; the
    8-byte header size is the header's length unless `size` is given."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if size is None else size) + raw + data)
    return path


def test_a_well_formed_file_loads(tmp_path, device) -> None:  # the reference the broken files differ from
    np.testing.assert_array_equal(safe_load(write(tmp_path / "ok", GOOD), device)["w"].numpy(), [0, 1, 2, 3])


@pytest.mark.parametrize("size, why", [(2 ** 63 + 5, "OverflowError"), (2 ** 40, "MemoryError"), (10 ** 6, "past")])
def test_header_size_larger_than_the_file(tmp_path, size, why) -> None:
    path = write(tmp_path / "big", GOOD, size=size)
    with pytest.raises(SafetensorsError, match=rf"{path}.*header size {size} is larger than the \d+ bytes after it"):
        safe_load(path)


def test_header_that_is_not_a_json_object(tmp_path) -> None:
    with pytest.raises(SafetensorsError, match="its header is a JSON list, not an object"):
        safe_load(write(tmp_path / "list", [1, 2]))
    with pytest.raises(SafetensorsError, match="its header is not JSON"):
        safe_load(write(tmp_path / "latin", b"{\"\xff\": 1}"))
    with pytest.raises(SafetensorsError, match="shorter than its 8-byte header size"):
        (tmp_path / "short").write_bytes(b"\x01\x02")
        safe_load(tmp_path / "short")


@pytest.mark.parametrize("entry, match", [
    ({"shape": [4], "data_offsets": [0, 16]}, "tensor 'w' lacks dtype"),
    ({"dtype": "F32", "data_offsets": [0, 16]}, "tensor 'w' lacks shape"),
    ([1, 2], "tensor 'w' lacks its entry"),
    ({"dtype": "X9", "shape": [4], "data_offsets": [0, 16]}, "tensor 'w' has unsupported dtype 'X9'"),
    ({"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}, "tensor 'w' has shape \\[-4\\]"),
    ({"dtype": "F32", "shape": [4], "data_offsets": [0]}, "tensor 'w' has data_offsets \\[0\\]"),
    ({"dtype": "F32", "shape": [4], "data_offsets": [0, 16.0]}, "\\[0, 16.0\\]: \\[start, end\\] integers"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [-8, -4]}, "data_offsets \\[-8, -4\\] outside the file's 16 data"),
    ({"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}, "data_offsets \\[8, 24\\] outside"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}, "of shape \\(2,\\) and dtype float32 needs 8 bytes"),
], ids=["no-dtype", "no-shape", "not-an-object", "bad-dtype", "negative-shape", "one-offset", "float-offset",
        "negative-offsets", "offsets-past-the-end", "size-mismatch"])
def test_malformed_entries_name_the_file_and_tensor(tmp_path, entry, match) -> None:
    path = write(tmp_path / "bad", {"w": entry})
    with pytest.raises(SafetensorsError, match=rf"{path}: {match}" if "tensor" in match else match):
        safe_load(path)


def test_overlapping_offsets(tmp_path) -> None:
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
    with pytest.raises(SafetensorsError, match="tensors 'a' and 'b' have overlapping data_offsets"):
        safe_load(write(tmp_path / "overlap", header))


def test_errors_keep_their_standard_bases(tmp_path) -> None:
    assert issubclass(SafetensorsError, ValueError) and issubclass(SafetensorsError, StateDictError)
    with pytest.raises(ValueError):
        safe_load(write(tmp_path / "list", [1]))


def test_load_state_dict_takes_ndarrays(tmp_path, device) -> None:
    lin = nn.Linear(2, 3, device=device)
    w, b = np.arange(6, dtype=np.float32).reshape(3, 2), np.ones(3, np.float32)
    load_state_dict(lin, {"weight": w, "bias": b})
    np.testing.assert_array_equal(lin.weight.numpy(), w)
    np.testing.assert_array_equal(lin(np.eye(2, dtype=np.float32)).numpy(), w.T + 1)
    with pytest.raises(ArgumentTypeError, match="state dict entry 'bias' is a list: give a Tensor or an ndarray"):
        load_state_dict(lin, {"weight": w, "bias": [1.0, 1.0, 1.0]})
    safe_save(lin.state_dict(), tmp_path / "lin")  # what was loaded round-trips
    np.testing.assert_array_equal(safe_load(tmp_path / "lin")["bias"].numpy(), b)
