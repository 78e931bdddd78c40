"""Codegen: lower one kernel SINK to source for a renderer: simplify, optimize, linearize, render."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tolk_core import config
from tolk_core.codegen.linearize import linearize
from tolk_core.codegen.optimize import optimize
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.render.cstyle import KernelParam


@dataclass(frozen=True)
class KernelSource:
    """A rendered kernel: its function text, entry name and launch facts."""
    name: str
    source: str
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int] | None
    params: tuple[KernelParam, ...]


def kernel_params(ast: UOp) -> tuple[KernelParam, ...]:
    nodes = ast.toposort()
    written = {u.src[0].src[0].arg for u in nodes if u.op is Op.STORE}
    bufs = sorted({u for u in nodes if u.op is Op.PARAM}, key=lambda u: u.arg)
    return tuple(KernelParam(p.arg, p.dtype.base, p.arg in written) for p in bufs)


def _kernel_name(ast: UOp, body: str) -> str:
    nodes = ast.toposort()
    kind = "r" if any(u.op is Op.REDUCE for u in nodes) else "E"
    dims = [str(int(r.src[0].arg)) for r in nodes if r.op is Op.RANGE and r.arg[1] == "loop"]
    digest = hashlib.sha256(body.encode()).hexdigest()[:8]
    return "_".join([kind, *dims, digest])


def generate(ast: UOp, renderer) -> KernelSource:
    """Source for kernel `ast` in `renderer`'s dialect; identical kernels give identical names and text."""
    ast = ast.simplify()
    plan = optimize(ast, renderer, noopt=bool(config.get("NOOPT")))
    lin = linearize(plan.ast)
    params = kernel_params(plan.ast)
    body = renderer.render_kernel("KERNEL", lin, params, plan.loop_kinds, guard=plan.guard)
    name = _kernel_name(ast, body)
    return KernelSource(name, body.replace(" KERNEL(", f" {name}(", 1), plan.global_size, plan.local_size, params)
