"""linearize: a kernel SINK into a flat program of loops and statements.

The output is a list of UOps in execution order: RANGE opens a loop, END(range) closes it, DEFINE_REG declares
a reduction's accumulator, ASSIGN(reg, value) with arg=op folds one element into it, STORE writes memory, and
every other UOp is a value computed where it stands. A REDUCE appearing after its loop stands for its
accumulator's final value.

Placement: a value is computed in the innermost loop among the ranges it depends on (and no deeper), so
loop-invariant work is hoisted out of inner loops by construction. A loop's statement is appended to its parent
block only when the loop closes, so values hoisted into the parent while the loop's body is being built still
precede the loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp


@dataclass
class _Loop:
    rng: UOp | None                 # None for the kernel's top level
    body: list = field(default_factory=list)


def _range_deps(sink: UOp) -> dict[UOp, frozenset[UOp]]:
    deps: dict[UOp, frozenset[UOp]] = {}
    for u in sink.toposort():
        if u.op is Op.RANGE:
            deps[u] = frozenset((u,))
        elif u.op is Op.REDUCE:
            deps[u] = deps[u.src[0]] - frozenset(u.src[1:])
        else:
            deps[u] = frozenset().union(*(deps[s] for s in u.src)) if u.src else frozenset()
    return deps


def linearize(sink: UOp, guard: UOp | None = None) -> list[UOp]:
    """The kernel `sink` (STOREs, possibly wrapped in END(store, *ranges)) as a flat program.

    With a `guard`, the program starts with `IF(guard, arg="return")`: work items where it is false stop.
    """
    deps = _range_deps(sink)
    stack: list[_Loop] = [_Loop(None)]
    placed: set[UOp] = set()

    def block_for(u: UOp) -> list:
        for loop in reversed(stack):
            if loop.rng is not None and loop.rng in deps[u]:
                return loop.body
        return stack[0].body

    def close(n: int, target: list) -> None:
        """Close the innermost `n` loops, each inside the next; the outermost lands in `target`."""
        for i in range(n):
            loop = stack.pop()
            (target if i == n - 1 else stack[-1].body).extend([loop.rng, *loop.body, UOp(Op.END, dtypes.void,
                                                                                        (loop.rng,))])

    def emit(u: UOp) -> None:
        # iterative post-order: sources first; REDUCE opens and closes its own loops
        work = [(u, False)]
        while work:
            x, expanded = work.pop()
            if x in placed or x.op in (Op.RANGE, Op.CONST, Op.PARAM, Op.DEFINE_VAR):
                continue
            if x.op is Op.REDUCE:
                emit_reduce(x)
                continue
            if not expanded:
                work.append((x, True))
                work.extend((s, False) for s in reversed(x.src))
                continue
            block_for(x).append(x)
            placed.add(x)

    def emit_reduce(r: UOp) -> None:
        reg = UOp(Op.DEFINE_REG, r.dtype, (), r)
        target = block_for(r)  # the reduction's loops go where its value is needed, not where it was asked for
        target.append(reg)
        rngs = [s for s in r.src[1:] if s.op is Op.RANGE]
        for rng in rngs:
            open_loop(rng)
        emit(r.src[0])
        stack[-1].body.append(UOp(Op.ASSIGN, r.dtype, (reg, r.src[0]), r.arg))
        close(len(rngs), target)
        placed.add(r)

    def open_loop(rng: UOp) -> None:
        emit(rng.src[0])  # a symbolic bound is computed before its loop
        stack.append(_Loop(rng))

    if guard is not None:
        emit(guard)
        stack[0].body.append(UOp(Op.IF, dtypes.void, (guard,), "return"))
    for top in sink.src:
        if top.op is Op.END:
            store, rngs = top.src[0], [s for s in top.src[1:] if s.op is Op.RANGE]
            for rng in rngs:
                open_loop(rng)
            emit(store)
            close(len(rngs), stack[0].body)
        else:
            emit(top)
    return stack[0].body
