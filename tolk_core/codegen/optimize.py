"""optimize: choose how a kernel's loops map onto the machine, from the renderer's capabilities.

CPU-style renderers (no locals) keep loops and annotate them: the outermost output loop is split across
threads (`parallel`) when the kernel does enough work to pay for a thread team, the innermost output loop
with no reduction inside is vectorized (`simd`), and a small reduction loop is unrolled.

GPU-style renderers (locals) get one work item per output element: the output ranges are rebuilt from one
global index by division and remainder, the launch is `ceil(n / local)` groups of `local` items, and a guard
stops the items past the end. Heuristics and their numbers belong to the speed work; these are the mechanisms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, prod, sint

PARALLEL_MIN_WORK = 1 << 15   # element-operations below which a thread team costs more than it saves
UNROLL_MAX = 16


@dataclass
class Plan:
    """What optimize decided: the (rewritten) AST, loop annotations, launch dims and the work-item guard."""
    ast: UOp
    loop_kinds: dict[UOp, str] = field(default_factory=dict)
    global_size: tuple[sint, ...] = (1, 1, 1)
    local_size: tuple[int, int, int] | None = None
    guard: UOp | None = None


def _output_ranges(ast: UOp) -> list[UOp]:
    return [r for top in ast.src if top.op is Op.END for r in top.src[1:] if r.op is Op.RANGE]


def _size(r: UOp) -> sint:
    return r.src[0].arg if r.src[0].op is Op.CONST else r.src[0]


def _most(r: UOp) -> int:
    """The largest size a (possibly symbolic) range can have: what heuristics plan for."""
    return int(r.src[0].vmax)


def optimize(ast: UOp, renderer, noopt: bool = False) -> Plan:
    outs = _output_ranges(ast)
    reduce_ranges = [r for r in ast.toposort() if r.op is Op.RANGE and r.arg[1] == "reduce"]
    if renderer.has_local:
        return _gpu_plan(ast, outs, renderer, noopt)
    plan = Plan(ast)
    if noopt:
        return plan
    work = math.prod(_most(r) for r in outs + reduce_ranges)
    if outs and work >= PARALLEL_MIN_WORK and _most(outs[0]) > 1:
        plan.loop_kinds[outs[0]] = "parallel"
    if outs and not reduce_ranges:
        inner = outs[-1]
        plan.loop_kinds[inner] = "parallel simd" if plan.loop_kinds.get(inner) == "parallel" else "simd"
    for r in reduce_ranges:
        if r.src[0].op is Op.CONST and _most(r) <= UNROLL_MAX:
            plan.loop_kinds[r] = "unroll"
    return plan


def _gpu_plan(ast: UOp, outs: list[UOp], renderer, noopt: bool) -> Plan:
    n = prod(_size(r) for r in outs)
    if isinstance(n, int) and n <= 1:
        return Plan(ast)
    most = n if isinstance(n, int) else int(n.vmax)
    local = 1 if noopt else min(renderer.local_max or 1, 64, 1 << max(most - 1, 1).bit_length())
    groups = -(-n // local) if isinstance(n, int) else ((n + (local - 1)) // local).simplify()
    # the guard stops items past n, so every item that computes has gid < n: range analysis may assume it
    gid = UOp(Op.SPECIAL, dtypes.index, (n if isinstance(n, UOp) else UOp.const(dtypes.index, n),), ("gidx0", 0))
    sizes = [_size(r) for r in outs]
    subs = {r: (gid // prod(sizes[i + 1:])) % sizes[i] for i, r in enumerate(outs)}
    ast = ast.substitute(subs)
    # the ENDs now close nothing: keep only their stores
    ast = UOp(Op.SINK, dtypes.void, tuple(t.src[0] if t.op is Op.END else t for t in ast.src)).simplify()
    exact = isinstance(n, int) and groups * local == n
    return Plan(ast, global_size=(groups, 1, 1), local_size=(local, 1, 1), guard=None if exact else gid < n)
