"""optimize: choose how a kernel's loops map onto the machine, from the renderer's capabilities.

CPU-style renderers (no locals) keep loops and annotate them with `LoopKind`s (tolk_core.render.renderer): the
outermost output loop is split across threads (`PARALLEL`) when the kernel does enough work to pay for a thread
team, the innermost output loop with no reduction inside is vectorized (`SIMD`), and a small reduction loop is
unrolled (`UNROLL`). A kernel whose
reduction sits inside its output loops (matmul, column sums) cannot be vectorized by the C compiler across
outputs, so it is upcast (codegen.upcast): the contiguous output axis becomes vector lanes, that axis and
another output axis whose value some loads do not depend on are unrolled into a register block of
accumulators (`MAX_ACCUMULATORS` vectors), the loop over column blocks becomes the outermost (the operand
shared by a column block's rows, K x block width, then stays in L2 across all rows), and the reduction loop
is unrolled by 4.

GPU-style renderers (locals) get one work item per output element (per GPU_BLOCK x GPU_BLOCK tile of outputs
when the kernel reduces: unrolled copies, so each loaded operand serves a row or column of the tile): the
output ranges are rebuilt from one global index by division and remainder, the launch is `ceil(n / local)`
groups of `local` items, and a guard stops the items past the end. A kernel with few outputs and one long
reduction instead gets a *group reduction*: one work group per output, each item folds a strided share of the
reduction, the partial results meet in local memory behind a barrier, and item 0 folds them and stores. A kernel
that computes values once per row (kernel-local arrays: Local rows, and row reductions fused by the scheduler)
runs one work group per row instead (`_row_group_plan`): the row's arrays live in shared memory, filled by the
group's items together, and its reductions are group reductions; without room in shared memory the arrays are
computed in place where read.

Vector lanes (renderers with `max_lanes`, OpenCL): a reduction over an axis that every access reads
contiguously folds wide vectors into a vector accumulator whose lanes meet after the loop (a row sum); otherwise
the innermost output axis, when contiguous, becomes lanes: several adjacent outputs per work item, as one vector
(elementwise kernels; convolutions and matmuls, whose vector accumulators then bound the register tile). On a
CPU device (`cpu_threads`: PoCL runs each work group as a loop on one thread), a row kernel of many rows runs one
work item per row instead of one group per row (`_row_item_plan`), each loop of the row over vectors; groups are
sized so that each thread gets several, and group reductions are kept for outputs too few to fill the threads.

GPU index specials are named by what they count: `idx<d>` a global item, `gidx<d>` a group, `lidx<d>` an item
within its group.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from tolk_core.codegen import matmul, merge_ranges
from tolk_core.codegen.borders import drop_gated_selects, join_pieces, split_at_gates, split_row
from tolk_core.codegen.choices import knob
from tolk_core.codegen.linearize import is_array, range_deps

# the matmul plan's knob defaults, where engine/tuning.py reads every knob's default
from tolk_core.codegen.matmul import MATMUL_DOT_ROWS, MATMUL_KC, MATMUL_MR, MATMUL_NC, MATMUL_NR_VECTORS, MATMUL_PACK_B  # noqa: F401
from tolk_core.codegen.upcast import (
    hoist_range,
    lanes_are_contiguous,
    split_lanes,
    split_range_lanes,
    unroll_output,
    vectorize_lanes,
)
from tolk_core.ir.dtype import AddrSpace, PtrDType, dtypes
from tolk_core.ir.ops import AxisType, GroupOp, Op, identity_element
from tolk_core.ir.uop import UOp, prod, sint
from tolk_core.render.renderer import LoopKind, Renderer

# element-operations below which waking a thread team (passive OpenMP wait) costs more than it saves
PARALLEL_MIN_WORK = 1 << 20
ELEMENT_OPS = 8  # ALU operations of an elementwise kernel's body that count as one element of work
# an exp2, log2, sin or cos counts as this many operations: each is a polynomial of ~30 (CPU's tolk_exp2f), and an
# exp over 196k floats took 141-151 us on one thread against 100-105 on two (65k: 60 against 75: stays on one)
TRANSCENDENTAL_OPS = 48
_TRANSCENDENTAL = frozenset({Op.EXP2, Op.LOG2, Op.SIN, Op.COS})
UNROLL_MAX = 16
GROUP_MAX_OUTPUTS = 1024      # a group reduction pays off when outputs are too few to fill the device
GROUP_MIN_REDUCE = 256        # ... and the reduction is long enough to share
GROUP_SIZE = 64
CPU_GROUPS_PER_THREAD = 4     # work groups per thread of a CPU device (PoCL), to balance uneven threads
CPU_MIN_LOCAL = 8             # ... but no smaller groups: a group's launch costs more than 8 small items
# measured on PoCL (docs/performance.md): an 8x8 tile per work item runs matmul 7-80x faster than one output
# per item (4x4: 25 GFLOP/s, 16x16 spills); 256 items per group vectorize elementwise kernels better than 64
GPU_BLOCK = 8                 # a GPU work item of a reduction kernel computes up to GPU_BLOCK^2 outputs
GPU_LOCAL = 256               # work items per group of a one-item-per-output launch
# measured on PoCL (docs/performance.md): a row sum folding float16 vectors per item ran 7x faster than a scalar
# loop; elementwise kernels storing float4..float16 per item ~1.5x faster than one float per item
GPU_REDUCE_LANES = 16         # lanes of a GPU reduction over a contiguous axis (vector accumulator)
GPU_ROW_LANES = 8             # lanes of the loops of a row computed by one work item (_row_item_plan)
ROW_ITEM_MIN_ROWS = 256       # rows enough to fill the device with one work item per row
ROW_ITEM_LOCAL = 64           # work items per group of a one-item-per-row launch
ROW_ITEM_ARRAY_BYTES = 16384  # a work item's own arrays (PoCL keeps them on its threads' stacks)
GPU_REDUCE_OUTPUT_LANES = 16  # adjacent outputs of a reduction kernel per work item (a convolution's row)
GPU_VECTOR_ACCUMULATORS = 16  # vector accumulators of a work item's tile (AVX-512 has 32 registers)
GPU_OUTPUT_LANES = 16         # at most this many contiguous outputs per work item of a GPU elementwise kernel
# memory dtypes GPU vector lanes are planned for (bool is stored as uchar, half/bfloat16 are emulated)
_GPU_LANE_MEMORY = frozenset({dtypes.float32, dtypes.int32, dtypes.uint32})
MAX_ACCUMULATORS = 16         # vector accumulators of a register block (AVX-512 has 32 registers; a renderer's
                              # `vector_registers` // 2 replaces it: 8 of AVX2's 16)
# dtypes vector lanes are planned for: C vector-extension element types computed natively (half and bfloat16 are
# stored narrow and computed or rounded through float, which the lane renderer does not do)
_LANE_DTYPES = frozenset({dtypes.void, dtypes.bool, dtypes.index, dtypes.int32, dtypes.uint32, dtypes.int64,
                          dtypes.uint64, dtypes.float32, dtypes.float64})


@dataclass
class Plan:
    """What optimize decided: the (rewritten) AST, loop annotations, launch dims and the work-item guard."""
    ast: UOp
    loop_kinds: dict[UOp, LoopKind] = field(default_factory=dict)
    global_size: tuple[sint, ...] = (1, 1, 1)
    local_size: tuple[int, int, int] | None = None
    guard: UOp | None = None


def _output_ranges(ast: UOp) -> list[UOp]:
    """The ranges the stores are ended by, outermost first (unrolled copies share theirs: listed once)."""
    return list(dict.fromkeys(r for top in ast.src if top.op is Op.END for r in top.src[1:] if r.op is Op.RANGE))


def _size(r: UOp) -> sint:
    return r.src[0].arg if r.src[0].op is Op.CONST else r.src[0]


def _const_size(r: UOp) -> int:
    """The size of a range known to be constant (every range of a row kernel is: `_row_kernel`)."""
    return r.src[0].arg


def _most(r: UOp) -> int:
    """The largest size a (possibly symbolic) range can have: what heuristics plan for."""
    return int(r.src[0].vmax)


def _matmul_plan(ast: UOp, outs: list[UOp], renderer: Renderer) -> UOp | None:
    """codegen/matmul.py's plan of `ast`, its columns first merged with the output range outside them where
    every access walks the two as one run (codegen/merge_ranges.py: a 1 x 1 convolution's rows and columns)."""
    def plan(ast: UOp, outs: list[UOp]) -> UOp | None:
        return matmul.plan(ast, outs, renderer.vector_bytes, renderer.vector_registers, renderer.cache_bytes[1],
                           renderer.cache_bytes[0])
    if len(outs) >= 2 and (mm := matmul.match(ast, outs)) is not None and outs[-2] in mm.outer and \
            (merged := merge_ranges.merge(ast, outs[-2], outs[-1])) is not None and \
            (packed := plan(merged[0], outs[:-2] + [merged[1]])) is not None:
        return packed
    return plan(ast, outs)


def optimize(ast: UOp, renderer: Renderer, noopt: bool = False, cut: bool = True) -> Plan:
    """The plan for kernel `ast` on `renderer`'s device (see the module docstring); `noopt`: the plainest
    correct plan (no annotations, no lanes, one item per group). `cut`: a kernel with no reduction may be cut at
    its gates (`split_at_gates`); its pieces are planned with `cut` False, so a pad along every axis is cut
    along one (pieces multiply: 3^4 copies of the body for a 4-d pad)."""
    outs = _output_ranges(ast)
    reduce_ranges = [r for r in ast.toposort() if r.op is Op.RANGE and r.arg[1] is AxisType.REDUCE]
    if renderer.has_local:
        return _gpu_plan(ast, outs, renderer, noopt)
    if noopt:
        return Plan(ast)
    if cut and not reduce_ranges and (pieces := split_at_gates(ast)) is not None:
        return _joined([optimize(p, renderer, cut=False) for p in pieces])
    # element-operations, counted before register blocking: after it the loops count vectors and unrolled
    # blocks, and a 16x16x32x32 convolution looked like 150k operations (one thread)
    work = math.prod(_most(r) for r in outs + reduce_ranges)
    if not reduce_ranges:  # an elementwise kernel: its body's operations per element count too
        work *= _element_weight(ast)
    packed = None
    if reduce_ranges and renderer.vector_bytes:
        # a matmul-shaped kernel gets the packed-panel plan (codegen/matmul.py), others the register tile below
        packed = _matmul_plan(ast, outs, renderer)
        # at most half the vector registers hold a register tile's accumulators (the rest: loaded operands)
        accumulators = renderer.vector_registers // 2
        ast = packed if packed is not None else _upcast(ast, outs, renderer.vector_bytes, accumulators)
        outs = _output_ranges(ast)
        reduce_ranges = [r for r in ast.toposort() if r.op is Op.RANGE and r.arg[1] is AxisType.REDUCE]
    plan = Plan(ast)
    # the outermost loop with more than one iteration (the loops around it run once: a register-blocked
    # kernel's column-block loop when one block covers the row)
    first = next((i for i, r in enumerate(outs) if _most(r) > 1), None)
    if first is not None and work >= knob("PARALLEL_MIN_WORK", PARALLEL_MIN_WORK) and \
            all(_size(r) == 1 for r in outs[:first]):
        plan.loop_kinds[outs[first]] = LoopKind.PARALLEL if packed is None else LoopKind.PARALLEL_TILES
    if outs and not reduce_ranges:
        inner = outs[-1]
        plan.loop_kinds[inner] = LoopKind.PARALLEL_SIMD if plan.loop_kinds.get(inner) is LoopKind.PARALLEL \
            else LoopKind.SIMD
    if not plan.loop_kinds and (split := _parallel_reduction(ast, outs)) is not None:
        plan.loop_kinds[split] = LoopKind.PARALLEL_REDUCE
    unrolled = _full_unrolls(ast, [r for r in reduce_ranges if r not in plan.loop_kinds])
    vector = any(u.dtype.count > 1 for u in ast.toposort())
    for r in reduce_ranges:
        if r in plan.loop_kinds:
            continue
        if r in unrolled:
            plan.loop_kinds[r] = LoopKind.UNROLL
        elif vector:
            plan.loop_kinds[r] = LoopKind.UNROLL4
    return plan


def _element_weight(ast: UOp) -> int:
    """How many elements' worth of work one element of an elementwise kernel does: its ALU operations in units of
    `ELEMENT_OPS`, at least 1, an exp2, log2, sin or cos counting `TRANSCENDENTAL_OPS`. A copy or an add is one;
    GELU's ~45 operations per element (an exp2 among them) are eleven, so its 262k-element kernel (0.84 ms on one
    thread) takes the threads a plain add of that size does not; an exp (a multiply and an exp2) is six."""
    ops = sum((TRANSCENDENTAL_OPS if u.op in _TRANSCENDENTAL else 1) for u in ast.toposort()
              if u.op in GroupOp.ALU and u.dtype != dtypes.index)
    return max(1, ops // ELEMENT_OPS)


def _joined(plans: list[Plan]) -> Plan:
    """One plan of the pieces' plans (CPU: loops and their kinds only): their stores in one SINK."""
    kinds = {r: k for p in plans for r, k in p.loop_kinds.items()}
    return Plan(join_pieces([p.ast for p in plans]), kinds)


def _full_unrolls(ast: UOp, ranges: list[UOp]) -> set[UOp]:
    """The reduction loops of `ranges` to unroll fully: short constant loops, innermost first, while the loops
    unrolled along any one nest copy the body at most UNROLL_MAX times (a tunable knob). Nested full unrolls
    multiply: six nested loops of 3-6 iterations each unrolled are ~30,000 copies of the body, which the C
    compiler does not finish (a loss over a 6-d input took cc past 300 s)."""
    enclosing = _enclosing_reduce_ranges(ast)
    most = knob("UNROLL_MAX", UNROLL_MAX)
    short = [r for r in ranges if r.src[0].op is Op.CONST and _most(r) <= most]
    chosen: set[UOp] = set()
    for r in sorted(short, key=lambda r: -len(enclosing.get(r, ()))):
        along = [u for u in chosen if u in enclosing.get(r, ()) or r in enclosing.get(u, ())]
        if _most(r) * math.prod(_most(u) for u in along) <= most:
            chosen.add(r)
    return chosen


def _enclosing_reduce_ranges(ast: UOp) -> dict[UOp, set[UOp]]:
    """For each reduction range, the reduction ranges whose loops enclose it: the ranges listed before it on
    its own REDUCE, and every range of a REDUCE whose body holds its REDUCE."""
    out: dict[UOp, set[UOp]] = {}
    for red in (u for u in ast.toposort() if u.op is Op.REDUCE):
        own = [r for r in red.src[1:] if r.op is Op.RANGE]
        for i, r in enumerate(own):
            out.setdefault(r, set()).update(own[:i])
        for inner in (u for u in red.src[0].toposort() if u.op is Op.REDUCE):
            for r in inner.src[1:]:
                if r.op is Op.RANGE:
                    out.setdefault(r, set()).update(own)
    return out


def _parallel_reduction(ast: UOp, outs: list[UOp]) -> UOp | None:
    """The loop of a reduction worth splitting across threads: a kernel with no parallel output loop and one
    long scalar sum or product (OpenMP combines the threads' partial results; float reassociation is already
    allowed by the compile flags). None when there is no such loop."""
    reduces = [u for u in ast.toposort() if u.op is Op.REDUCE]
    if len(reduces) != 1 or outs and math.prod(_most(r) for r in outs) > 1:
        return None
    red = reduces[0]
    rngs = [r for r in red.src[1:] if r.op is Op.RANGE]
    if red.arg not in (Op.ADD, Op.MUL) or red.dtype.count > 1 or len(rngs) != 1 or \
            _most(rngs[0]) < knob("PARALLEL_MIN_WORK", PARALLEL_MIN_WORK):
        return None
    return rngs[0]


def _register_block(ast: UOp, outs: list[UOp], block: int, accumulators: int | None = None) -> UOp:
    """`ast` with its last two output axes unrolled by up to `block` each (copies: one work item computes a
    tile), each only if some load does not depend on it: that load is then shared by the copies; with no
    sharing, unrolling would only cut the work items. The tile shrinks so that tile x reductions stays within
    `accumulators` (default block^2; a convolution's nine reductions would otherwise spill)."""
    if _nested_reduce(ast):
        return ast
    loads = [u for u in ast.toposort() if u.op is Op.LOAD]
    budget = (accumulators or block * block) // max(1, sum(u.op is Op.REDUCE for u in ast.toposort()))
    for r in outs[-2:]:
        if r.src[0].op is not Op.CONST or all(r in ld.toposort() for ld in loads):
            continue
        if (f := _factor(r, min(block, budget))) > 1:
            ast, _ = unroll_output(ast, r, f)
            budget //= f
    return ast


def _nested_reduce(ast: UOp) -> bool:
    """Whether a reduction runs inside another's loop. Unrolled copies share their ranges, and linearize folds
    only reductions directly in output loops together; a copy of an outer reduction would open its own loop and
    find the inner one computed in another copy's loop. Such kernels are not unrolled."""
    return any(b.op is Op.REDUCE for u in ast.toposort() if u.op is Op.REDUCE for b in u.src[0].toposort())


def _factor(r: UOp, most: int) -> int:
    """The largest of 8, 4, 2 that divides r's constant size and is at most `most`, else 1."""
    return next((f for f in (8, 4, 2) if f <= most and r.src[0].arg % f == 0), 1)


def _upcast(ast: UOp, outs: list[UOp], vector_bytes: int, accumulators: int = MAX_ACCUMULATORS) -> UOp:
    """`ast` register-blocked over its output axes (see the module docstring), or unchanged when its innermost
    output axis is not a whole number of vectors or some access would not be contiguous in the lanes; the tile
    holds at most `accumulators` vectors (default of knob MAX_ACCUMULATORS: half the device's registers). A
    kernel that reads through a PAD along its row is first split into border and interior pieces
    (codegen/borders.py), each tiled on its own."""
    stores = [u for u in ast.toposort() if u.op is Op.STORE]
    if not outs or len(stores) != 1 or any(r.src[0].op is not Op.CONST for r in outs) or \
            any(u.dtype.scalar() not in _LANE_DTYPES for u in ast.toposort() if not isinstance(u.dtype, PtrDType)):
        return ast
    full = vector_bytes // max(stores[0].src[1].dtype.itemsize, 4)
    if not (width := _row_width(ast, stores[0], outs[-1].src[0].arg, full)):
        return ast
    ast = drop_gated_selects(ast)
    if (pieces := split_row(ast, outs[-1], width)) is None:
        return _tile(ast, outs, stores[0], full, accumulators)
    return join_pieces([_tile(p, _output_ranges(p), stores[0], full, accumulators) for p in pieces])


def _tile(ast: UOp, outs: list[UOp], store: UOp, full: int, accumulators: int) -> UOp:
    """`ast` (one store, like `store`) with its row in vector lanes of at most `full` and the register tile of
    `_upcast`; unchanged where its row has no lanes or an access is not contiguous in them (a gated load may
    depend on the lanes: a masked load)."""
    inner = outs[-1]
    if not (width := _row_width(ast, store, inner.src[0].arg, full)):
        return ast
    lanes_ast, inner, lane = split_lanes(ast, inner, width)
    if not lanes_are_contiguous(lanes_ast, lane, masked_loads=True):
        return ast
    # accumulators: one vector per copy of each reduction
    reductions = max(1, sum(u.op is Op.REDUCE for u in lanes_ast.toposort()))
    ast, budget = lanes_ast, knob("MAX_ACCUMULATORS", accumulators) // reductions
    if _nested_reduce(ast):
        budget = 0  # vector lanes only (see _nested_reduce)
    if inner.src[0].arg % 2 == 0 and budget >= 4:
        ast, inner = unroll_output(ast, inner, 2)
        budget //= 2
    if (r := _shared_load_axis(ast, outs[:-1], lane, budget)) is not None:
        ast, _ = unroll_output(ast, r, _factor(r, budget))
        # column blocks outermost: one block's slice of the shared operand stays in cache across rows
        ast = hoist_range(ast, inner)
    return vectorize_lanes(ast, lane, width)


def _row_width(ast: UOp, store: UOp, size: int, full: int) -> int:
    """The lanes of a row of `size` outputs, or 0 (scalar code): the widest vector (the register's `full`
    lanes, half or a quarter of it; at least 4 lanes) the row holds, its last vector moved back to end at the
    row's end where it does not divide the row (`split_lanes`): a 28-wide row in four 8-float vectors, not
    seven of 4 (resnet50's 28x28 3x3 convolutions 69 -> 77 GFLOP/s), a convolution's 4-wide rows in 4-float
    ones. A kernel that reads the buffer it stores takes only a vector that divides the row (the overlap would
    read new values)."""
    widths = [w for w in (full, full // 2, full // 4) if w >= 4]
    if any(u.op is Op.LOAD and u.src[0].src[0] is store.src[0].src[0] for u in ast.toposort()):
        return next((w for w in widths if size % w == 0), 0)
    # the widest vector the row holds, its last one moved back where it does not divide the row: fewer vectors
    # than a narrower one that divides it (a 28-wide row: 4 of 8 floats, not 7 of 4)
    return next((w for w in widths if size >= w), 0)


def _shared_load_axis(ast: UOp, outs: list[UOp], lane: UOp, budget: int) -> UOp | None:
    """The output axis (of `outs`, not the lanes' one) to unroll for a register tile, or None: loads that do
    not depend on it are shared by its copies. Preferred: an axis some vector load (one depending on the lanes)
    does not depend on, innermost first, whose size `_factor` can split: a convolution's output channels, so
    each input vector feeds a copy per channel (its rows share only a scalar weight: one vector load per FMA;
    at the ResNet's 16->16 layer 8 channels ran 1.5-1.9x faster than 8 rows, docs/performance.md). Else the
    innermost axis some load does not depend on (a matmul's rows: each B vector feeds a copy per row)."""
    loads = [u for u in ast.toposort() if u.op is Op.LOAD]
    vector_loads = [ld for ld in loads if lane in ld.toposort()]
    for r in reversed(outs):
        if any(r not in ld.toposort() for ld in vector_loads) and _factor(r, budget) > 1:
            return r
    shared = next((r for r in reversed(outs) if any(r not in ld.toposort() for ld in loads)), None)
    return shared if shared is not None and _factor(shared, budget) > 1 else None


def _gpu_plan(ast: UOp, outs: list[UOp], renderer: Renderer, noopt: bool) -> Plan:
    if not noopt and (plan := _row_item_plan(ast, outs, renderer)) is not None:
        return plan
    if not noopt and (plan := _row_group_plan(ast, outs, renderer)) is not None:
        return plan
    if (inlined := _inline_arrays(ast)) is not ast:  # no room for the arrays: the row reductions may still share
        ast = inlined
        if not noopt and (plan := _row_group_plan(ast, outs, renderer)) is not None:
            return plan
    if not noopt and (plan := _group_reduce_plan(ast, outs, renderer)) is not None:
        return plan
    lanes = None if noopt else _gpu_lanes(ast, outs, renderer.max_lanes)
    if lanes is not None:
        ast, outs, lane, width = lanes
    if not noopt and any(u.op is Op.REDUCE for u in ast.toposort()):
        # vector accumulators take a register each: fewer of them
        ast = _register_block(ast, outs, knob("GPU_BLOCK", GPU_BLOCK),
                              None if lanes is None else knob("GPU_VECTOR_ACCUMULATORS", GPU_VECTOR_ACCUMULATORS))
        outs = _output_ranges(ast)
    n = prod(_size(r) for r in outs)
    if isinstance(n, int) and n <= 1:
        return Plan(ast if lanes is None else vectorize_lanes(ast, lane, width))
    most = n if isinstance(n, int) else int(n.vmax)
    local = 1 if noopt else _local_size(renderer, knob("GPU_LOCAL", GPU_LOCAL), most)
    groups = -(-n // local) if isinstance(n, int) else ((n + (local - 1)) // local).simplify()
    # the guard stops items past n, so every item that computes has gid < n: range analysis may assume it
    gid = UOp(Op.SPECIAL, dtypes.index, (n if isinstance(n, UOp) else UOp.const(dtypes.index, n),), ("idx0", 0))
    ast = _flatten_outputs(ast, outs, gid).simplify()
    if lanes is not None:
        ast = vectorize_lanes(ast, lane, width)
    exact = isinstance(n, int) and groups * local == n
    return Plan(ast, global_size=(groups, 1, 1), local_size=(local, 1, 1), guard=None if exact else gid < n)


def _gpu_lane_dtypes(nodes: list[UOp]) -> bool:
    """Whether GPU vector lanes may widen these kernel nodes: values of native vector element types, memory of
    float32/int32/uint32 (bool is stored as uchar; half and bfloat16 may be emulated)."""
    return all(u.dtype.scalar() in _LANE_DTYPES for u in nodes if not isinstance(u.dtype, PtrDType)) and \
        all(u.ptrdtype.base in _GPU_LANE_MEMORY for u in nodes if u.op is Op.INDEX)


def _local_size(renderer: Renderer, most: int, items: int) -> int:
    """Work items per group for `items` items: up to `most` (and the renderer's limit), no more than the items
    need; on a CPU device (`renderer.cpu_threads`, one thread per group) small enough for `CPU_GROUPS_PER_THREAD`
    groups per thread where the items allow, down to `CPU_MIN_LOCAL` items."""
    local = min(renderer.local_max or 1, most, 1 << max(items - 1, 1).bit_length())
    while (threads := renderer.cpu_threads) and local > CPU_MIN_LOCAL and \
            -(-items // local) < CPU_GROUPS_PER_THREAD * threads:
        local //= 2
    return local


def _gpu_lanes(ast: UOp, outs: list[UOp], max_lanes: int) -> tuple[UOp, list[UOp], UOp, int] | None:
    """Vector lanes for a one-item-per-output GPU kernel, when the renderer has vector types of up to
    `max_lanes` lanes: (the AST with a range split into `r' * width + lane`, its output ranges, the `lane`
    placeholder for `vectorize_lanes`, `width`), or None.

    A reduction over a constant range that every access depending on it reads contiguously (a row sum) folds
    `GPU_REDUCE_LANES`-wide vectors into a vector accumulator; otherwise a kernel whose innermost output range
    every dependent access reads and writes contiguously computes adjacent outputs per item as one vector
    (16, 8 or 4 of them, the widest that divides the axis, up to `GPU_OUTPUT_LANES`; `GPU_REDUCE_OUTPUT_LANES`
    with vector accumulators in a reduction kernel).
    Only kernels whose memory is float32/int32/uint32 and whose values have native vector types qualify, and
    sizes that are a whole number of vectors."""
    nodes = ast.toposort()
    if not max_lanes or not _gpu_lane_dtypes(nodes):
        return None
    reduces = [u for u in nodes if u.op is Op.REDUCE]
    if reduces:
        if _nested_reduce(ast) or any(u.arg not in (Op.ADD, Op.MUL, Op.MAX) for u in reduces):
            return None
        width = min(GPU_REDUCE_LANES, max_lanes)
        for r in dict.fromkeys(r for u in reduces for r in u.src[1:]):
            if r.src[0].op is not Op.CONST or r.src[0].arg % width or r.src[0].arg < 2 * width:
                continue
            split, lane = split_range_lanes(ast, r, width)
            if lanes_are_contiguous(split, lane, arrays=True) and \
                    any(u.op is Op.INDEX and lane in u.toposort() for u in split.toposort()):
                return split, _output_ranges(split), lane, width
    if not outs or outs[-1].src[0].op is not Op.CONST:
        return None
    if reduces:  # whole vector accumulators only: a narrower one would leave the tile's registers half used
        width = min(GPU_REDUCE_OUTPUT_LANES, max_lanes)
    else:  # the widest vector that divides the axis (float16 math built-ins run 4x the float4 ones' lanes)
        width = next((w for w in (16, 8, 4) if w <= min(GPU_OUTPUT_LANES, max_lanes) and
                      outs[-1].src[0].arg % w == 0), 0)
    if not width or outs[-1].src[0].arg % width:
        return None
    split, inner, lane = split_lanes(ast, outs[-1], width)
    if not lanes_are_contiguous(split, lane, arrays=True):
        return None
    return split, [*outs[:-1], inner], lane, width


def _row_kernel(ast: UOp, outs: list[UOp]) -> tuple[list[UOp], list[UOp], list[UOp]] | None:
    """(the row ranges, the reductions, the array fills) of a kernel that computes values once per row: one
    holding kernel-local arrays or reductions that depend on only some output ranges (the row ranges). None
    when the kernel has neither, when some range is symbolic, when a reduction or array fill depends on a loop
    other than the output loops, or when an array is the same for several rows."""
    nodes = ast.toposort()
    deps = range_deps(ast)
    reduces = [u for u in nodes if u.op is Op.REDUCE]
    fills = list(dict.fromkeys(u.src[1] for u in nodes if u.op is Op.LOAD and is_array(u.src[0].src[0])))
    out_set = set(outs)
    if not fills and all(deps[r] >= out_set for r in reduces):
        return None
    if any(r.src[0].op is not Op.CONST for r in nodes if r.op is Op.RANGE) or \
            any(not deps[u] <= out_set for u in reduces + fills):
        return None
    rows = [r for r in outs if any(r in deps[u] for u in reduces + fills)]
    if any(deps[f] != set(rows) for f in fills):
        return None  # every group would refill an array that is the same for several rows
    return rows, reduces, fills


def _row_item_plan(ast: UOp, outs: list[UOp], renderer: Renderer) -> Plan | None:
    """One work item per row, for a row kernel (`_row_kernel`) with at least `ROW_ITEM_MIN_ROWS` rows on a CPU
    device with vector types (its work group is a loop on one thread: a row group's barriers only serialize,
    and the row's loops vectorize within the item instead): the row ranges become the item index, the row's
    arrays are the item's own (at most `ROW_ITEM_ARRAY_BYTES`), and every innermost loop of the row (an array
    fill, a reduction, the row's outputs) whose accesses are contiguous runs over `GPU_ROW_LANES`-wide
    vectors. None otherwise."""
    max_lanes = renderer.max_lanes
    if not max_lanes or not renderer.cpu_threads or (row := _row_kernel(ast, outs)) is None:
        return None
    rows, reduces, fills = row
    nodes = ast.toposort()
    n_rows = math.prod(_const_size(r) for r in rows)
    if not rows or n_rows < ROW_ITEM_MIN_ROWS or \
            sum(u.arg[1] * u.ptrdtype.base.itemsize for u in nodes if is_array(u)) > ROW_ITEM_ARRAY_BYTES:
        return None
    lanes: list[tuple[UOp, int]] = []
    if _gpu_lane_dtypes(nodes):
        loops = [r for u in reduces for r in u.src[1:] if r.op is Op.RANGE] + \
            [r for f in fills if f.op is Op.END for r in f.src[1:]] + [r for r in outs if r not in rows]
        for r in dict.fromkeys(loops):
            width = min(GPU_ROW_LANES, max_lanes)
            if r.src[0].arg % width or r.src[0].arg < width:
                continue
            split, lane = split_range_lanes(ast, r, width)
            if lanes_are_contiguous(split, lane, arrays=True) and _lanes_apart(split, [lane, *(ln for ln, _ in lanes)]):
                ast = split
                lanes.append((lane, width))
    rows = [r for r in _output_ranges(ast) if r in rows]
    local = _local_size(renderer, ROW_ITEM_LOCAL, n_rows)
    groups = -(-n_rows // local)
    gid = UOp(Op.SPECIAL, dtypes.index, (UOp.const(dtypes.index, n_rows),), ("idx0", 0))
    sizes = [_size(r) for r in rows]
    ast = ast.substitute({r: (gid // prod(sizes[i + 1:])) % sizes[i] for i, r in enumerate(rows)})
    tops = []
    for t in ast.src:  # the ENDs close the row's own loops only
        rest = [s for s in t.src[1:] if s not in rows] if t.op is Op.END else []
        tops.append(UOp(Op.END, dtypes.void, (t.src[0], *rest)) if rest else t.src[0] if t.op is Op.END else t)
    ast = UOp(Op.SINK, dtypes.void, tuple(tops)).simplify()
    for lane, width in lanes:
        ast = vectorize_lanes(ast, lane, width)
    guard = None if groups * local == n_rows else gid < n_rows
    return Plan(ast, global_size=(groups, 1, 1), local_size=(local, 1, 1), guard=guard)


def _lanes_apart(ast: UOp, lanes: list[UOp]) -> bool:
    """Whether no value depends on two of `lanes` (a value's lanes: those of its sources; a reduction's value
    depends on none of the lanes it folds, an array read on none of its fill's; loop ends are no values)."""
    lane_set = set(lanes)
    seen: dict[UOp, frozenset[UOp]] = {}
    for u in ast.toposort():
        if u in lane_set or u.op in (Op.END, Op.SINK):
            seen[u] = frozenset((u,)) if u in lane_set else frozenset()
            continue
        srcs = u.src[:1] if u.op is Op.LOAD else u.src
        got = frozenset().union(*(seen[s] for s in srcs)) if srcs else frozenset()
        if u.op is Op.REDUCE:
            got -= frozenset(u.src[1:])
        if len(got) > 1:
            return False
        seen[u] = got
    return True


def _ended(x: UOp, step: UOp) -> UOp:
    return UOp(Op.END, dtypes.void, (x, step)) if step.op is Op.RANGE else x


def _gated(index: UOp, valid: UOp | None) -> UOp:
    """`index` valid only where `valid` also holds (None: unchanged)."""
    if valid is None:
        return index
    gate = valid if len(index.src) < 3 else index.src[2].alu(Op.AND, valid)
    return index.replace(src=(*index.src[:2], gate))


class _GroupShare:
    """The `local` items of one work group (item `lid`) sharing a row's work: a loop nest split over them
    (`strided`), a reduction folded by the group (`reduce`), an array filled by the group (`fill`). New loops
    are numbered from `ids`, shared-memory partial results named temp0, temp1, ... in order."""

    def __init__(self, local: int, ids: Iterator[int]):
        self.local, self.ids, self.temps = local, ids, 0
        self.lid = UOp(Op.SPECIAL, dtypes.index, (UOp.const(dtypes.index, local),), ("lidx0", 0))

    def strided(self, rngs: list[UOp], kind: AxisType) -> tuple[UOp, UOp | None, dict[UOp, UOp]]:
        """(the loop over this item's share of `rngs`' flat extent, the in-extent gate or None, each range's
        value at the item's clamped position)."""
        sizes = [_size(r) for r in rngs]
        n = math.prod(sizes)
        steps = -(-n // self.local)
        step = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, steps),), (next(self.ids), kind)) if steps > 1 \
            else UOp.const(dtypes.index, 0)
        pos = step * self.local + self.lid
        valid = None if n == steps * self.local else pos < n
        at = pos if valid is None else valid.where(pos, UOp.const(dtypes.index, n - 1))
        return step, valid, {r: (at // math.prod(sizes[i + 1:])) % sizes[i] for i, r in enumerate(rngs)}

    def reduce(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        """Reduction `u` (its sources `src` rewritten) as a group reduction: strided partial results meet in
        shared memory behind a barrier, item 0 folds them and shares the total behind a second barrier."""
        local, lid = self.local, self.lid
        step, valid, at = self.strided([s for s in u.src[1:] if s.op is Op.RANGE], AxisType.REDUCE)
        body = src[0].substitute(at)
        if valid is not None:
            body = valid.where(body, UOp.const(u.dtype, identity_element(u.arg, u.dtype)))
        partial = UOp(Op.REDUCE, u.dtype, (body, step), u.arg) if step.op is Op.RANGE else body
        temp = UOp(Op.DEFINE_LOCAL, u.dtype.ptr(local, AddrSpace.LOCAL), (), (f"temp{self.temps}", local))
        self.temps += 1
        barrier = UOp(Op.BARRIER, dtypes.void, (UOp(Op.STORE, dtypes.void, (
            UOp(Op.INDEX, temp.dtype, (temp, lid)), partial)),))
        # item 0 alone folds the partial results (every item folding them all cost local^2 per group) and
        # publishes the total in slot 0, which it alone has read; a second barrier, and every item reads it
        first = lid < 1
        folds = first.where(UOp.const(dtypes.index, local), UOp.const(dtypes.index, 0))
        slot = UOp(Op.RANGE, dtypes.index, (folds,), (next(self.ids), AxisType.REDUCE))
        total = UOp(Op.REDUCE, u.dtype, (UOp(Op.LOAD, u.dtype, (UOp(Op.INDEX, temp.dtype, (temp, slot)),
                                                                  barrier)), slot), u.arg)
        zero = UOp.const(dtypes.index, 0)
        published = UOp(Op.BARRIER, dtypes.void, (UOp(Op.STORE, dtypes.void, (
            UOp(Op.INDEX, temp.dtype, (temp, zero, first)), total)),))
        return UOp(Op.LOAD, u.dtype, (UOp(Op.INDEX, temp.dtype, (temp, zero)), published))

    def fill(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        """Array fill `u` (END(STORE(INDEX(array, i), value), *ranges), or the bare STORE of a 1-element array;
        its sources `src` rewritten) done by the group, behind a barrier."""
        store = src[0] if u.op is Op.END else u.replace(src=src)
        rngs = [s for s in u.src[1:] if s.op is Op.RANGE] if u.op is Op.END else []
        step, valid, at = self.strided(rngs, AxisType.LOCAL)
        store = store.substitute(at)
        store = store.replace(src=(_gated(store.src[0], valid), *store.src[1:]))
        return UOp(Op.BARRIER, dtypes.void, (_ended(store, step),))


def _row_group_plan(ast: UOp, outs: list[UOp], renderer: Renderer) -> Plan | None:
    """One work group per row: for a kernel holding kernel-local arrays (Local rows) or reductions that depend
    on only some output ranges (the row's), computed once per row and shared by the row's items. None when the
    kernel has neither, when some range is symbolic, when a reduction or array fill depends on a loop other than
    the output loops, when an array is the same for several rows, or when the arrays and partial results do not
    fit the group's shared memory.

    The output ranges the per-row values depend on (the row ranges) become the group index; then every array
    is filled cooperatively (item `lidx0` takes every `local`-th element) into shared memory, behind a barrier;
    every reduction is a group reduction (strided partial results meet in shared memory behind a barrier, item 0
    folds them and shares the total behind a second barrier); and the row's remaining output ranges are stored
    strided the same way. Positions past an extent are clamped for reading (no access leaves its buffer) and
    gated for storing and folding. A Local with no row axes makes the whole kernel one group.
    """
    if (row := _row_kernel(ast, outs)) is None:
        return None
    rows, reduces, fills = row
    nodes = ast.toposort()
    inner = [r for r in outs if r not in rows]
    arrays = [u for u in nodes if is_array(u)]
    extents = [math.prod(_const_size(s) for s in u.src[1:] if s.op is Op.RANGE) for u in reduces + fills]
    widest = max([*extents, math.prod(_const_size(r) for r in inner)])
    local = min(renderer.local_max, knob("GPU_LOCAL", GPU_LOCAL), 1 << (widest - 1).bit_length())
    shared = sum(a.arg[1] * a.ptrdtype.base.itemsize for a in arrays) + sum(local * r.dtype.itemsize for r in reduces)
    if shared > renderer.shared_bytes:
        return None
    share = _GroupShare(local, itertools.count(max(r.arg[0] for r in nodes if r.op is Op.RANGE) + 1))
    n_rows = math.prod(_const_size(r) for r in rows)
    group = UOp(Op.SPECIAL, dtypes.index, (UOp.const(dtypes.index, n_rows),), ("gidx0", 0))
    new: dict[UOp, UOp] = {r: (group // math.prod(_size(x) for x in rows[i + 1:])) % _size(r)
                           for i, r in enumerate(rows)}
    for u in nodes:
        if u in new or u.op is Op.SINK or (u.op is Op.END and u in ast.src):
            continue
        if is_array(u):
            new[u] = UOp(Op.DEFINE_LOCAL, u.ptrdtype.base.ptr(u.arg[1], AddrSpace.LOCAL), (), u.arg)
            continue
        src = tuple(new.get(s, s) for s in u.src)
        if u.op is Op.REDUCE:
            new[u] = share.reduce(u, src)
        elif u in fills:
            new[u] = share.fill(u, src)
        elif src != u.src:
            new[u] = u.replace(src=src)
    tops = []
    for top in ast.src:
        store = new.get(top.src[0], top.src[0]) if top.op is Op.END else new.get(top, top)
        step, valid, at = share.strided(inner, AxisType.LOOP)
        store = store.substitute(at)
        tops.append(_ended(store.replace(src=(_gated(store.src[0], valid), *store.src[1:])), step))
    return Plan(UOp(Op.SINK, dtypes.void, tuple(tops)).simplify(), global_size=(n_rows, 1, 1),
                local_size=(local, 1, 1))


def _inline_arrays(ast: UOp) -> UOp:
    """`ast` with every read of a kernel-local array replaced by the value its fill stores there, computed in
    place (a per-item array would recompute the whole array in every work item)."""
    sub: dict[UOp, UOp] = {}
    for u in ast.toposort():
        if u.op is Op.LOAD and is_array(u.src[0].src[0]):
            fill = u.src[1]
            store = fill.src[0] if fill.op is Op.END else fill
            rngs = list(fill.src[1:]) if fill.op is Op.END else []
            sizes = [_size(r) for r in rngs]
            idx = u.src[0].src[1]
            at = {r: (idx // prod(sizes[i + 1:])) % sizes[i] for i, r in enumerate(rngs)}
            sub[u] = store.src[1].substitute(sub).substitute(at)
    return ast.substitute(sub).simplify() if sub else ast


def _flatten_outputs(ast: UOp, outs: list[UOp], index: UOp) -> UOp:
    """`ast` with each output range rebuilt from one flat `index` over the outputs (row-major)."""
    sizes = [_size(r) for r in outs]
    ast = ast.substitute({r: (index // prod(sizes[i + 1:])) % sizes[i] for i, r in enumerate(outs)})
    # the ENDs now close nothing: keep only their stores
    return UOp(Op.SINK, dtypes.void, tuple(t.src[0] if t.op is Op.END else t for t in ast.src))


def _group_reduce_plan(ast: UOp, outs: list[UOp], renderer: Renderer) -> Plan | None:
    nodes = ast.toposort()
    reduces = [u for u in nodes if u.op is Op.REDUCE]
    if len(reduces) != 1 or any(r.src[0].op is not Op.CONST for r in outs + list(reduces[0].src[1:])):
        return None
    red, n = reduces[0], math.prod(_size(r) for r in outs)
    split = max(red.src[1:], key=_size)
    size, local = _size(split), min(renderer.local_max, GROUP_SIZE)
    # a CPU device's threads are kept busy by one item per output (its loop vectorized) once there are a few
    # outputs per thread; its barriers cost more than a GPU's (measured on PoCL: 640 outputs of 256 terms
    # each, 1.4 ms as groups, 16 us as items)
    threads = renderer.cpu_threads
    most = min(GROUP_MAX_OUTPUTS, CPU_GROUPS_PER_THREAD * threads - 1) if threads else GROUP_MAX_OUTPUTS
    if n > most or size < GROUP_MIN_REDUCE or red.arg not in (Op.ADD, Op.MAX, Op.MUL):
        return None
    lid = UOp(Op.SPECIAL, dtypes.index, (UOp.const(dtypes.index, local),), ("lidx0", 0))
    group = UOp(Op.SPECIAL, dtypes.index, (UOp.const(dtypes.index, n),), ("gidx0", 0))
    ids = [r.arg[0] for r in nodes if r.op is Op.RANGE]
    strided = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, -(-size // local)),),
                  (max(ids) + 1, AxisType.REDUCE))
    pos = strided * local + lid
    body = red.src[0].substitute({split: pos})
    if size % local:  # the last stride runs past the end: those items fold the identity
        body = (pos < size).where(body, UOp.const(red.dtype, identity_element(red.arg, red.dtype)))
    partial = UOp(Op.REDUCE, red.dtype, (body, *(strided if r is split else r for r in red.src[1:])), red.arg)
    temp = UOp(Op.DEFINE_LOCAL, red.dtype.ptr(local, AddrSpace.LOCAL), (), ("temp0", local))
    barrier = UOp(Op.BARRIER, dtypes.void, (UOp(Op.STORE, dtypes.void, (UOp(Op.INDEX, temp.dtype, (temp, lid)),
                                                                      partial)),))
    slot = UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, local),), (max(ids) + 2, AxisType.REDUCE))
    total = UOp(Op.REDUCE, red.dtype, (UOp(Op.LOAD, red.dtype, (UOp(Op.INDEX, temp.dtype, (temp, slot)), barrier)),
                                       slot), red.arg)
    ast = _flatten_outputs(ast.substitute({red: total}), outs, group)
    first = lid.eq(0)  # every item computes the total; the first one stores it
    stores = {u: u.replace(src=(u.src[0].replace(src=(*u.src[0].src, first)), u.src[1]))
              for u in ast.toposort() if u.op is Op.STORE and u.src[0].src[0].op is Op.PARAM}
    return Plan(ast.substitute(stores).simplify(), global_size=(n, 1, 1), local_size=(local, 1, 1))
