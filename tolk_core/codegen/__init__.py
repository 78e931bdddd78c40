"""Codegen: lower one kernel SINK to source for a renderer: simplify, optimize, linearize, render."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tolk_core import config
from tolk_core.ir import spec
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.uop import UOp, sint
from tolk_core.render.cstyle import KernelParam
from tolk_core.render.renderer import Renderer


@dataclass(frozen=True)
class KernelSource:
    """A rendered kernel: its function text, entry name and launch facts.

    `global_size` entries may be symbolic (expressions of the kernel's variables): `launch_dims` evaluates
    them. `vars` names the integer arguments that follow the buffers, in order.
    """
    name: str
    source: str
    global_size: tuple[sint, ...]
    local_size: tuple[int, ...] | None
    params: tuple[KernelParam, ...]
    vars: tuple[str, ...] = ()

    def launch_dims(self, var_vals: dict[str, int]) -> tuple[int, ...]:
        return tuple(g if isinstance(g, int) else int(g.eval(var_vals)) for g in self.global_size)


def kernel_params(ast: UOp) -> tuple[KernelParam, ...]:
    """Buffers by slot, then the symbolic variables by name (passed as int arguments)."""
    nodes = ast.toposort()
    written = {u.src[0].src[0].arg for u in nodes if u.op is Op.STORE}
    bufs = sorted({u for u in nodes if u.op is Op.PARAM}, key=lambda u: u.arg)
    names = sorted({u.arg[0] for u in nodes if u.op is Op.DEFINE_VAR})
    return (*(KernelParam(p.arg, p.ptrdtype.base, p.arg in written) for p in bufs),
            *(KernelParam(len(bufs) + i, dtypes.index, var=n) for i, n in enumerate(names)))


def _kernel_name(ast: UOp, body: str) -> str:
    nodes = ast.toposort()
    kind = "r" if any(u.op is Op.REDUCE for u in nodes) else "E"
    dims = ["".join(c for c in str(r.src[0]) if c.isalnum()) for r in nodes
            if r.op is Op.RANGE and r.arg[1] is AxisType.LOOP]
    digest = hashlib.sha256(body.encode()).hexdigest()[:8]
    return "_".join([kind, *dims, digest])


def generate(ast: UOp, renderer: Renderer) -> KernelSource:
    """Source for kernel `ast` in `renderer`'s dialect; identical kernels give identical names and text. Raises
    TypeError when `renderer` is not a `Renderer` (the capabilities the optimizer reads are declared there)."""
    if not isinstance(renderer, Renderer):
        raise TypeError(f"{type(renderer).__qualname__} is not a tolk_core.render.renderer.Renderer: a renderer "
                        "subclasses Renderer (or CStyleRenderer), see docs/plugins.md")
    # imported here: a process whose kernels all come from the source cache never loads the optimizer (~2 ms)
    from tolk_core.codegen.linearize import linearize
    from tolk_core.codegen.optimize import optimize

    ast = ast.simplify()
    plan = optimize(ast, renderer, noopt=bool(config.get("NOOPT")))
    spec.check(plan.ast, "kernel", "codegen.optimize")
    lin = spec.check(linearize(plan.ast, plan.guard), "linearized", "codegen.linearize")
    params = kernel_params(plan.ast)
    renderer.index_width(lin)  # a kernel past int32 indices on a device without 64-bit ones: IndexWidthError
    body = renderer.render_kernel("KERNEL", lin, params, plan.loop_kinds)
    name = _kernel_name(ast, body)
    return KernelSource(name, body.replace(" KERNEL(", f" {name}(", 1), plan.global_size, plan.local_size, params,
                        tuple(p.var for p in params if p.var is not None))
