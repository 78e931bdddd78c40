"""merge: the kernels of a schedule of assignments that loop over the same ranges, merged into one kernel.

An optimizer step assigns every parameter and each of its state tensors (Adam: p, m and v) a value computed
from the storage before the step. rangeify lowers each store to a kernel of its own, so each of the three
recomputes the new moments and a step launches three kernels per parameter. Here the store kernels of one
schedule that are elementwise (no reduction, no kernel-local array) and loop over the same ranges become one
kernel: its SINK holds their loop nests side by side, which the linearizer emits as one loop nest whose body
computes every stored value before it stores any (codegen/linearize.py), so each element's loads read the
storage as it was before the kernel, and a load shared by several stores (the same buffer at the same index)
is one load. Parameters of one shape (a model's equal layers, its biases of one width) share a kernel too.

When that is sound is `reads_precede_stores`, the contract of a schedule of assignments (every value is read
before any store lands: engine.realize.assign_all): every kernel that reads a buffer some kernel stores runs
before that store, or is the storing kernel and reads the buffer only at the index it stores. Merged groups
run after every other kernel of the schedule (the kernels computing their inputs), each before the groups
storing what it reads (`_readers_first`); a merge that would break the contract is not made. Groups hold at
most KERNEL_MAX_BUFFERS buffers (docs/performance.md, "Optimizer updates in few kernels").
"""
from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence

from tolk_core import config
from tolk_core.ir.calls import KernelInfo
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule.rangeify import Kernel


def _stores(ast: UOp) -> list[UOp]:
    """The stores of kernel `ast` into its PARAM slots (not into kernel-local arrays)."""
    return [u for u in ast.toposort() if u.op is Op.STORE and u.src[0].src[0].op is Op.PARAM]


def _loads(ast: UOp) -> list[UOp]:
    """The loads of kernel `ast` from its PARAM slots."""
    return [u for u in ast.toposort() if u.op is Op.LOAD and u.src[0].src[0].op is Op.PARAM]


def reads_precede_stores(calls: Sequence[tuple[UOp, Sequence[Hashable]]], destinations: Collection[Hashable]) -> bool:
    """Whether the kernels `calls` ((kernel SINK, the buffer of each PARAM slot: BUFFER nodes, or any values that
    are equal where the buffers are one, such as a cached schedule's slot numbers), in run order) of a schedule of
    assignments read every destination (of `destinations`, storage read for its contents before the
    assignments) before it is stored: no two kernels store one buffer, a kernel reading a destination that
    another stores runs before that one, and one reading a destination that it stores itself, alongside other
    stores, reads it only at the INDEX it stores it at (each element is loaded before it is stored:
    codegen/linearize.py). A kernel of one store reading its own destination is `assign`'s case, left to
    prepare (docs/prepare.md)."""
    writer: dict[Hashable, int] = {}
    for i, (ast, bufs) in enumerate(calls):
        for st in _stores(ast):
            if writer.setdefault(bufs[st.src[0].src[0].arg], i) != i:
                return False
    for i, (ast, bufs) in enumerate(calls):
        stores = _stores(ast)
        stored_at = {st.src[0].src[0]: st.src[0] for st in stores}
        for ld in _loads(ast):
            if (buf := bufs[ld.src[0].src[0].arg]) not in destinations or (w := writer.get(buf)) is None:
                continue
            if w < i or (w == i and len(stores) > 1 and stored_at[ld.src[0].src[0]] is not ld.src[0]):
                return False
    return True


def _loop_key(k: Kernel) -> tuple[UOp, ...] | None:
    """The ranges closing `k`'s one store when `k` is elementwise and stores one PARAM slot, else None."""
    if len(k.ast.src) != 1:
        return None
    top = k.ast.src[0]
    store = top.src[0] if top.op is Op.END else top
    if store.op is not Op.STORE or store.src[0].src[0].op is not Op.PARAM or \
            any(u.op in (Op.REDUCE, Op.DEFINE_REG, Op.DEFINE_LOCAL) for u in k.ast.toposort()):
        return None
    return top.src[1:] if top.op is Op.END else ()


def _merged(group: list[Kernel]) -> Kernel:
    """One kernel running `group`'s loop nests side by side, over the union of their buffers (each buffer one
    PARAM slot, so equal loads of the members become one node)."""
    if len(group) == 1:
        return group[0]
    buffers: list[UOp] = []
    slots: dict[UOp, UOp] = {}
    tops: list[UOp] = []
    counts: dict[str, int] = {}
    nominal: int | UOp = 0
    for k in group:
        rename: dict[UOp, UOp] = {}
        for p in (u for u in k.ast.toposort() if u.op is Op.PARAM):
            buf = k.buffers[p.arg]
            if buf not in slots:
                slots[buf] = UOp(Op.PARAM, p.dtype, (), len(buffers))
                buffers.append(buf)
            rename[p] = slots[buf]
        tops.extend(k.ast.substitute(rename).src)
        for name, n in k.info.ops:
            counts[name] = counts.get(name, 0) + n
        nominal = nominal + k.info.nominal
    return Kernel(UOp(Op.SINK, dtypes.void, tuple(tops)), buffers, KernelInfo(tuple(counts.items()), nominal))


def _groups(candidates: list[Kernel]) -> list[list[Kernel]]:
    """`candidates` grouped by their loop ranges, in order of each group's first member; a group grows until
    its buffers would pass KERNEL_MAX_BUFFERS."""
    most = config.get("KERNEL_MAX_BUFFERS")
    groups: list[list[Kernel]] = []
    open_by_key: dict[tuple[UOp, ...], tuple[list[Kernel], set[UOp]]] = {}
    for k in candidates:
        key = _loop_key(k)
        assert key is not None
        group, bufs = open_by_key.get(key, (None, set()))
        if group is None or len(bufs | set(k.buffers)) > most:
            group, bufs = [], set()
            groups.append(group)
        group.append(k)
        open_by_key[key] = (group, bufs | set(k.buffers))
    return groups


def merge_stores(kernels: list[Kernel], destinations: set[UOp]) -> list[Kernel]:
    """`kernels` (a schedule of assignments into the storage `destinations`, in run order) with the elementwise
    kernels storing into a destination merged by loop ranges, after the other kernels; `kernels` unchanged
    when that would break `reads_precede_stores` or there is nothing to merge."""
    candidates = [k for k in kernels if _loop_key(k) is not None and
                  k.buffers[_stores(k.ast)[0].src[0].src[0].arg] in destinations]
    if len(candidates) < 2:
        return kernels
    groups = _groups(candidates)
    if len(groups) == len(candidates):
        return kernels
    chosen = set(map(id, candidates))
    ordered = _readers_first([_merged(g) for g in groups], destinations)
    if ordered is None:
        return kernels
    merged = [k for k in kernels if id(k) not in chosen] + ordered
    return merged if reads_precede_stores([(k.ast, k.buffers) for k in merged], destinations) else kernels


def _readers_first(kernels: list[Kernel], destinations: set[UOp]) -> list[Kernel] | None:
    """`kernels` (merged store kernels) in an order where each runs before every other that stores a destination
    it reads (an optimizer's step count: stored by one kernel, read by every parameter's bias correction), else
    in their own order; None where no such order exists (two kernels each reading what the other stores)."""
    stored = [{k.buffers[st.src[0].src[0].arg] for st in _stores(k.ast)} for k in kernels]
    read = [{k.buffers[u.src[0].src[0].arg] for u in _loads(k.ast)} & destinations for k in kernels]
    # kernel i must wait for every j != i reading what i stores
    waits = [{j for j in range(len(kernels)) if j != i and read[j] & stored[i]} for i in range(len(kernels))]
    order: list[int] = []
    placed: set[int] = set()
    while len(order) < len(kernels):
        ready = next((i for i in range(len(kernels)) if i not in placed and waits[i] <= placed), None)
        if ready is None:
            return None
        order.append(ready)
        placed.add(ready)
    return [kernels[i] for i in order]
