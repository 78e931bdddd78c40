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
import os
import struct
import types
from typing import Any

import numpy as np

from tolk_core.errors import ShapeError, TolkError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes


class StateDictError(TolkError, KeyError):
    """A state dict or safetensors file that does not fit: missing or unexpected keys, a malformed file."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


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
    """Assign `state` into `obj`'s tensors in place (moved to each tensor's device, cast to its dtype).
    With `strict`, missing or unexpected keys raise StateDictError; a shape mismatch always raises ShapeError."""
    own = get_state_dict(obj)
    if strict and (missing := own.keys() - state.keys()) | (unexpected := state.keys() - own.keys()):
        raise StateDictError(f"state dict does not match {type(obj).__name__}: missing keys "
                             f"{sorted(missing)}, unexpected keys {sorted(unexpected)}")
    for k, t in own.items():
        if (v := state.get(k)) is None:
            continue
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
            raise TolkError(f"safe_save: no safetensors dtype for {name!r} of dtype {t.dtype.name}")
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


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into Tensors on `device` (in the file's order), realized.

    The file is a DISK tensor of bytes: each entry is a shrink of it, bitcast to its dtype and reshaped, copied
    to `device`; a copy reads only the entry's bytes (prepare_rangeify's disk rule). Booleans are read as
    bytes and compared with 0. Realized at once, so the file may be rewritten afterwards.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        n = int(struct.unpack("<Q", head)[0]) if len(head) == 8 else 0
        raw = f.read(n)
    if len(head) < 8:
        raise StateDictError(f"{os.fspath(path)} is not a safetensors file: shorter than its 8-byte header size")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise StateDictError(f"{os.fspath(path)} is not a safetensors file: its header is not JSON ({e})") from e
    disk = Tensor.empty(size, dtype=dtypes.uint8, device=f"DISK:{os.fspath(path)}")
    body = 8 + n
    out: dict[str, Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if (dt_name := _NAMES.get(info["dtype"])) is None:
            raise StateDictError(f"{os.fspath(path)}: tensor {name!r} has unsupported dtype {info['dtype']}")
        dt = dtypes.parse(dt_name)
        start, end = info["data_offsets"]
        if body + end > size:
            raise StateDictError(f"{os.fspath(path)}: tensor {name!r} reaches past the end of the file")
        raw_bytes = disk[body + start:body + end]
        if dtypes.is_bool(dt):
            out[name] = raw_bytes.reshape(info["shape"]).to(device) != 0
        else:
            out[name] = raw_bytes.bitcast(dt).reshape(info["shape"]).to(device)
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
