"""State dicts and safetensors files.

- `get_state_dict(obj)`: every Tensor reachable from `obj`'s public attributes (names without a leading
  underscore), through nested objects, lists, tuples and dicts, keyed by dotted path ("layers.0.weight").
- `load_state_dict(obj, state)`: assigns each value into the matching tensor's storage in place, so anything
  holding that tensor (an optimizer, a captured JIT) sees the loaded values.
- `safe_save` / `safe_load`: the safetensors file format (an 8-byte little-endian header length, a JSON header
  of {name: {dtype, shape, data_offsets}} padded with spaces to 8 bytes, then the raw little-endian data),
  written and read with numpy; files interchange with the `safetensors` library.
- `save_checkpoint` / `load_checkpoint`: a model's and an optimizer's state in one file.
"""
from __future__ import annotations

import functools
import json
import math
import os
import struct
import types
from typing import Any

import numpy as np

from tolk_core.errors import ArgumentTypeError, DTypeError, SafetensorsError, ShapeError, StateDictError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import DType, dtypes


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    seen: set[int] = set()

    def walk(o: Any, name: str) -> None:
        if isinstance(o, Tensor):
            out.setdefault(name, o)
            return
        if id(o) in seen or isinstance(o, (str, bytes, int, float, bool, type(None), np.ndarray)):
            return
        seen.add(id(o))
        if isinstance(o, (list, tuple)):
            items = [(str(i), v) for i, v in enumerate(o)]
        elif isinstance(o, dict):
            items = [(str(k), v) for k, v in o.items()]
        elif hasattr(o, "__dict__") and not isinstance(o, (type, types.FunctionType, types.MethodType,
                                                            types.ModuleType, functools.partial)):
            items = [(k, v) for k, v in vars(o).items() if not k.startswith("_")]
        else:
            return
        for k, v in items:
            walk(v, f"{name}.{k}" if name else k)

    walk(obj, prefix)
    return out


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of `obj`'s state dict that require grad (the trainable ones), in state-dict order."""
    return [t for t in get_state_dict(obj).values() if t.requires_grad]


def load_state_dict(obj: Any, state: dict[str, Tensor], strict: bool = True) -> None:
    """Assign `state` into `obj`'s tensors in place (moved to each tensor's device, cast to its dtype). A value
    is a Tensor or an ndarray (uploaded to the tensor's device); anything else is an ArgumentTypeError.
    With `strict`, missing or unexpected keys raise StateDictError; a shape mismatch always raises ShapeError."""
    own = get_state_dict(obj)
    if strict and (missing := own.keys() - state.keys()) | (unexpected := state.keys() - own.keys()):
        raise StateDictError(f"state dict does not match {type(obj).__name__}: missing keys "
                             f"{sorted(missing)}, unexpected keys {sorted(unexpected)}")
    for k, t in own.items():
        if (v := state.get(k)) is None:
            continue
        if isinstance(v, np.ndarray):
            v = Tensor(v, device=t.device)
        elif not isinstance(v, Tensor):
            raise ArgumentTypeError(f"state dict entry {k!r} is a {type(v).__name__}: give a Tensor or an ndarray")
        if tuple(v.shape) != tuple(t.shape):
            raise ShapeError(f"state dict entry {k!r} has shape {v.shape}, the tensor it loads into {t.shape}")
        t.assign(v.to(t.device))


# ---------------------------------------------------------------- safetensors
_CODES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
          "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8",
          "bool": "BOOL"}
_NAMES = {v: k for k, v in _CODES.items()}


def safe_save(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` (realized and read back to the host) as a safetensors file."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    arrays, offset = [], 0
    for name, t in tensors.items():
        if (code := _CODES.get(t.dtype.name)) is None:
            raise DTypeError(f"safe_save: safetensors has no dtype for {name!r} of dtype {t.dtype.name}: cast it "
                             f"first (one of {', '.join(_CODES)})")
        arr = np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8)
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + arr.size]}
        arrays.append(arr)
        offset += arr.size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in arrays:
            f.write(arr.tobytes())


def _read_header(path: str | os.PathLike, size: int) -> tuple[dict[str, Any], int]:
    """The JSON header of safetensors file `path` (of `size` bytes) and where its data starts; SafetensorsError
    when the header size does not fit the file or the header is not a JSON object."""
    name = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{name} is not a safetensors file: shorter than its 8-byte header size")
        n = int(struct.unpack("<Q", head)[0])
        if n > size - 8:  # checked before reading: a garbage size would ask for exabytes
            raise SafetensorsError(f"{name} is not a safetensors file (or is truncated): its header size {n} is "
                                   f"larger than the {size - 8} bytes after it")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except ValueError as e:  # (UnicodeDecodeError is a ValueError)
        raise SafetensorsError(f"{name} is not a safetensors file: its header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise SafetensorsError(f"{name} is not a safetensors file: its header is a JSON {type(header).__name__}, "
                               "not an object of {name: {dtype, shape, data_offsets}}")
    return header, 8 + n


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _entry(path: str, name: str, info: Any, data_size: int) -> tuple[DType, tuple[int, ...], int, int]:
    """(dtype, shape, start, end) of header entry `name`, each checked: SafetensorsError naming the file and
    the tensor when a key is missing or ill-typed, the dtype unknown, or the offsets outside the data or not
    holding exactly the shape's bytes."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or (missing := [k for k in ("dtype", "shape", "data_offsets") if k not in info]):
        raise SafetensorsError(f"{where} lacks {', '.join(missing) if isinstance(info, dict) else 'its entry'}: "
                               "each entry is {\"dtype\": ..., \"shape\": [...], \"data_offsets\": [start, end]}")
    if not isinstance(info["dtype"], str) or (dt_name := _NAMES.get(info["dtype"])) is None:
        raise SafetensorsError(f"{where} has unsupported dtype {info['dtype']!r} (known: {', '.join(_NAMES)})")
    shape, offsets = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise SafetensorsError(f"{where} has shape {shape!r}: a list of non-negative integers is expected")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        raise SafetensorsError(f"{where} has data_offsets {offsets!r}: [start, end] integers are expected")
    dt, (start, end) = dtypes.parse(dt_name), offsets
    if not 0 <= start <= end <= data_size:
        raise SafetensorsError(f"{where} has data_offsets [{start}, {end}] outside the file's {data_size} data "
                               "bytes (the file is truncated or its header is wrong)")
    if end - start != (want := math.prod(shape) * dt.itemsize):
        raise SafetensorsError(f"{where} of shape {tuple(shape)} and dtype {dt_name} needs {want} bytes, its "
                               f"data_offsets [{start}, {end}] hold {end - start}")
    return dt, tuple(shape), start, end


def _check_disjoint(path: str, spans: dict[str, tuple[int, int]]) -> None:
    """SafetensorsError naming both tensors when two entries' data ranges overlap."""
    ordered = sorted((s, e, n) for n, (s, e) in spans.items() if e > s)
    for (_, e0, n0), (s1, _, n1) in zip(ordered, ordered[1:], strict=False):
        if s1 < e0:
            raise SafetensorsError(f"{path}: tensors {n0!r} and {n1!r} have overlapping data_offsets: each "
                                   "tensor's bytes are its own")


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into Tensors on `device` (in the file's order), realized.

    The file is a DISK tensor of bytes: each entry is a shrink of it, bitcast to its dtype and reshaped, copied
    to `device`; a copy reads only the entry's bytes (prepare_rangeify's disk rule). Booleans are read as
    bytes and compared with 0. Realized at once, so the file may be rewritten afterwards. The header is checked
    before any data is read: a malformed file is a SafetensorsError naming the file and the tensor.
    """
    size = os.path.getsize(path)
    header, body = _read_header(path, size)
    name = os.fspath(path)
    entries = {k: _entry(name, k, v, size - body) for k, v in header.items() if k != "__metadata__"}
    _check_disjoint(name, {k: (s, e) for k, (_, _, s, e) in entries.items()})
    disk = Tensor.empty(size, dtype=dtypes.uint8, device=f"DISK:{name}")
    out: dict[str, Tensor] = {}
    for k, (dt, shape, start, end) in entries.items():
        raw_bytes = disk[body + start:body + end]
        if dtypes.is_bool(dt):
            out[k] = raw_bytes.reshape(shape).to(device) != 0
        else:
            out[k] = raw_bytes.bitcast(dt).reshape(shape).to(device)
    if out:
        Tensor.realize(*out.values())
    return out


def save_checkpoint(path: str | os.PathLike, model: Any, optimizer: Any = None) -> None:
    """The model's state dict (and the optimizer's, under "optimizer.") in one safetensors file."""
    state = dict(get_state_dict(model))
    if optimizer is not None:
        state.update({f"optimizer.{k}": v for k, v in optimizer.state_dict().items()})
    safe_save(state, path)


def load_checkpoint(path: str | os.PathLike, model: Any, optimizer: Any = None) -> None:
    """Load a file written by `save_checkpoint` into `model` (and `optimizer`) in place."""
    state = safe_load(path)
    opt = {k.removeprefix("optimizer."): v for k, v in state.items() if k.startswith("optimizer.")}
    load_state_dict(model, {k: v for k, v in state.items() if not k.startswith("optimizer.")})
    if optimizer is not None:
        optimizer.load_state_dict(opt)
