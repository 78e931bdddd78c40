"""The PYTHON reference device's renderer: a linearized kernel as plain text, one instruction per line.

The "source" is a serialization of `codegen.linearize`'s output, read back and interpreted with numpy by
`tolk_core.runtime.python` (which defines the format in its docstring). It is meant to be read by people
diffing a plugin's results against the reference: every value has a name, every loop is explicit.

A kernel looks like::

    kernel r_3_e5cb908a(b0:float32:w, b1:float32:r)
      v0 = RANGE index index:3
      v1 = DEFINE_REG float32 ADD
      ...
      STORE b0 v0 v7
      END v0
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tolk_core.errors import CompileError
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.render.renderer import LoopKind, Renderer


def const_token(value: int | float, dt: DType) -> str:
    """A constant operand: ``dtype:value`` (floats as Python reprs, so nan/inf/-0.0 survive)."""
    if dtypes.is_bool(dt):
        return f"{dt.name}:{int(bool(value))}"
    if dtypes.is_float(dt):
        v = float(value)
        return f"{dt.name}:{'nan' if math.isnan(v) else repr(v)}"
    return f"{dt.name}:{int(value)}"


class PythonRenderer(Renderer):
    """Renders linearized kernels for the PYTHON interpreter. Loop style (`has_local` False): the kernel loops
    itself (no local ids, no work-item guard), so `optimize` keeps every loop and the interpreter vectorizes over
    them. Every dtype is supported (numpy and ml_dtypes compute them all)."""

    device = "PYTHON"
    local_arrays = False  # the interpreter has no kernel-local arrays: row values are stored instead
    index64 = True  # the interpreter computes every index value as a numpy int64

    def render_kernel(self, name: str, lin: list[UOp], params: Sequence,
                      loop_kinds: Mapping[UOp, LoopKind] | None = None) -> str:
        """One ``kernel name(...)`` block for the linearized kernel `lin`; loop kinds are hints and ignored."""
        names: dict[UOp, str] = {}
        lines: list[str] = []

        def ref(u: UOp) -> str:
            if u.op is Op.CONST:
                return const_token(u.arg, u.dtype)
            if u.op is Op.PARAM:
                return f"b{u.arg}"
            if u.op is Op.DEFINE_VAR:
                return f"${u.arg[0]}"
            if u.op is Op.REDUCE:  # after its loop, a reduction is its accumulator
                return names[UOp(Op.DEFINE_REG, u.dtype, (), u)]
            return names[u]

        def mem(u: UOp) -> list[str]:  # INDEX(buf, idx[, gate]) -> "b<slot> idx [gate]"
            return [ref(s) for s in u.src]

        depth = 1
        for u in lin:
            pad = "  " * depth
            if u.op in (Op.INDEX, Op.PARAM, Op.DEFINE_VAR, Op.CONST):
                continue
            if u.op is Op.END:
                depth -= 1
                lines.append(f"{'  ' * depth}END {ref(u.src[0])}")
                continue
            if u.op is Op.STORE:
                lines.append(f"{pad}STORE {' '.join([*mem(u.src[0])[:2], ref(u.src[1]), *mem(u.src[0])[2:]])}")
                continue
            if u.op is Op.ASSIGN:
                lines.append(f"{pad}ASSIGN {u.arg.name} {ref(u.src[0])} {ref(u.src[1])}")
                continue
            dest = names[u] = f"v{len(names)}"
            if u.op is Op.DEFINE_REG:
                operands = [u.arg.arg.name]
            elif u.op is Op.LOAD:
                operands = mem(u.src[0])
            elif u.op in (Op.SPECIAL, Op.IF, Op.DEFINE_LOCAL, Op.BARRIER):
                raise CompileError(f"the PYTHON renderer has no work items: {u.op.name} cannot be rendered", str(u))
            else:
                operands = [ref(s) for s in u.src]
            lines.append(f"{pad}{dest} = {u.op.name} {u.dtype.name} {' '.join(operands)}".rstrip())
            if u.op is Op.RANGE:
                depth += 1
        sig = ", ".join(f"${p.var}" if p.var is not None else f"b{p.slot}:{p.dtype.name}:{'w' if p.written else 'r'}"
                        for p in params)
        return "\n".join([f"kernel {name}({sig})", *lines])
