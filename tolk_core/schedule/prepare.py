"""Interim prepare: what realize needs before rangeify, until seed 001's full prepare_rangeify replaces it.

- `unbind`: bound Variables leave the graph (sources and movement arguments alike) and become var_vals,
  so kernels depend on the Variable and one compiled kernel serves every bound value.
"""
from __future__ import annotations

from typing import Any

from tolk_core.errors import ShapeError
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


def _binds_in(arg: Any, out: list[UOp]) -> None:
    if isinstance(arg, UOp):
        out.extend(u for u in arg.toposort() if u.op is Op.BIND)
    elif isinstance(arg, tuple):
        for a in arg:
            _binds_in(a, out)


def _strip(arg: Any, mapping: dict[UOp, UOp]) -> Any:
    if isinstance(arg, UOp):
        return arg.substitute(mapping)
    if isinstance(arg, tuple):
        return tuple(_strip(a, mapping) for a in arg)
    return arg


def unbind(sink: UOp) -> tuple[UOp, dict[str, int]]:
    """`sink` with every bound Variable replaced by the Variable itself, and the bound values by name.

    Binding one Variable to two values in one graph raises ShapeError naming both.
    """
    nodes = sink.toposort()
    binds: list[UOp] = [u for u in nodes if u.op is Op.BIND]
    for u in nodes:
        if u.op in (Op.RESHAPE, Op.EXPAND, Op.PAD, Op.SHRINK):
            _binds_in(u.arg, binds)
    if not binds:
        return sink, {}
    var_vals: dict[str, int] = {}
    for b in binds:
        var, val = b.unbind()
        if var_vals.setdefault(var.arg[0], val) != val:
            raise ShapeError(f"variable {var.arg[0]!r} is bound to both {var_vals[var.arg[0]]} and {val}")
    mapping = {b: b.src[0] for b in binds}
    rebuilt: dict[UOp, UOp] = {}
    for u in nodes:
        src = tuple(rebuilt[s] for s in u.src)
        rebuilt[u] = mapping.get(u) or (u if src == u.src and not isinstance(u.arg, (tuple, UOp)) else
                                        UOp(u.op, u.dtype, src, _strip(u.arg, mapping)))
    return rebuilt[sink], var_vals
