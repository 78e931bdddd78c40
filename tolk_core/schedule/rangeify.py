"""rangeify: ranges index the tensor graph, movement ops become index maths, kernels end where values need storage.

Input: the prepared tensor graph of the outputs to compute, each paired with where it is stored (a new BUFFER,
or a view of existing storage for an assignment).
Output: kernels, each a kernel-level SINK whose PARAM slots name the buffers it reads and writes.

Which values get storage (a kernel boundary) is a placement decision (`placements.py`, docs/placements.md),
recorded in the compile's lineage with a provenance and read back through the forcing queries:
- every output (On_device, 42:realize-output), every value declared or decided On_device (`contiguous()`,
  `realize()`, `decide_materialized`);
- heuristic caps (39:inline-reduction-cap, lifted by `decide_inline`): a value holding an unstored reduction
  that is broadcast (EXPAND) on its way to a consumer (inlining it would recompute the reduction once per
  broadcast copy), and a reduction read by more than one kernel; except, with kernel-local arrays, a row
  reduction consumed row by row (softmax's row max and sum: see `realize_points`);
- a Never_virtual value too big for kernel-local scratch, and a Local value two kernels touch (fission, 177).
Everything else is inlined (Virtual, 151:inlined) into each kernel that reads it: fusion is the default.
Values settled Local have no storage: on devices whose renderer declares kernel-local arrays (`local_arrays`),
the one kernel that reads them fills a kernel-local array (DEFINE_REG of a REG pointer) once per row index
before the first read: a C stack array per row on CPU; on GPU devices codegen runs one work group per row and
moves the array to the group's shared memory (codegen.optimize). Without `local_arrays` they are computed in
place where read.
"""
from __future__ import annotations

import math
from collections.abc import Container, Generator
from dataclasses import dataclass, field

from tolk_core import config
from tolk_core.ir.calls import KernelInfo
from tolk_core.ir.dtype import AddrSpace, dtypes
from tolk_core.ir.ops import AxisType, GroupOp, Op, identity_element
from tolk_core.ir.shape import apply_movement_op
from tolk_core.ir.uop import UOp, prod, resolve, sint
from tolk_core.schedule import parallel_reductions
from tolk_core.schedule import placements as pm
from tolk_core.schedule.gather import collapse_one_hot
from tolk_core.schedule.prepare import index_through_movement
from tolk_core.schedule.work import kernel_info

# one lowering `_Lowerer.lower` performs: (node, indices, gate, top)
_Request = tuple[UOp, tuple[UOp, ...], UOp | None, bool]
# a step of `_Lowerer.lower`: yields the lowerings it needs, is sent each one's result, returns its own
_Steps = Generator[_Request, UOp, UOp]

# the leaves a kernel reads from memory; everything else is computed
_STORAGE = (Op.BUFFER,)


@dataclass
class Kernel:
    """One kernel: its AST (a SINK of one STORE ended by its ranges), the BUFFER bound to each PARAM slot, and
    what it implements."""
    ast: UOp
    buffers: list[UOp] = field(default_factory=list)
    info: KernelInfo = field(default_factory=KernelInfo)


def _is_expanding(u: UOp) -> bool:
    return u.op is Op.EXPAND and any(i != o for i, o in zip(u.src[0].tensor_shape, u.arg, strict=True))


# the scheduler's decisions, as provenances: each candidate for storage gets one. Codes are stable labels printed
# by DEBUG>=3, one meaning each; the full table (these and placements.py's) is in `placements.Provenance`'s
# docstring and docs/placements.md
INLINED = pm.Provenance.site(151, "inlined")               # Virtual: recomputed in each kernel that reads it
OUTPUT = pm.Provenance.site(42, "realize-output")          # On_device: a value the caller asked for
CROSSES_KERNEL = pm.Provenance.site(43, "crosses-kernel")  # On_device: stored by one kernel, read by another
KERNEL_SCRATCH = pm.Provenance.site(46, "kernel-scratch")  # Never_virtual settled by size: Local or On_device
ROW_SCRATCH = pm.Provenance.site(47, "row-scratch")        # Never_virtual: a row a fused reduction and its
                                                           # broadcast consumer both read (compute it once)


def _is_candidate(u: UOp) -> bool:
    """A value that could be given storage: computed values and constants (views and storage are not)."""
    return u.op not in GroupOp.Movement and u.op not in _STORAGE and u.shape is not None and \
        u.op not in (Op.DEVICE, Op.UNIQUE, Op.DEFINE_VAR, Op.BIND)


def realize_points(sink_values: list[UOp], lineage: pm.Lineage | None = None,
                   local_axes: dict[UOp, tuple[int, ...]] | None = None) -> set[UOp]:
    """The values that need storage, given the values the caller asked for; every decision is recorded in the
    placements of `lineage` (a compile's working fork; default: a throwaway fork of the current lineage).

    Order (docs/placements.md, "What the scheduler records"): outputs are On_device; storage read but not
    computed here must own a buffer; settled decisions (lineage or intent) are honoured; the heuristic caps (see
    the module docstring; lifted for `decide_inline` nodes) mark Never_virtual values that then cross a kernel
    boundary, so On_device; other Never_virtual values settle Local or On_device by size; fission promotes
    Locals that two kernels touch and undoes promotions whose crossing went away; the rest is inlined
    (Virtual). The result is read back
    through `is_in_context_force`.

    Row fusion: a reduction broadcast back only along the axes it reduced (softmax's row max and row sum) is
    not stored when its row fits kernel-local scratch (PLACEMENT_STACK_THRESHOLD) and every reduction it reads
    is fused the same way: its consumer computes it once per row. The value it reduces becomes Never_virtual
    (row scratch) so it is computed once into a Local row; also when the consumer does not read it again
    (softmax's backward sum of g * p): a kernel without a row array got codegen's output tiling, which
    recomputed the row sum once per tile of 16 columns (docs/performance.md, "Attention")
    Row fusion needs kernel-local arrays: it happens only when `local_axes` is given, which then receives each
    Local value's array axes (its row's axes, else all of them).
    """
    lin = lineage if lineage is not None else pm.current().begin()
    p, prefs = lin.placements, lin.inline_preferences
    order = UOp(Op.SINK, dtypes.void, tuple(sink_values)).toposort()
    outputs = set(sink_values)
    for u in sink_values:
        # a settled Virtual/Local output is recomputed into the caller's buffer. A constant output (a sink
        # source that lost its movements: `ones(n)` realized) gets no entry: constants are interned, one node
        # shared by every graph, and an entry would decide that constant for all of them
        if u.op is not Op.CONST and p.mode_is_unspecified(u):
            p.update(u, pm.OD, OUTPUT)
    for u in order:
        if u.op in _STORAGE:
            p.require_readable(u)
    cands = [u for u in order if _is_candidate(u) and u not in outputs]
    for u in cands:
        if u in prefs and p.known_non_virtual(u) and (pl := p.get(u)) is not None and \
                pl[1].leading() not in pm.HEURISTIC_CAPS:
            raise pm.PlacementUserError(f"cannot inline {pm.node_name(u)}: it is {p.debug(u)}, which only a "
                                        "heuristic cap could lift")
    realized: set[UOp] = outputs | {u for u in order if u.op in _STORAGE}
    realized |= {u for u in cands if (pl := p.get(u)) is not None and pl[0] is pm.OD}

    def cap(u: UOp) -> bool:  # a heuristic cap may store u: its placement is open and no inlining is preferred
        return u not in realized and u not in prefs and p.mode_is_unspecified(u)

    rows = _cap_copies(order, realized, p, cap, row_fusion=local_axes is not None)
    _store_side_by_side(order, realized, p, cap)
    _store_recomputed(order, cands, realized, p, cap)
    _split_over_budget(order, realized, p, cap)
    for u in cands:  # Never_virtual values no cap stored: kernel-local scratch unless too big
        if u not in realized and (pl := p.get(u)) is not None and pl[0] is pm.NV and \
                p.is_in_context_force(u, KERNEL_SCRATCH):
            realized.add(u)
    _fission(cands, realized, p)
    stored = outputs | {u for u in order if u.op in _STORAGE} | {u for u in cands if p.is_in_context_force(u, INLINED)}
    if local_axes is not None:
        local_axes.update({u: rows.get(u, tuple(range(len(u.tensor_shape)))) for u in cands
                           if u not in stored and (pl := p.get(u)) is not None and pl[0] is pm.L})
    return stored


def _cap_copies(order: list[UOp], realized: set[UOp], p: pm.Placements, cap,
                row_fusion: bool) -> dict[UOp, tuple[int, ...]]:
    """The heuristic caps on values read many times over (realize_points' docstring): reductions more than one
    kernel computes, values broadcast or padded past the fusion bound, and reductions broadcast to their
    consumer (stored, or with `row_fusion` fused row by row). Returns the row-scratch values and their axes."""
    owners = _Owners(order, realized)
    if row_fusion:  # first: the shared-reduction rule would store the row reductions inside them
        _store_row_roots(order, realized, p, cap, owners)
    owners.store_shared(order, p, cap)
    users: dict[UOp, list[UOp]] = {}
    for u in order:
        for s in u.src:
            users.setdefault(s, []).append(u)
    fused: set[UOp] = set()
    rows: dict[UOp, tuple[int, ...]] = {}
    padded = _pad_factors(order, users, realized)
    for u in order:
        if _is_padding(u):  # a padded view multiplies its source's work like a broadcast (_pad_factors)
            x = u.src[0].storage_base(GroupOp.Movement)
            if cap(x) and _recomputes_too_much(u, x, realized, padded.get(x, 1)):
                owners.store_shared(owners.add(_store(x, realized, p, pm.Provenance.RECOMPUTE_CAP)), p, cap)
            continue
        if _is_expanding(u):
            x = u.src[0].storage_base(GroupOp.Movement)
            if x in fused or not cap(x):
                continue
            if not any(b.op is Op.REDUCE_AXIS for b in _kernel_body(x, realized)):
                if _recomputes_too_much(u, x, realized):  # no reduction, but too much recomputed work
                    owners.store_shared(owners.add(_store(x, realized, p, pm.Provenance.RECOMPUTE_CAP)), p, cap)
                continue
            if row_fusion and (inner := _row_fusable(x, users, realized, fused)) is not None and \
                    all(cap(b) for b in inner):
                if inner:  # the row reads them twice or more (a max, then an exp sum): each is computed once
                    owners.store_shared(owners.add(set().union(*(_store(b, realized, p) for b in inner))), p, cap)
                fused.add(x)
                r = x.src[0]
                if _is_candidate(r) and r.op is not Op.CONST and p.mode_is_unspecified(r):
                    p.update(r, pm.NV, ROW_SCRATCH)
                    p.set_scratch_extent(r, _row_extent(x))
                    rows[r] = x.arg[1]
                continue
            owners.store_shared(owners.add(_store(x, realized, p)), p, cap)
    return rows


def _row_extent(x: UOp) -> int | None:
    """Elements of one row of reduction `x`'s input (None when symbolic)."""
    n = prod(x.src[0].tensor_shape[a] for a in x.arg[1])
    return n if isinstance(n, int) else None


def _row_consumers(w: UOp, axes: tuple[int, ...], users: dict[UOp, list[UOp]], realized: set[UOp]) -> bool:
    """Whether the broadcast `w` of a row reduction over `axes` is consumed row by row up to its kernel's root:
    elementwise ops and reductions over the same axes only. A view (the axes move) or a reduction over other
    axes (each row would be recomputed once per element of the other axes) makes it False."""
    return _row_frontier(w, axes, users, realized) == set()


def _row_frontier(w: UOp, axes: tuple[int, ...], users: dict[UOp, list[UOp]],
                  realized: set[UOp]) -> set[UOp] | None:
    """The unstored values on the paths from the broadcast `w` of a row reduction over `axes` that a reader
    takes out of the row (a view, a reduction over other axes, the sink): empty when every path is row by row up
    to stored values (`_row_consumers`); None when `w` itself is read that way."""
    frontier: set[UOp] = set()
    seen, stack = {w}, [(w, u) for u in users.get(w, ())]
    while stack:
        parent, u = stack.pop()
        if u.op in GroupOp.Movement or u.op is Op.SINK or (u.op is Op.REDUCE_AXIS and u.arg[1] != axes):
            if parent is w:
                return None
            frontier.add(parent)
            continue
        if u in seen:
            continue
        seen.add(u)
        if u.op is Op.REDUCE_AXIS or u in realized:
            continue  # a reduction of the row is per row again; a stored value ends the kernel
        stack.extend((u, v) for v in users.get(u, ()))
    return frontier


def _row_fusable(x: UOp, users: dict[UOp, list[UOp]], realized: set[UOp], fused: set[UOp]) -> list[UOp] | None:
    """Whether reduction `x` may be computed by its broadcast consumer, once per row (see realize_points): None
    when it may not, else the other reductions its row reads, which must be stored first (`_inner_reductions`)."""
    if not _is_row_reduction(x, users):
        return None
    if any(w.op is Op.EXPAND and not _row_consumers(w, x.arg[1], users, realized) for w in users[x]):
        return None
    return _inner_reductions(x, realized, fused)


def _is_row_reduction(x: UOp, users: dict[UOp, list[UOp]]) -> bool:
    """Whether `x` is a reduction over its innermost axes, broadcast back along those axes only, whose row fits
    kernel-local scratch: the shape of a reduction its consumer can compute once per row."""
    if x.op is not Op.REDUCE_AXIS:
        return False
    axes = x.arg[1]
    if axes != tuple(range(len(x.tensor_shape) - len(axes), len(x.tensor_shape))):
        return False  # the row must be the innermost loops, so the outer loops compute it once per row
    for w in users[x]:
        if _is_expanding(w) and any(i != o and a not in axes for a, (i, o) in enumerate(zip(x.tensor_shape, w.arg,
                                                                                              strict=True))):
            return False  # broadcast along another axis: every copy would recompute the whole reduction
        if w.op in GroupOp.Movement and w.op is not Op.EXPAND:
            return False  # a view of it might be broadcast further on
    extent = _row_extent(x)
    return extent is not None and pm.fits_scratch(extent, x.src[0].dtype.itemsize)


def _inner_reductions(x: UOp, realized: set[UOp], fused: set[UOp]) -> list[UOp]:
    """The unstored reductions a row kernel fusing `x` would compute inside its rows, other than the row
    reductions fused there (attention's scores, a matmul, under softmax's row max). The row kernel reads such a
    value once per row reduction over it (max, then the exp sum, then the output); not fusing `x` would not
    help, since x's own kernel and its consumer's would then both compute it and the shared-reduction cap
    stores it anyway. So the caller stores them and fuses the row."""
    out, seen, stack = [], {x}, list(x.src)
    while stack:
        u = stack.pop()
        if u in seen or u in realized:
            continue
        seen.add(u)
        if u.op is Op.REDUCE_AXIS and u not in fused:
            out.append(u)
            continue
        stack.extend(u.src)
    return out


def _store_row_roots(order: list[UOp], realized: set[UOp], p: pm.Placements, cap, owners: _Owners) -> None:
    """Before any other cap, store the values that end a row kernel, so that its row reductions can be fused
    (`_row_consumers` must see the kernel end at a stored value, which the sources-first pass would learn too
    late, after the shared-reduction rule stored the reductions):
    - a value holding a reduction that is broadcast to its consumer (softmax's output read by the matmul P @ V):
      `_cap_copies` stores each of them in any case, only a reduction itself may be fused row by row;
    - a value computed row by row from a row reduction, read out of the row (through a view or by a reduction
      over other axes) and by something else as well: softmax's output in attention's backward, which dV sums
      over the queries and dS reads row by row. Not stored, each reader would recompute it and its row
      reductions would be stored, each a kernel reading the whole input again; stored, one row kernel computes
      the reductions and the value and writes it once. With a single reader out of the row it stays inlined
      there (computed once per element) and the small row reduction is stored instead."""
    users: dict[UOp, list[UOp]] = {}
    for u in order:
        for s in u.src:
            users.setdefault(s, []).append(u)
    expands = [(u, u.src[0].storage_base(GroupOp.Movement)) for u in order if _is_expanding(u)]
    for _, x in expands:  # the broadcast ones first: they end the paths the second kind is found on
        if x.op is not Op.REDUCE_AXIS and cap(x) and any(b.op is Op.REDUCE_AXIS for b in _kernel_body(x, realized)):
            owners.add(_store(x, realized, p))  # (shared reductions are stored after both kinds, by the caller)
    for u, x in expands:
        if u.src[0] is not x or not cap(x) or not _is_row_reduction(x, users):
            continue
        ends = _row_frontier(u, x.arg[1], users, realized)
        if ends and all(cap(b) and b.op is not Op.REDUCE_AXIS and len(set(users[b])) > 1 for b in ends):
            for b in ends:
                owners.add(_store(b, realized, p))


def _store_side_by_side(order: list[UOp], realized: set[UOp], p: pm.Placements, cap) -> None:
    """Store the contractions that would share a kernel with another or sit inside a plain reduction's operand
    (schedule/parallel_reductions.py), then look again in the kernels that storing them made."""
    work = [u for u in order if u in realized and u.op not in _STORAGE]

    def body(u: UOp) -> list[UOp]:  # reads `realized` as it grows
        return _kernel_body(u, realized)
    while work:
        for r in parallel_reductions.to_store(work.pop(), body, realized):
            if cap(r):
                work.extend(_store(r, realized, p, pm.Provenance.PARALLEL_REDUCTION))


def _store(u: UOp, realized: set[UOp], p: pm.Placements,
           why: pm.Provenance = pm.Provenance.INLINE_REDUCTION_CAP) -> set[UOp]:
    """A heuristic cap (`why`) stores `u`: Never_virtual for the cap, then On_device since its kernel's value is
    read by another kernel. Returns {u}, the newly stored values."""
    p.update(u, pm.NV, why)
    p.update(u, pm.OD, pm.Provenance.refined(why, CROSSES_KERNEL))
    realized.add(u)
    return {u}


def _ops(u: UOp) -> int:
    """The operations one element of `u` costs where it is computed (a reduction: one per element it reads)."""
    return 1 if u.op in GroupOp.ALU or u.op is Op.REDUCE_AXIS else 0


def _is_padding(u: UOp) -> bool:
    return u.op is Op.PAD and any(b or a for b, a in u.arg)


def _broadcast_factor(view: UOp, base: UOp) -> int | None:
    """How many times each element of `base` is computed by a consumer of `view` (a chain of movements over
    it), were `base` inlined: the product of what each EXPAND on the way stretches and of what each PAD grows
    (a padded view computes its source on every element and selects zero outside it: the kernel's loop runs
    over the padded shape, so a gradient's `cat` of three slices computes each slice's chain three times);
    None when a size is symbolic."""
    factor, u = 1, view
    while u is not base:
        if u.op in (Op.EXPAND, Op.PAD):
            n_in, n_out = u.src[0].size, u.size
            if not (isinstance(n_in, int) and isinstance(n_out, int)):
                return None
            factor *= -(-n_out // max(n_in, 1))
        u = u.src[0]
    return factor


def _pad_factors(order: list[UOp], users: dict[UOp, list[UOp]], realized: set[UOp]) -> dict[UOp, int]:
    """How many times the kernel that inlines each node evaluates each of its elements because of the PADs above
    it (users first: a PAD multiplying by what it grows, a stored node once). A cat of many parts is a tree of
    pads and sums: a part padded to twice its width and that sum to 1.5 times is computed 3 times per element,
    though no single PAD passes a bound of 2. Users that compute read the node at their own indices, which the
    lowering evaluates once: the most any of them asks for. Views of it read it at other indices each, and each
    view is evaluated apart: their counts add up (a window sum over slices of one padded value, as LRN's sum of
    squares over neighbouring channels, evaluates it once per slice)."""
    out: dict[UOp, int] = {}
    for u in reversed(order):
        if u in realized:
            out[u] = 1
            continue
        computing, views = 1, 0
        for v in dict.fromkeys(users.get(u, ())):
            fv = 1 if v in realized else out.get(v, 1)
            if _is_padding(v) and isinstance(n_in := u.size, int) and isinstance(n_out := v.size, int):
                fv *= -(-n_out // max(n_in, 1))
            if v.op in GroupOp.Movement and v not in realized:
                views += fv
            else:
                computing = max(computing, fv)
        out[u] = max(computing, views)
    return out


def _recomputes_too_much(view: UOp, x: UOp, realized: set[UOp], padded: int = 1) -> bool:
    """Whether inlining `x` into the consumer of its broadcast or padded `view` would multiply that kernel's work past
    FUSION_WORK_BOUND (`padded`: the factor the pads above x compound to, `_pad_factors`). Inlined, x's `c`
    operations per element run once per copy the broadcast makes (factor F) instead of once; the consumer does
    at least one operation per copy. Its work ratio, executed over nominal operations, is then (c + 1)·F / (c + F):
    a chain of a few operations broadcast into a matmul passes the bound (stored, computed once), a single scale
    or cast does not (recomputing it is cheaper than a round trip through memory). Recomputation of fewer than
    FUSION_MIN_EXCESS extra operations in all is always accepted: storing would cost more (a launch, a write and
    a read)."""
    bound = config.get("FUSION_WORK_BOUND")
    if bound <= 0:
        return False
    factor = max(padded, _broadcast_factor(view, x) or 0) or None
    if factor is None or factor <= bound or not isinstance(n := x.size, int):
        return False
    c = sum(_element_cost(b) for b in _kernel_body(x, realized))
    return c > 0 and (c + 1) * factor / (c + factor) > bound and c * n * (factor - 1) >= config.get("FUSION_MIN_EXCESS")


def _element_cost(u: UOp) -> int:
    """What one element of `u` costs its kernel: an operation, or for a reduction one per element it folds (a
    padded reduction, as the parts of a cat's gradient that are matmuls, recomputes every fold per copy)."""
    if u.op is Op.REDUCE_AXIS:
        sizes = [s for a in u.arg[1] if isinstance(s := u.src[0].tensor_shape[a], int)]  # symbolic: not counted
        return max(math.prod(sizes), 1)
    return _ops(u)


def _store_recomputed(order: list[UOp], cands: list[UOp], realized: set[UOp], p: pm.Placements, cap) -> None:
    """Store values that several kernels would each recompute, past the fusion bound. A value of `c`
    operations per element (its unstored body) computed by `k` kernels costs them (c + 1)·k where stored it
    costs c + k (computed once, then read): the broadcast rule's ratio with the kernels as the copies
    (`_recomputes_too_much`). Stored when it passes FUSION_WORK_BOUND and recomputes at least
    FUSION_MIN_EXCESS operations in all.

    One pass, users first: the kernels that compute a node are those of its users (a stored user is a kernel
    of its own), so they are known, final, when the pass reaches the node, and storing it makes it one kernel
    for everything below. The largest shared value is stored whole, and scheduling stays linear."""
    bound, excess = config.get("FUSION_WORK_BOUND"), config.get("FUSION_MIN_EXCESS")
    if bound <= 0:
        return
    open_cands = {u for u in cands if cap(u) and u.op is not Op.CONST}
    users: dict[UOp, list[UOp]] = {}
    for u in order:
        for s in dict.fromkeys(u.src):
            users.setdefault(s, []).append(u)
    kernels: dict[UOp, frozenset[UOp]] = {}
    for u in reversed(order):
        if u in realized:
            continue
        ks = frozenset().union(*({v} if v in realized else kernels.get(v, frozenset()) for v in users.get(u, ())))
        kernels[u] = ks
        k = len(ks)
        if k <= bound or u not in open_cands or not cap(u) or not isinstance(n := u.size, int) or n == 0:
            continue
        # the fewest operations that pass both the bound and the excess, counted only that far
        need = max(int(k * (bound - 1) / (k - bound)) + 1, -(-excess // (n * (k - 1))))
        if _body_size(u, realized, need - 1, None)[0] >= need:
            _store(u, realized, p, pm.Provenance.RECOMPUTE_CAP)


def _split_over_budget(order: list[UOp], realized: set[UOp], p: pm.Placements, cap) -> None:
    """Store intermediates of kernels that would exceed KERNEL_MAX_OPS operations or KERNEL_MAX_BUFFERS stored
    inputs, so no program makes its compiler run for minutes. One pass, sources first: each unstored node gets
    the exact operations and distinct stored inputs of its kernel body up to it (`_BodySets`); where either passes
    half its budget the node is stored (when a cap may store it), starting a fresh count for its readers.

    With it are stored its unstored sources that other nodes read too and whose bodies pass a quarter of the
    operation budget: left unstored, every later kernel reading such a source computes its body again (a chain
    read along its length by a second chain, as a deep backward's running gradient is read by the sum into
    each input's gradient, was recomputed by every kernel the second chain was split into)."""
    max_ops, max_bufs = config.get("KERNEL_MAX_OPS"), config.get("KERNEL_MAX_BUFFERS")
    if max_ops <= 0 and max_bufs <= 0:
        return
    lim_ops, lim_bufs = max_ops // 2 if max_ops > 0 else None, max_bufs // 2 if max_bufs > 0 else None
    bodies = _BodySets(order)
    for u in order:
        if u in realized or u.op in _STORAGE:
            bodies.stored(u)
            continue
        shared = [s for s in dict.fromkeys(u.src) if lim_ops is not None and bodies.fanout[s] > 1 and
                  bodies.sets[s][0][1].bit_count() > lim_ops // 2]
        n_ops, n_bufs = bodies.computed(u)
        if ((lim_ops is not None and n_ops > lim_ops) or (lim_bufs is not None and n_bufs > lim_bufs)) and \
                _is_candidate(u) and u.op is not Op.CONST and cap(u):
            _store(u, realized, p, pm.Provenance.KERNEL_BUDGET)
            bodies.stored(u, computed=True)
            for s in shared:
                if s not in realized and _is_candidate(s) and cap(s):
                    _store(s, realized, p, pm.Provenance.KERNEL_BUDGET)
                    bodies.restored(s)


def _body_size(root: UOp, realized: set[UOp], lim_ops: int | None, lim_bufs: int | None) -> tuple[int, int]:
    """(operations, distinct stored inputs) of the unstored body under `root`, counted until either passes its
    limit (then the count so far, just past it)."""
    seen, stack, n_ops, inputs = {root}, [root], 0, set()
    while stack:
        u = stack.pop()
        n_ops += _ops(u)
        for s in u.src:
            if s in realized or s.op in _STORAGE:
                inputs.add(s)
            elif s not in seen:
                seen.add(s)
                stack.append(s)
        if (lim_ops is not None and n_ops > lim_ops) or (lim_bufs is not None and len(inputs) > lim_bufs):
            break
    return n_ops, len(inputs)


class _BodySets:
    """The kernel body up to each node, as two sets of positions in a sources-first `order`: the operations it
    computes and the stored values it reads. A set is an int bitmask, kept with the smallest position it can hold
    (a body spans a stretch of the order, not all of it), so merging the bodies of a node's sources is a few
    machine-word operations per position in that stretch instead of a walk over the body: exact counts for every
    node of a deep graph in time linear in the graph (a walk per node was quadratic in a kernel's size). A
    node's sets are dropped once its last reader has merged them."""

    def __init__(self, order: list[UOp]):
        self.pos = {u: i for i, u in enumerate(order)}
        self.readers: dict[UOp, int] = {}
        for u in order:
            for s in dict.fromkeys(u.src):
                self.readers[s] = self.readers.get(s, 0) + 1
        self.fanout = dict(self.readers)  # readers per node, kept as the count of readers yet to merge falls
        self.sets: dict[UOp, tuple[tuple[int, int], tuple[int, int]]] = {}  # node -> ((base, ops), (base, inputs))

    def stored(self, u: UOp, computed: bool = False) -> None:
        """`u` has storage: its readers read it as one input and compute none of its operations (`computed`: its
        body was recorded already, and has merged its sources' sets)."""
        if not computed:
            self._release(u)
        self.sets[u] = ((0, 0), (self.pos[u], 1))

    def restored(self, u: UOp) -> None:
        """`u`, computed and recorded already, gets storage after some of its readers merged its body (their
        counts stay as they were: an overestimate); readers yet to come read it as one input."""
        if u in self.sets:
            self.sets[u] = ((0, 0), (self.pos[u], 1))

    def computed(self, u: UOp) -> tuple[int, int]:
        """Record the body of unstored `u` (its own operation and its sources' bodies); (operations, inputs)."""
        srcs = [self.sets[s] for s in dict.fromkeys(u.src)]
        self._release(u)
        ops = _union([o for o, _ in srcs] + ([(self.pos[u], 1)] if _ops(u) else []))
        inputs = _union([i for _, i in srcs])
        self.sets[u] = (ops, inputs)
        return ops[1].bit_count(), inputs[1].bit_count()

    def _release(self, u: UOp) -> None:
        for s in dict.fromkeys(u.src):
            self.readers[s] -= 1
            if self.readers[s] == 0:
                del self.sets[s]


def _union(sets: list[tuple[int, int]]) -> tuple[int, int]:
    """The union of position sets given as (base, bitmask of positions - base); (0, 0) is the empty set."""
    sets = [s for s in sets if s[1]]
    if len(sets) <= 1:
        return sets[0] if sets else (0, 0)
    base = min(b for b, _ in sets)
    bits = 0
    for b, m in sets:
        bits |= m << (b - base)
    return base, bits


_MANY = object()  # a node computed by more than one kernel


class _Owners:
    """Which kernel computes each unstored node: one kernel, or several (`_MANY`), kept up to date as values
    get storage. A node belongs to kernel `k` when a path from `k` reaches it through unstored nodes only, so
    storing `x` changes only the owners of x's own body: each update is local, and scheduling stays linear in
    the graph (recomputing every kernel's body after each stored value was quadratic in the layer count)."""

    def __init__(self, order: list[UOp], realized: set[UOp]):
        self.realized = realized
        self.pos = {u: i for i, u in enumerate(order)}
        self.users: dict[UOp, list[UOp]] = {u: [] for u in order}
        for u in order:
            for s in u.src:
                self.users[s].append(u)
        self.owner: dict[UOp, object] = {}
        self._relabel(reversed(order))

    def _relabel(self, users_first) -> None:
        for u in users_first:
            owner = None
            for v in self.users[u]:
                r = v if v in self.realized else self.owner[v]
                if r is None or r is owner:
                    continue
                if owner is not None:
                    owner = _MANY
                    break
                owner = r
            self.owner[u] = owner

    def add(self, new: set[UOp]) -> list[UOp]:
        """Recompute owners after the values in `new` got storage (they are in `realized`); returns the nodes
        whose owner was recomputed."""
        region = {b for x in new for b in _kernel_body(x, self.realized)}
        nodes = sorted(region, key=self.pos.__getitem__, reverse=True)
        self._relabel(nodes)
        return nodes

    def store_shared(self, candidates, p: pm.Placements, cap) -> None:
        """Store, until none is left, every unstored reduction among `candidates` (and the nodes that storing
        recomputes) that more than one kernel would compute and a heuristic cap may store."""
        while shared := [u for u in candidates if u.op is Op.REDUCE_AXIS and u not in self.realized
                         and self.owner.get(u) is _MANY and cap(u)]:
            for u in shared:
                _store(u, self.realized, p)
            candidates = self.add(set(shared))


def _touched(realized: set[UOp]) -> dict[UOp, set[UOp]]:
    """For every unstored node, the kernels (named by the value they store) whose bodies compute it."""
    out: dict[UOp, set[UOp]] = {}
    for k in realized:
        for u in _kernel_body(k, realized):
            if u is not k:
                out.setdefault(u, set()).add(k)
    return out


def _fission(cands: list[UOp], realized: set[UOp], p: pm.Placements) -> None:
    """Kernel fission over Local values: a Local that two kernels touch crosses a kernel boundary and is promoted
    On_device (sources first, until none crosses); then every promotion whose node is touched by one kernel
    again (a later promotion took over the crossing, so those kernels coalesced) is undone, back to Local."""
    undo: dict[UOp, pm.Placement | None] = {}
    while True:
        touched = _touched(realized)
        crossing = [u for u in cands if u not in realized and len(touched.get(u, ())) > 1
                    and (pl := p.get(u)) is not None and pl[0] is pm.L]
        if not crossing:
            break
        u = crossing[0]
        undo.update(pm.promote_crossing(p, {u: touched[u]}))
        realized.add(u)
    for u in reversed([u for u in cands if u in undo]):
        realized.discard(u)
        if len(_touched(realized).get(u, ())) <= 1:
            pm.undo_promotions(p, {u: undo[u]}, {})
        else:
            realized.add(u)


def _kernel_body(root: UOp, realized: Container[UOp]) -> list[UOp]:
    """The unstored nodes a kernel computing `root` evaluates (root included), stopping at stored values (those
    in `realized`: a set, or a map whose keys are the stored values)."""
    seen, stack, out = {root}, [root], []
    while stack:
        u = stack.pop()
        out.append(u)
        for s in (u.src if (u is root or u not in realized) else ()):
            if s not in seen and s not in realized:
                seen.add(s)
                stack.append(s)
    return out


class _Lowerer:
    """Lower one kernel: index every value by range expressions, turning movements into index maths."""

    def __init__(self, realized: dict[UOp, UOp], local_axes: dict[UOp, tuple[int, ...]] | None = None):
        self.realized = realized                   # stored value -> its BUFFER
        self.local_axes = local_axes or {}         # Local value -> the axes of its kernel-local array
        self.params: dict[UOp, UOp] = {}           # BUFFER -> PARAM
        self.buffers: list[UOp] = []
        self.memo: dict[tuple, UOp] = {}
        self.scratch: dict[tuple, tuple[UOp, UOp]] = {}  # (Local value, its other indices) -> (array, fill)
        self.nranges = 0

    def param(self, buf: UOp, size: sint) -> UOp:
        """The PARAM slot of `buf`, typed by the size of the value it holds (symbolic sizes are left out of
        the type, so one kernel serves every bound value)."""
        if (p := self.params.get(buf)) is None:
            ptr = buf.dtype.ptr(size if isinstance(size, int) else -1)
            p = self.params[buf] = UOp(Op.PARAM, ptr, (), len(self.buffers))
            self.buffers.append(buf)
        return p

    def new_range(self, size: sint, kind: AxisType) -> UOp:
        if isinstance(size, int) and size == 1:
            return UOp.const(dtypes.index, 0)
        bound = size if isinstance(size, UOp) else UOp.const(dtypes.index, size)
        r = UOp(Op.RANGE, dtypes.index, (bound,), (self.nranges, kind))
        self.nranges += 1
        return r

    def load(self, buf: UOp, shape: tuple[sint, ...], idxs: tuple[UOp, ...], gate: UOp | None) -> UOp:
        param = self.param(buf, prod(shape))
        index = UOp(Op.INDEX, param.dtype, (param, _flat(idxs, shape)) + ((gate,) if gate is not None else ()))
        return UOp(Op.LOAD, buf.dtype, (index,))

    def local(self, u: UOp, idxs: tuple[UOp, ...]) -> Generator[_Request, UOp, UOp | None]:
        """A read of Local value `u` from its kernel-local array: the array is filled once per value of the
        indices outside its axes (a row per row index), before its first read. None when its size is symbolic.
        A step generator (see `lower`): it yields the lowering it needs and returns the read."""
        axes = self.local_axes[u]
        sizes = tuple(size for a in axes if isinstance(size := u.tensor_shape[a], int))
        if len(sizes) < len(axes):  # a symbolic size
            return None
        key = (u, tuple(i for a, i in enumerate(idxs) if a not in axes))
        if key not in self.scratch:
            rngs = {a: self.new_range(u.tensor_shape[a], AxisType.LOCAL) for a in axes}
            value = yield (u, tuple(rngs.get(a, i) for a, i in enumerate(idxs)), None, True)
            n = math.prod(sizes)
            arr = UOp(Op.DEFINE_REG, u.dtype.ptr(n, AddrSpace.REG), (), (f"loc{len(self.scratch)}", n))
            store = UOp(Op.STORE, dtypes.void, (UOp(Op.INDEX, arr.dtype, (arr, _flat(tuple(rngs.values()), sizes))),
                                                value))
            live = tuple(r for r in rngs.values() if r.op is Op.RANGE)
            self.scratch[key] = (arr, UOp(Op.END, dtypes.void, (store, *live)) if live else store)
        arr, fill = self.scratch[key]
        index = UOp(Op.INDEX, arr.dtype, (arr, _flat(tuple(idxs[a] for a in axes), sizes)))
        return UOp(Op.LOAD, u.dtype, (index, fill))

    def lower(self, u: UOp, idxs: tuple[UOp, ...], gate: UOp | None, top: bool = False) -> UOp:
        """`u` computed at indices `idxs` (under `gate`, the condition its read is valid on; `top`: `u` is the
        value being stored, so it is computed even when it has storage or a kernel-local array).

        Iterative, for graphs of any depth: each node's lowering is a step generator (`_step`) that yields the
        (node, indices, gate, top) lowerings it needs one at a time and returns its result; this loop runs them
        on an explicit stack, sources in the order a recursive walk would take, so ranges and PARAM slots are
        numbered as such a walk numbers them. Results are memoised by (node, indices, gate, top)."""
        memo = self.memo
        if (hit := memo.get((u, idxs, gate, top))) is not None:
            return hit
        stack: list[tuple[_Request, _Steps]] = [((u, idxs, gate, top), self._step(u, idxs, gate, top))]
        result: UOp | None = None  # None: the step on top is fresh (not started yet)
        while stack:
            key, steps = stack[-1]
            try:
                need = next(steps) if result is None else steps.send(result)
            except StopIteration as done:
                stack.pop()
                result = memo[key] = done.value
                continue
            if (result := memo.get(need)) is None:
                stack.append((need, self._step(*need)))
        assert result is not None
        return result

    def _step(self, u: UOp, idxs: tuple[UOp, ...], gate: UOp | None, top: bool) -> _Steps:
        """The lowering of one node (see `lower`): yields each (node, indices, gate, top) it needs, is sent its
        lowered value, and returns this node's lowered value."""
        if not top and u in self.realized:
            return self.load(self.realized[u], tuple(u.tensor_shape), idxs, gate)
        if not top and gate is None and u in self.local_axes and (loc := (yield from self.local(u, idxs))) is not None:
            return loc  # (under a gate the indices may be out of range: computed in place instead)
        if u.op is Op.BUFFER:
            return self.load(u, (u.arg,), idxs, gate)
        if u.op is Op.CONST:
            return u
        if u.op is Op.IOTA:  # the integers along its one axis: the index itself
            return UOp(Op.CAST, u.dtype, (idxs[0],))
        if u.op in GroupOp.Movement:
            src_idxs, valid = index_through_movement(u, idxs)  # pm_mops: an INDEX of a movement
            if valid is None:
                return (yield (u.src[0], tuple(src_idxs), gate, False))
            valid = valid.simplify()
            g = valid if gate is None else gate.alu(Op.AND, valid)
            inner = yield (u.src[0], tuple(src_idxs), g, False)
            return UOp(Op.WHERE, u.dtype, (valid, inner, UOp.const(u.dtype, _zero(u.dtype))))
        if u.op is Op.REDUCE_AXIS:
            op, axes = u.arg
            in_shape = u.src[0].tensor_shape
            rngs = {a: self.new_range(in_shape[a], AxisType.REDUCE) for a in axes}
            body = yield (u.src[0], tuple(rngs.get(a, i) for a, i in enumerate(idxs)), gate, False)
            live = tuple(r for r in rngs.values() if r.op is Op.RANGE)
            if any(in_shape[a] == 0 for a in axes):
                return UOp.const(u.dtype, identity_element(op, u.dtype))
            return UOp(Op.REDUCE, u.dtype, (body, *live), op) if live else body
        if u.op in (Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD):
            return (yield (u.src[0], idxs, gate, False))
        srcs: list[UOp] = []  # ALU, CAST, BITCAST: elementwise
        for s in u.src:
            srcs.append((yield (s, idxs, gate, False)))
        return UOp(u.op, u.dtype, tuple(srcs), u.arg)


def _flat(idxs: tuple[UOp, ...], shape: tuple[sint, ...]) -> UOp:
    """The row-major flat index of `idxs` into `shape`."""
    flat = UOp.const(dtypes.index, 0)
    stride: sint = 1
    for i, s in reversed(list(zip(idxs, shape, strict=True))):
        flat = flat + i * stride
        stride *= s
    return flat


def _zero(dt):
    return False if dtypes.is_bool(dt) else (0.0 if dtypes.is_float(dt) else 0)


def store_target(lw: _Lowerer, target: UOp, idxs: tuple[UOp, ...], shape: tuple[sint, ...]) -> tuple[UOp, UOp]:
    """(INDEX into the storage under `target`, value cast) for storing at output position `idxs`.

    `target` is a BUFFER or movements / equal-size bitcasts of one (prepare_rangeify has refused broadcast
    destinations): the index goes back through them, and a padded view stores only where it is not padding.
    """
    chain, u = target.view_chain(GroupOp.View)
    gate = None
    for m in chain:
        if m.op is Op.BITCAST:
            continue
        idxs, valid = apply_movement_op(m.op, tuple(m.src[0].tensor_shape), m.arg, idxs)
        if valid is not None:
            gate = valid if gate is None else gate.alu(Op.AND, valid)
    param = lw.param(u, u.arg)
    return UOp(Op.INDEX, param.dtype, (param, idxs[0]) + ((gate,) if gate is not None else ())), u


def lower_kernel(value: UOp, out: UOp, realized: dict[UOp, UOp],
                 local_axes: dict[UOp, tuple[int, ...]] | None = None) -> Kernel:
    """The kernel that computes `value` into `out` (a BUFFER, or a view of one for an assignment), reading the
    stored values in `realized` and keeping the Local values of `local_axes` in kernel-local arrays."""
    lw = _Lowerer(realized, local_axes)
    shape = tuple(value.tensor_shape)
    if out.op is Op.BUFFER:
        lw.param(out, prod(shape))  # slot 0, typed by the value's (possibly symbolic) size
    rngs = tuple(lw.new_range(s, AxisType.LOOP) for s in shape)
    body = lw.lower(value, rngs, None, top=True)
    if out.op is Op.BUFFER:
        flat = UOp.const(dtypes.index, 0)
        stride: sint = 1
        for r, s in reversed(list(zip(rngs, shape, strict=True))):
            flat = flat + r * stride
            stride = stride * s
        index = UOp(Op.INDEX, lw.params[out].dtype, (lw.params[out], flat))
    else:
        index, base = store_target(lw, out, rngs, shape)
        if base.dtype != body.dtype:  # stored through an equal-size bitcast: store the bits
            body = UOp(Op.BITCAST, base.dtype, (body,))
    store = UOp(Op.STORE, dtypes.void, (index, body))
    live = tuple(r for r in rngs if r.op is Op.RANGE)
    ast = UOp(Op.SINK, dtypes.void, (UOp(Op.END, dtypes.void, (store, *live)) if live else store,))
    ast = collapse_one_hot(ast).simplify()  # one-hot gathers become loads at the index (schedule/gather.py)
    # simplification can drop reads (a load under a gate that is never true): number the remaining slots 0..n-1
    used = sorted((u for u in ast.toposort() if u.op is Op.PARAM), key=lambda u: u.arg)
    if len(used) != len(lw.buffers):
        ast = ast.substitute({p: p.replace(arg=i) for i, p in enumerate(used)})
    return Kernel(ast, [lw.buffers[p.arg] for p in used], kernel_info(value, set(_kernel_body(value, realized))))


def placement_dump(values: list[UOp], p: pm.Placements) -> str:
    """One line per output and per candidate for storage in the graph of `values`: `placement NAME MODE/PROV`."""
    order = UOp(Op.SINK, dtypes.void, tuple(values)).toposort()
    return "\n".join(f"placement {pm.node_name(u):32s} {p.debug(u)}" for u in order
                     if _is_candidate(u) or u in values)


def rangeify(outputs: list[tuple[UOp, UOp]], new_buffer, local_arrays: bool = False,
             assignments: bool = False) -> list[Kernel]:
    """Kernels computing each (value, destination) output, in dependency order. One value may go to several
    destinations (equal graphs are one node): each gets its own kernel. `assignments`: the destinations are
    existing storage that the values read as it was before any store (engine.realize.assign_all), so no kernel
    reads a value back from its destination (it is recomputed where needed): every read of a destination is
    of its old contents, which lets schedule/merge.py merge the store kernels.

    `new_buffer(value)` makes the BUFFER for an intermediate value that needs storage. `local_arrays`: the
    device's renderer can declare kernel-local arrays, so a Local row is filled once per row and serves the whole
    row (a CPU loop over the row; a GPU work group per row); without it Local values are computed in place and
    rows are not fused.
    """
    values = [v for v, _ in outputs]
    local_axes: dict[UOp, tuple[int, ...]] | None = {} if local_arrays else None
    with pm.compiling() as lineage:
        points = realize_points(values, lineage, local_axes)
        if config.get("DEBUG") >= 3:
            print(placement_dump(values, lineage.placements))
    targets: dict[UOp, list[UOp]] = {}
    for v, b in outputs:
        targets.setdefault(v, []).append(b)
    # other kernels read an output from its first new BUFFER; a value only assigned into a view is read from
    # nowhere else (it is recomputed where needed)
    realized: dict[UOp, UOp] = {}
    for v, b in outputs:
        if b.op is Op.BUFFER and v.op is not Op.CONTIGUOUS and not assignments:  # stored whole: staged below
            realized.setdefault(v, b)
    order = UOp(Op.SINK, dtypes.void, tuple(values)).toposort()
    for u in order:
        # a materialised value assigned into a view gets storage of its own first: it may read the destination
        # through another view (a store hazard), so it must be complete before the store begins
        staged = u.op is Op.CONTIGUOUS and u in targets and u not in realized
        if u in points and u not in realized and (u not in targets or staged):
            realized[u] = u if u.op in _STORAGE else new_buffer(u)
    kernels: list[Kernel] = []
    for u in order:  # sources before users: a kernel's inputs are computed by earlier kernels
        if u not in points or not resolve(u.size != 0):
            continue
        if u in targets and (u not in realized or realized[u] in targets[u]):
            kernels.extend(lower_kernel(u, t, realized, local_axes) for t in targets[u])
        elif u.op not in _STORAGE:
            kernels.append(lower_kernel(u, realized[u], realized, local_axes))
            stored = UOp(Op.RESHAPE, u.dtype, (realized[u],), tuple(u.tensor_shape))  # copied on into each destination
            kernels.extend(lower_kernel(stored, t, realized, local_axes) for t in targets.get(u, ()))
    return kernels
