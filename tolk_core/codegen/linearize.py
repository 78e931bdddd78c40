"""linearize: a kernel SINK into a flat program of loops and statements.

The output is a list of UOps in execution order: RANGE opens a loop, END(range) closes it, DEFINE_REG declares
a reduction's accumulator (scalar dtype) or a kernel-local array (REG pointer dtype), ASSIGN(reg, value) with
arg=op folds one element into it, STORE writes memory, and every other UOp is a value computed where it stands.
A REDUCE appearing after its loop stands for its accumulator's final value. A kernel-local array (DEFINE_REG of a
REG pointer; DEFINE_LOCAL for work-group shared memory) is filled by an END(STORE(INDEX(array, i), value),
*ranges), or a bare STORE, that its LOADs carry as a source (through a BARRIER when the group shares it): the
array is declared and filled where the fill's value is needed (inside the loops it depends on, so each thread
and row gets its own).

Placement: a value is computed in the innermost loop among the ranges it depends on (and no deeper), so
loop-invariant work is hoisted out of inner loops by construction. A loop's statement is appended to its parent
block only when the loop closes, so values hoisted into the parent while the loop's body is being built still
precede the loop.

Unrolled copies (see codegen.upcast) share loops: adjacent END tops over the same ranges are one loop nest, and
reductions over the same ranges whose bodies hold no reduction, that sit directly in output loops and that are
needed in the same block are folded in one loop, each into its own accumulator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tolk_core.ir.dtype import PtrDType, dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.uop import UOp


@dataclass
class _Loop:
    rng: UOp | None                 # None for the kernel's top level
    body: list = field(default_factory=list)


def range_deps(sink: UOp) -> dict[UOp, frozenset[UOp]]:
    deps: dict[UOp, frozenset[UOp]] = {}
    for u in sink.toposort():
        if u.op is Op.RANGE:
            deps[u] = frozenset((u,))
        elif u.op in (Op.REDUCE, Op.END):
            deps[u] = deps[u.src[0]] - frozenset(u.src[1:])
        else:
            deps[u] = frozenset().union(*(deps[s] for s in u.src)) if u.src else frozenset()
    return deps


def is_array(u: UOp) -> bool:
    """A kernel-local array: per item (DEFINE_REG of a REG pointer) or shared by a work group (DEFINE_LOCAL)."""
    return u.op in (Op.DEFINE_REG, Op.DEFINE_LOCAL) and isinstance(u.dtype, PtrDType)


def _siblings(sink: UOp, deps: dict[UOp, frozenset[UOp]]) -> dict[tuple, list[UOp]]:
    """Reductions folded in one loop, by (their loop ranges, the output ranges they depend on): only reductions
    directly in output loops (inside another reduction's loop each copy of that loop is its own loop, and a
    sibling folded in one copy would be out of scope in the others)."""
    siblings: dict[tuple, list[UOp]] = {}
    for u in sink.toposort():
        if u.op is Op.REDUCE and not any(b.op is Op.REDUCE for b in u.src[0].toposort()) and \
                all(d.arg[1] is not AxisType.REDUCE for d in deps[u]):
            siblings.setdefault((u.src[1:], deps[u]), []).append(u)
    return siblings


class _Linearizer:
    """The program being built: `stack` the loops open now (the kernel's top level first), `placed` the nodes
    emitted already, `deps` each node's ranges (which loop it goes in)."""

    def __init__(self, sink: UOp):
        self.deps = range_deps(sink)
        self.siblings = _siblings(sink, self.deps)
        self.stack: list[_Loop] = [_Loop(None)]
        self.placed: set[UOp] = set()

    def block_for(self, u: UOp) -> list:
        """The body of the innermost open loop among the ranges `u` depends on (the top level if none)."""
        for loop in reversed(self.stack):
            if loop.rng is not None and loop.rng in self.deps[u]:
                return loop.body
        return self.stack[0].body

    def close(self, n: int, target: list) -> None:
        """Close the innermost `n` loops, each inside the next; the outermost lands in `target`."""
        for i in range(n):
            loop = self.stack.pop()
            assert loop.rng is not None, "the kernel's top level (stack[0]) is never closed"
            # the values computed in the loop are out of scope after it: a later loop over the same range (a
            # second reduction over it, as a register tile's scalar and vector parts make) computes its own
            self.placed.difference_update(x for x in loop.body if loop.rng in self.deps.get(x, ()))
            (target if i == n - 1 else self.stack[-1].body).extend([loop.rng, *loop.body, UOp(Op.END, dtypes.void,
                                                                                             (loop.rng,))])

    def open_loop(self, rng: UOp) -> None:
        self.emit(rng.src[0])  # a symbolic bound is computed before its loop
        self.stack.append(_Loop(rng))

    def emit(self, u: UOp) -> None:
        """`u` and every source not placed yet, sources first (an iterative post-order); REDUCE opens and
        closes its own loops, an array fill (END or bare STORE) is emitted with its loops."""
        work = [(u, False)]
        while work:
            x, expanded = work.pop()
            if x in self.placed or x.op in (Op.RANGE, Op.CONST, Op.PARAM, Op.DEFINE_VAR) or is_array(x):
                continue  # (an array is declared by its fill)
            if x.op is Op.REDUCE:
                self.emit_reduce(x)
                continue
            if x.op is Op.END or (x.op is Op.STORE and is_array(x.src[0].src[0])):
                self.emit_fill(x)
                continue
            if not expanded:
                work.append((x, True))
                work.extend((s, False) for s in reversed(x.src))
                continue
            self.block_for(x).append(x)
            self.placed.add(x)

    def emit_reduce(self, r: UOp) -> None:
        group = self.siblings.get((r.src[1:], self.deps[r]), [])
        group = [x for x in group if x not in self.placed] if r in group else [r]
        target = self.block_for(r)  # the reduction's loops go where its value is needed, not where it was asked for
        regs = [UOp(Op.DEFINE_REG, x.dtype, (), x) for x in group]
        target.extend(regs)
        rngs = [s for s in r.src[1:] if s.op is Op.RANGE]
        for rng in rngs:
            self.open_loop(rng)
        for x, reg in zip(group, regs, strict=True):
            self.emit(x.src[0])
            self.stack[-1].body.append(UOp(Op.ASSIGN, x.dtype, (reg, x.src[0]), x.arg))
        self.close(len(rngs), target)
        self.placed.update(group)

    def emit_fill(self, fill: UOp) -> None:
        """An array's fill: one STORE, or a SINK of STOREs filled in the same loops (a matmul's C block: the
        tile's reductions then fold in one loop, codegen/matmul.py), in the loops its END closes."""
        target = self.block_for(fill)
        body = fill.src[0] if fill.op is Op.END else fill
        stores = list(body.src) if body.op is Op.SINK else [body]
        if (arr := stores[0].src[0].src[0]) not in self.placed:  # declared where it is first filled
            target.append(arr)
            self.placed.add(arr)
        rngs = [s for s in fill.src[1:] if s.op is Op.RANGE] if fill.op is Op.END else []
        for rng in rngs:
            self.open_loop(rng)
        for store in stores:
            for s in store.src:
                self.emit(s)
            (self.stack[-1].body if rngs else target).append(store)
        self.close(len(rngs), target)
        self.placed.update((fill, body, *stores))

    def emit_tops(self, tops: list[UOp]) -> None:
        """The kernel's stores in order; adjacent END tops over the same ranges (unrolled copies, merged store
        kernels) share loops, as do adjacent bare tops."""
        while tops:
            top = tops.pop(0)
            if top.op is not Op.END:
                run = [top]
                while tops and tops[0].op is not Op.END:
                    run.append(tops.pop(0))
                self.emit_run(run)
                continue
            rngs = [s for s in top.src[1:] if s.op is Op.RANGE]
            for rng in rngs:
                self.open_loop(rng)
            run = [top.src[0]]
            while tops and tops[0].op is Op.END and tops[0].src[1:] == top.src[1:]:
                run.append(tops.pop(0).src[0])
            self.emit_run(run)
            self.close(len(rngs), self.stack[0].body)

    def emit_run(self, run: list[UOp]) -> None:
        """Statements that share a block, in order. When they store into more than one buffer (a merged
        kernel's stores, which read storage that the others write, at the index they write it:
        schedule/merge.py), every store's address and value first, then the stores, so each element is loaded
        before any store of the block lands; the copies of one store (unrolled) keep each value next to its store."""
        stores = [x for x in run if x.op is Op.STORE]
        if len({x.src[0].src[0] for x in stores}) > 1:
            for x in stores:
                for s in x.src:
                    self.emit(s)
        for x in run:
            self.emit(x)


def linearize(sink: UOp, guard: UOp | None = None) -> list[UOp]:
    """The kernel `sink` (STOREs, possibly wrapped in END(store, *ranges)) as a flat program.

    With a `guard`, the program starts with `IF(guard, arg="return")`: work items where it is false stop.
    """
    lin = _Linearizer(sink)
    if guard is not None:
        lin.emit(guard)
        lin.stack[0].body.append(UOp(Op.IF, dtypes.void, (guard,), "return"))
    lin.emit_tops(list(sink.src))
    return lin.stack[0].body
