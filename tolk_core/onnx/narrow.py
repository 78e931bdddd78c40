"""ONNX's narrow element types (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, float4 e2m1fn, int4, uint4, int2,
uint2) as one-byte codes on the device (docs/onnx.md, "Narrow types").

Tolk has no such dtypes, so a value of one is a `NarrowTensor`: a uint8 Tensor holding each element's code (the
byte ml_dtypes stores) and the numpy dtype it encodes. Cast and CastLike convert to and from them; other ops
refuse them by name. The code tables come from the dtype's definition (ml_dtypes, on the host, at most 256
entries); the conversions run on the device:
- decoding gathers each code's value from the table;
- encoding a float rounds to the nearest representable value, ties to the even code (the mantissa's low bit),
  by counting the midpoints between neighbouring values below each element. Past the largest finite value it
  gives the type's overflow (inf, or NaN where the type has no inf; float4 saturates), or the largest value
  with `saturate`. NaN gives the NaN code, -0.0 keeps its sign where the type has one;
- encoding to int4/uint4/int2/uint2 truncates toward zero; a value out of range (or NaN) gives 0, as
  ml_dtypes' conversion (ONNX's reference) does.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from tolk_core.errors import UnsupportedError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes

FLOAT_KINDS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
INT_KINDS = ("int4", "uint4", "int2", "uint2")


def narrow_kind(dtype: np.dtype) -> str | None:
    """The narrow type's name when `dtype` is one this module handles, else None."""
    name = np.dtype(dtype).name
    return name if name in FLOAT_KINDS or name in INT_KINDS else None


@dataclass(frozen=True)
class NarrowTensor:
    codes: Tensor  # uint8, one code per element
    dtype: np.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)

    @property
    def ndim(self) -> int:
        return self.codes.ndim

    def numpy(self) -> np.ndarray:
        return self.codes.numpy().view(self.dtype)


def upload(arr: np.ndarray, device: str) -> NarrowTensor:
    return NarrowTensor(Tensor(np.asarray(arr, order="C").view(np.uint8), device=device), np.dtype(arr.dtype))


@cache
def _tables(name: str) -> tuple[np.ndarray, np.ndarray, dict[str, int | None]]:
    """(value of every code 0..255 as float64, valid codes, special codes) of narrow type `name`."""
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name))
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(dt).astype(np.float64)
    bits = {"float4_e2m1fn": 4, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2}.get(name, 8)
    if name in INT_KINDS:
        lo, hi = int(ml_dtypes.iinfo(dt).min), int(ml_dtypes.iinfo(dt).max)
        valid = np.arange(lo, hi + 1).astype(dt).view(np.uint8)
    else:
        valid = codes[: 1 << bits]
    special: dict[str, int | None] = {"nan": None, "inf": None, "neg_zero": None}
    for c in valid:
        v = values[c]
        if np.isnan(v) and special["nan"] is None:
            special["nan"] = int(c)
        if v == np.inf:
            special["inf"] = int(c)
        if v == 0 and np.signbit(v):
            special["neg_zero"] = int(c)
    return values, valid, special


def decode(n: NarrowTensor) -> Tensor:
    """The values of a NarrowTensor: float32 for the float types, int8 for the integer ones."""
    name = narrow_kind(n.dtype)
    assert name is not None
    values, _, _ = _tables(name)
    out_np = np.float32 if name in FLOAT_KINDS else np.int8
    table = Tensor(np.nan_to_num(values, nan=0.0).astype(out_np) if out_np is np.int8 else values.astype(out_np),
                   device=n.codes.device)
    return table[n.codes.cast(dtypes.int32)]


def _gather(table: np.ndarray, idx: Tensor) -> Tensor:
    return Tensor(table, device=idx.device)[idx]


def _nan_code(name: str, nan: int | None) -> int:
    """The code NaN converts to: the type's NaN, or for a type without one (float4) what ml_dtypes gives."""
    if nan is not None:
        return nan
    import ml_dtypes
    with np.errstate(invalid="ignore"):
        return int(np.array([np.nan], np.float32).astype(getattr(ml_dtypes, name)).view(np.uint8)[0])


def _encode_float(x: Tensor, name: str, saturate: bool) -> Tensor:
    values, valid, special = _tables(name)
    fin = sorted({(values[c], int(c)) for c in valid if np.isfinite(values[c]) and not (
        values[c] == 0 and np.signbit(values[c]))})
    vals = np.array([v for v, _ in fin])
    codes = np.array([c for _, c in fin], dtype=np.int64)
    # one virtual entry past each end stands for overflow; its code's parity decides a tie with the largest
    ulp = vals[-1] - vals[-2]
    vals = np.concatenate([[vals[0] - ulp], vals, [vals[-1] + ulp]])
    parity = np.concatenate([[(codes[0] + 1) & 1], codes & 1, [(codes[-1] + 1) & 1]])
    overflow = special["inf"] if special["inf"] is not None else special["nan"]
    top = int(codes[-1]) if saturate or overflow is None else overflow
    bottom = int(codes[0]) if saturate or overflow is None else (overflow | 0x80 if special["inf"] is not None
                                                                 else overflow)
    mids = (vals[:-1] + vals[1:]) / 2  # exact in float32: one bit more than the narrow mantissa
    xe = x.unsqueeze(-1)
    mid_t = Tensor(mids.astype(np.float32), device=x.device)
    idx = (xe > mid_t).cast(dtypes.int32).sum(axis=-1)
    tie = (xe == mid_t).any(axis=-1)
    idx = tie.logical_and(_gather(parity.astype(np.int32), idx) == 1).where(idx + 1, idx)
    code = _gather(np.concatenate([[bottom], codes, [top]]).astype(np.int32), idx)
    code = (x != x).where(_nan_code(name, special["nan"]), code)
    if special["neg_zero"] is not None:  # -0.0: zero whose reciprocal is negative
        code = (x == 0).logical_and((1 / x) < 0).where(special["neg_zero"], code)
    return code.cast(dtypes.uint8)


def _encode_int(x: Tensor, name: str) -> Tensor:
    import ml_dtypes
    info = ml_dtypes.iinfo(getattr(ml_dtypes, name))
    lo, hi = int(info.min), int(info.max)
    _, valid, _ = _tables(name)
    v = x.trunc() if dtypes.is_float(x.dtype) else x
    ok = (v >= lo).logical_and(v <= hi)  # NaN compares false: out of range
    idx = ok.where(v, lo).cast(dtypes.int32) - lo
    zero_code = int(np.array([0]).astype(getattr(ml_dtypes, name)).view(np.uint8)[0])
    return ok.where(_gather(valid.astype(np.int32), idx), zero_code).cast(dtypes.uint8)


def encode(x: Tensor, dtype: np.dtype, saturate: bool = True) -> NarrowTensor:
    """`x` converted to narrow type `dtype` (see the module docstring for the rounding)."""
    name = narrow_kind(dtype)
    if name is None:
        raise UnsupportedError(f"no conversion to {np.dtype(dtype).name}: the narrow types are "
                               f"{', '.join(FLOAT_KINDS + INT_KINDS)}")
    if name in INT_KINDS:
        return NarrowTensor(_encode_int(x, name), np.dtype(dtype))
    f = x if x.dtype == dtypes.float32 else x.cast(dtypes.float32)
    return NarrowTensor(_encode_float(f, name, saturate or name == "float4_e2m1fn"), np.dtype(dtype))
