"""matmul: the CPU plan of a matmul-shaped kernel (docs/performance.md, "Matmul on CPU").

A kernel is matmul-shaped when its one store holds one sum over one range `k` of a product of two loads, `A`
depending on an output range `m` and not on the innermost output range `n`, `B` on `n` and not on `m`
(A[m, k] * B[k, n] in any layout: transposed operands, batch ranges, an epilogue around the sum). Its plan is
the standard one of BLAS libraries, built from the IR's own nodes:

- **Micro-kernel**: a register tile of MR rows x NR columns, NR a whole number of vectors of the width the
  compiler targets (`Renderer.vector_bytes`), MR as many rows as the remaining vector registers hold
  accumulators for (`Renderer.vector_registers`, one left to the compiler), the shape that loads the fewest
  values per FMA (`register_tile`: AVX2 6 x 2 vectors, AVX-512 6 x 4). Each step of `k` loads NR/W vectors of
  B, broadcasts MR values of A and folds MR x NR/W products (FMA: tolk_cpu's renderer).
- **Packed panel**: the columns are cut into panels of NC columns; each panel's K x NC slice of B is copied
  once, micro-panel by micro-panel (NR columns, k-major), into a kernel-local array sized to the L2 cache (half
  of it when k is not blocked; `Renderer.cache_bytes`; at most `PANEL_MOST`: the array is on the thread's
  stack), so the micro-kernel reads B contiguously from L2 for every row of A, whatever B's layout (B
  transposed included) and without a TLB miss per row of B. A B stored along k (`x @ W.T`) is copied a run of
  16 k per column at a time, one cache line of W read whole (`_k_run`).
- **K-blocking**: the sum over k is cut into blocks of KC (`k_block`: a divisor of K, the MR x KC sliver of A
  in a quarter of the L1 cache; K = 2048 on a 32 KiB L1: 256). A kernel's stores are final, so the partial sums
  live in a kernel-local C block of MR x NC values instead of the output: for each block of k, every
  micro-panel's tile sums its KC products in registers and adds them to its part of the block (the first block
  reads nothing: a gated load), so the A sliver is read from L1 by every micro-panel of the panel; after the
  last block the epilogue and the stores read the C block. Without a divisor in range (a prime K) the tile
  sums the whole K, as for a K within the bound.
- **Loops**: batch ranges, then panels (jc), then rows of tiles (ir), then blocks of k (pc) and the panel's
  micro-panels (jr), then k. The outermost loop with several iterations runs on threads (panels have private
  arrays; with one panel the rows share it). Read in place, B is cut into at least `DIRECT_PANELS` column
  blocks, so the threads share out units small enough for one that starts late (`_narrowed`).
- **Sizes that do not fill a tile**: the last tile of a row or column is moved back to end at the last row or
  column (it overlaps its neighbour, which computes the same values), so every tile is whole and no tail loop
  is needed; a matrix narrower than one vector keeps the generic plan.

- **Dot plan** (`dot_plan`): where B is contiguous along k only (`x @ W.T`, W stored out x in as nn.Linear keeps
  it), A has few rows (`MATMUL_DOT_ROWS`) and B is past the L1 cache, copying all of B into panels costs more
  than the product it serves (a 1 x 512 x 512 product spent 440 us packing B for 0.5 MFLOP). Each output is
  then a dot product of two rows read in place, in vector lanes along k, an MR x NR tile of them per loop
  step, each folded across its lanes after the loop.

For a large K the unblocked panel narrows to fit the L2 cache, then the micro-panel (fewer vectors per row);
past K = L2 / (2 x W x itemsize) B is read in place (where it is contiguous along the row), as it is when the
whole of B fits half the L2 cache (`plan`). A is read in place (MR rows at a time), not packed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tolk_core.codegen.choices import knob
from tolk_core.codegen.upcast import lane_index_split, lanes_are_contiguous, vectorize_lanes
from tolk_core.ir.dtype import AddrSpace, dtypes
from tolk_core.ir.ops import AxisType, Op
from tolk_core.ir.uop import UOp
from tolk_core.render.host import DEFAULT

# knobs (codegen/choices.py); 0: sized from the machine as the module docstring says
MATMUL_MR = 0          # rows of the register tile
MATMUL_NR_VECTORS = 0  # vectors per row of the register tile (NR = this x lanes)
VECTORS_MOST = 4       # vectors per row of the tile at most
MATMUL_NC = 0          # columns of a packed panel of B
MATMUL_KC = 0          # depth of a block of k at most (0: from the L1 cache)
MATMUL_PACK_B = 0      # 1: copy B into panels even when it fits half the L2 cache (0: read it in place then)
MATMUL_DOT_ROWS = 32   # rows at most for the dot plan (B contiguous along k only); 0: never the dot plan
PANEL_MOST = 512 << 10  # bytes of a panel at most: it is a stack array of each thread (2 MiB stacks at least)
MR_MOST = 12           # rows of the tile at most (one broadcast A value per row and step)
DIRECT_PANELS = 8      # column blocks at least of a plan that reads B in place: units of work for the threads
PACK_K_RUN = 16        # k copied per column at a time into a panel when B is contiguous along k (`_k_run`)
_DTYPES = (dtypes.float32, dtypes.float64)


@dataclass(frozen=True)
class MatmulShape:
    """The parts of a matmul-shaped kernel (module docstring): its store and sum, the two loads, the ranges."""
    store: UOp
    red: UOp
    a: UOp
    b: UOp
    k: UOp
    m: UOp | None  # None: one row (a vector times a matrix), no range of its own
    n: UOp
    outer: tuple[UOp, ...]

    @property
    def rows(self) -> int:
        return 1 if self.m is None else self.m.src[0].arg


def _deps(u: UOp) -> set[UOp]:
    return {x for x in u.toposort() if x.op is Op.RANGE}


def _plain_load(u: UOp) -> bool:
    return u.op is Op.LOAD and len(u.src) == 1 and u.src[0].op is Op.INDEX and len(u.src[0].src) == 2 and \
        u.src[0].src[0].op is Op.PARAM


def match(ast: UOp, outs: list[UOp]) -> MatmulShape | None:
    """The matmul shape of kernel `ast` (output ranges `outs`, outermost first), or None."""
    nodes = ast.toposort()
    stores = [u for u in nodes if u.op is Op.STORE]
    reduces = [u for u in nodes if u.op is Op.REDUCE]
    if len(stores) != 1 or len(reduces) != 1 or not outs or any(r.src[0].op is not Op.CONST for r in outs):
        return None
    red = reduces[0]
    if red.arg is not Op.ADD or red.dtype not in _DTYPES or len(red.src) != 2 or red.src[1].op is not Op.RANGE \
            or red.src[1].src[0].op is not Op.CONST or red.src[0].op is not Op.MUL or \
            not all(_plain_load(x) for x in red.src[0].src):
        return None
    out = stores[0].src[0].src[0]
    if any(u.op is Op.LOAD and u.src[0].src[0] is out for u in nodes):
        return None  # reads its output (an in-place update): the overlapping edge tiles would read new values
    k, n = red.src[1], outs[-1]
    x, y = red.src[0].src
    b, a = (x, y) if n in _deps(x) else (y, x)
    da, db = _deps(a), _deps(b)
    if n in da or n not in db or k not in da or k not in db or a.dtype != red.dtype or b.dtype != red.dtype:
        return None
    m = next((r for r in reversed(outs[:-1]) if r in da and r not in db), None)
    if m is None and any(r in da for r in outs):
        return None  # A varies along the batch only: no row of its own
    return MatmulShape(stores[0], red, a, b, k, m, n, tuple(r for r in outs if r not in (m, n)))


@dataclass(frozen=True)
class Tile:
    """Sizes of the plan: lanes W, register tile MR x NR, panel columns NC, panels."""
    w: int
    mr: int
    nr: int
    nc: int
    panels: int
    packed: bool = True  # False: a micro-panel of B would not fit half the L2 cache, B is read in place
    kc: int = 0          # depth of a block of k (0: not blocked, the tile sums the whole K at once)


def tile_sizes(mm: MatmulShape, vector_bytes: int, registers: int, l2: int, l1: int = 0) -> Tile | None:
    """The plan's sizes for `mm` on a machine with `registers` vectors of `vector_bytes`, `l2` bytes of L2 and
    `l1` of L1 (module docstring), or None when a row is narrower than a vector."""
    item = mm.red.dtype.itemsize
    w, size_m, size_n, size_k = vector_bytes // item, mm.rows, mm.n.src[0].arg, mm.k.src[0].arg
    if w < 2 or size_n < w:
        return None
    vectors, _ = register_tile(registers, size_n // w)
    vectors = min(knob("MATMUL_NR_VECTORS", MATMUL_NR_VECTORS) or vectors, size_n // w)
    budget = min((l2 or DEFAULT.l2) // 2, PANEL_MOST)
    while vectors > 1 and size_k * vectors * w * item > budget:  # a long k: narrower micro-panels fit
        vectors -= 1
    nr, mr = vectors * w, min(knob("MATMUL_MR", MATMUL_MR) or _rows_for(registers, vectors), size_m)
    if size_k * nr * item > budget:  # not even one vector's micro-panel: B is read in place
        return Tile(w, mr, nr, nr, -(-size_n // nr), packed=False)
    kc = k_block(size_k, mr, item, l1)
    if kc:  # a block of k reads KC x NC of the panel: the whole panel may fill the L2 cache
        budget = min(l2 or DEFAULT.l2, PANEL_MOST)
    widest = knob("MATMUL_NC", MATMUL_NC) or budget // (size_k * item)
    micro = -(-size_n // nr)                             # micro-panels covering the row
    per_panel = max(1, min(micro, widest // nr))
    panels = -(-micro // per_panel)
    if 1 < panels < DIRECT_PANELS and not knob("MATMUL_NC", MATMUL_NC):
        # the panels are what the threads share out: as for B read in place (`_narrowed`), a few wide ones left
        # a thread idle at the end (128 x 384 x 1536, two threads: 5 panels 110 GFLOP/s, 6 123, 8 148). A power
        # of two (teams are two, four, eight threads: three panels keep one of two threads idle for a third of
        # the time), with two micro-panels each at least: the tile's sliver of A, brought into L1 by the first,
        # serves the second
        most = min(micro // 2, DIRECT_PANELS)
        panels = max(panels, 1 << (most.bit_length() - 1) if most else 1)
    per_panel = -(-micro // panels)                      # the same count in every panel, as even as it gets
    return Tile(w, mr, nr, per_panel * nr, -(-micro // per_panel), kc=kc)


def k_block(size_k: int, mr: int, item: int, l1: int) -> int:
    """The depth of a block of k (module docstring): the largest divisor of K whose MR-row sliver of A fills at
    most a quarter of the L1 cache (the rest holds the streamed B and the C block), and not under half that
    bound; 0 (the tile sums the whole K) when K is within the bound or has no such divisor."""
    most = knob("MATMUL_KC", MATMUL_KC) or (l1 or DEFAULT.l1) // (4 * mr * item)
    if size_k <= most:
        return 0
    return next((d for d in range(most, most // 2, -1) if size_k % d == 0), 0)


def _rows_for(registers: int, vectors: int) -> int:
    """Rows of a tile `vectors` wide: accumulators for each, plus a register per B vector, one for the broadcast
    A value and one left to the compiler. A tile that claims every register is loaded through memory operands:
    gcc 12 gave the 4 x 3-vector AVX2 tile (12 + 3 + 1 = 16 `ymm`) 12 vector loads of B per step instead of 3,
    more loads than Zen 3's two vector load ports issue beside 12 FMAs (docs/performance.md, "Matmul on CPU")."""
    return max(1, min(MR_MOST, (registers - vectors - 2) // vectors))


def register_tile(registers: int, most_vectors: int) -> tuple[int, int]:
    """(vectors per row, rows) of the register tile: of the tiles that fit `registers` (`_rows_for`) with at most
    `VECTORS_MOST` (and `most_vectors`) vectors per row, the one loading the fewest values per FMA, (rows +
    vectors) / (rows x vectors), and of those the one with the most accumulators (more independent FMAs in
    flight): 16 registers (AVX2) give 6 x 2 vectors, 32 (AVX-512) 6 x 4."""
    widths = range(1, max(1, min(VECTORS_MOST, most_vectors)) + 1)

    def cost(v: int) -> tuple[float, int]:
        rows = _rows_for(registers, v)
        return (rows + v) / (rows * v), -rows * v
    v = min(widths, key=cost)
    return v, _rows_for(registers, v)


def _narrowed(t: Tile, size_n: int) -> Tile:
    """`t` with at least `DIRECT_PANELS` column blocks (or one per micro-panel), for a plan reading B in place.
    Its blocks have no private copy of B, so their width only orders the loops; they are what the threads share
    out one at a time (the outermost loop with several iterations, `schedule(dynamic)`): two blocks for two
    threads ran at one thread's speed when one thread started late (a worker woken after Python ran between
    kernels, ~0.1 ms on the virtual machines measured), where with eight the thread that started takes more. One
    block stays one: the threads then share the rows of tiles, finer still."""
    if t.panels == 1:
        return t
    micro = -(-size_n // t.nr)
    panels = min(micro, max(t.panels, DIRECT_PANELS))
    per_panel = -(-micro // panels)
    return Tile(t.w, t.mr, t.nr, per_panel * t.nr, -(-micro // per_panel), packed=t.packed, kc=t.kc)


def _range(i: int, size: int, kind: AxisType) -> UOp:
    return UOp(Op.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (i, kind))


def _clamped(start: UOp, last: int) -> UOp:
    """min(start, last): a tile past the end moves back to end at the end."""
    return start.minimum(UOp.const(dtypes.index, last))


def plan(ast: UOp, outs: list[UOp], vector_bytes: int, registers: int, l2: int, l1: int = 0) -> UOp | None:
    """`ast` rebuilt as the module docstring's plan (vector lanes expanded), or None when it is not
    matmul-shaped or the plan does not apply. B is read in place where it is contiguous along the row and a
    copy would not pay: with one row of tiles (M <= MR: a matrix-vector product) each value of B is read once,
    and a B that fits half the L2 cache stays there for every row of tiles, so its copy is only a serial pass
    before the threads start (N = 256, two threads: 131 GFLOP/s packed, 146-153 in place; N = 384, 576 KiB of
    B on a 512 KiB L2: 171 packed, 156 in place). Knob MATMUL_PACK_B = 1 packs it anyway."""
    if (mm := match(ast, outs)) is None:
        return None
    b_bytes = mm.k.src[0].arg * mm.n.src[0].arg * mm.red.dtype.itemsize
    if (t := tile_sizes(mm, vector_bytes, registers, l2, l1)) is not None:
        in_l2 = not knob("MATMUL_PACK_B", MATMUL_PACK_B) and b_bytes <= (l2 or DEFAULT.l2) // 2
        if (mm.rows <= t.mr or not t.packed or in_l2) and \
                (direct := _build(ast, mm, _narrowed(t, mm.n.src[0].arg), packed=False)) is not None:
            return direct
    # the dot plan where copying B would cost: a B within the L1 cache packs in no time (and a tiny product's
    # dot plan is mostly lane folds, its short k loop unrolled)
    if mm.rows <= knob("MATMUL_DOT_ROWS", MATMUL_DOT_ROWS) and b_bytes > (l1 or DEFAULT.l1) and \
            (dot := dot_plan(ast, mm, vector_bytes, registers)) is not None:
        return dot
    return _build(ast, mm, t, packed=True) if t is not None and t.packed else None


def _panel_read(mm: MatmulShape, t: Tile, jc: UOp, jr: UOp, ids: Iterator[int]) -> Callable[[UOp], UOp]:
    """The packed panel of B (module docstring) for panel `jc`: a function of the column `c` within micro-panel
    `jr` (a lane expression) giving the panel's load of B[k, that column]."""
    size_k = mm.k.src[0].arg
    run = _k_run(mm, ids)
    loops: tuple[UOp, ...]
    if run > 1:  # B contiguous along k (x @ W.T): each column's run of k read whole, then the next column's
        pj, pko, pl, pki = (_range(next(ids), s, AxisType.LOCAL) for s in (t.nc // t.nr, size_k // run, t.nr, run))
        pk, loops = pko * run + pki, (pj, pko, pl, pki)
    else:
        pj, pk, pl = (_range(next(ids), s, AxisType.LOCAL) for s in (t.nc // t.nr, size_k, t.nr))
        loops = (pj, pk, pl)
    panel = UOp(Op.DEFINE_REG, mm.b.dtype.ptr(t.nc * size_k, AddrSpace.REG), (), ("panel0", t.nc * size_k))
    col = _clamped(jc * t.nc + pj * t.nr, mm.n.src[0].arg - t.nr) + pl
    fill = UOp(Op.END, dtypes.void, (UOp(Op.STORE, dtypes.void, (
        UOp(Op.INDEX, panel.dtype, (panel, (pj * size_k + pk) * t.nr + pl)), mm.b.substitute({mm.k: pk, mm.n: col}))),
        *loops))
    return lambda c: UOp(Op.LOAD, mm.b.dtype, (UOp(Op.INDEX, panel.dtype, (panel, (jr * size_k + mm.k) * t.nr + c)),
                                               fill))


def _k_run(mm: MatmulShape, ids: Iterator[int]) -> int:
    """How many consecutive k the panel's fill copies per column before the next column: PACK_K_RUN (a cache
    line of float32) where B is contiguous along k and K a multiple of it, else 1 (one k for all the panel's
    columns: contiguous when B is contiguous along the row). Column by column within each k, a B stored along k
    (`x @ W.T`, W as nn.Linear keeps it) is read at a stride of K, one cache line per value: the fill of a
    128 x 1536 x 384 product took a third of its time (one thread: 2.52 ms, 1.51 with runs of 16)."""
    size_k = mm.k.src[0].arg
    run = next((r for r in (PACK_K_RUN, PACK_K_RUN // 2, PACK_K_RUN // 4) if r > 1 and size_k % r == 0), 1)
    if run == 1:
        return 1
    probe = _range(next(ids), run, AxisType.LANE)
    idx = mm.b.src[0].src[1].substitute({mm.k: mm.k + probe}).simplify()
    return run if lane_index_split(idx, probe) is not None else 1


def _blocked_sum(mm: MatmulShape, t: Tile, jc: UOp, row0: UOp, lane: UOp, ids: Iterator[int]) \
        -> Callable[[int, int, UOp], UOp]:
    """The C block (module docstring, "K-blocking"): a kernel-local MR x NC array that adds up the tile's
    products one block of k at a time, every micro-panel of the panel per block; a function of (row, vector,
    micro-panel `jr`) giving the load of the block's final sum there, after the fill."""
    dtype = mm.red.dtype
    pc = _range(next(ids), mm.k.src[0].arg // t.kc, AxisType.LOCAL)
    jq = _range(next(ids), t.nc // t.nr, AxisType.LOCAL)
    kk = _range(next(ids), t.kc, AxisType.REDUCE)
    read_b = _panel_read(mm, t, jc, jq, ids)
    block = UOp(Op.DEFINE_REG, dtype.ptr(t.mr * t.nc, AddrSpace.REG), (), ("cblock0", t.mr * t.nc))
    at = lambda i, c, jr: (jr * t.nr + i * t.nc + c * t.w) + lane  # noqa: E731 - lane last: a vector access
    summed = pc.ne(0)  # blocks summed before this one (the first reads nothing: a gated load gives 0)
    stores = []
    for i in range(t.mr):
        for c in range(t.nr // t.w):
            prod = mm.red.src[0].substitute({mm.b: read_b(c * t.w + lane)})
            prod = prod.substitute({mm.k: pc * t.kc + kk} | ({} if mm.m is None else {mm.m: row0 + i}))
            # the block's sum first: the loaded running sum is not held in a register across the k loop
            prev = UOp(Op.LOAD, dtype, (UOp(Op.INDEX, block.dtype, (block, at(i, c, jq), summed)),))
            stores.append(UOp(Op.STORE, dtypes.void, (UOp(Op.INDEX, block.dtype, (block, at(i, c, jq))),
                                                      mm.red.replace(src=(prod, kk)) + prev)))
    fill = UOp(Op.END, dtypes.void, (UOp(Op.SINK, dtypes.void, tuple(stores)), pc, jq))
    return lambda i, c, jr: UOp(Op.LOAD, dtype, (UOp(Op.INDEX, block.dtype, (block, at(i, c, jr))), fill))


def _fresh_ids(ast: UOp) -> Iterator[int]:
    """Range ids no range of `ast` uses, for the plan's new loops."""
    return iter(range(1 + max(u.arg[0] for u in ast.toposort() if u.op is Op.RANGE), 1 << 30))


def _with_tops(ast: UOp, mm: MatmulShape, tops: list[UOp], lane: UOp, w: int, arrays: bool) -> UOp | None:
    """`ast` with the top holding the matmul's store replaced by a plan's `tops`, its `lane` placeholder made
    `w` vector lanes; None when some access (kernel-local arrays too with `arrays`) is not contiguous in them."""
    top = next(u for u in ast.src if mm.store in u.toposort())
    new = UOp(Op.SINK, dtypes.void, (*(u for u in ast.src if u is not top), *tops)).simplify()
    if not lanes_are_contiguous(new, lane, arrays=arrays):
        return None
    return vectorize_lanes(new, lane, w)


def _build(ast: UOp, mm: MatmulShape, t: Tile, packed: bool) -> UOp | None:
    """The plan's loops (module docstring) around MR x NR/W copies of the store, B read from the packed panel
    or (`packed` False) in place, the sum blocked over k where `t.kc` says (packed only); None when some access
    is not contiguous in the lanes."""
    size_m, size_n = mm.rows, mm.n.src[0].arg
    ids = _fresh_ids(ast)
    jc, ir, jr = (_range(next(ids), s, AxisType.LOOP) for s in (t.panels, -(-size_m // t.mr), t.nc // t.nr))
    lane = _range(next(ids), t.w, AxisType.LANE)
    row0 = _clamped(ir * t.mr, size_m - t.mr)
    col0 = _clamped(jc * t.nc + jr * t.nr, size_n - t.nr)
    blocked = _blocked_sum(mm, t, jc, row0, lane, ids) if packed and t.kc else None
    read_b = _panel_read(mm, t, jc, jr, ids) if packed and blocked is None else None
    tops = []
    for i in range(t.mr):
        for c in range(t.nr // t.w):
            store = mm.store
            if blocked is not None:
                store = store.substitute({mm.red: blocked(i, c, jr)})
            elif read_b is not None:
                red = mm.red.replace(src=(mm.red.src[0].substitute({mm.b: read_b(c * t.w + lane)}), mm.k))
                store = store.substitute({mm.red: red})
            at = {mm.n: col0 + c * t.w + lane} | ({} if mm.m is None else {mm.m: row0 + i})
            store = store.substitute(at)
            tops.append(UOp(Op.END, dtypes.void, (store, *mm.outer, jc, ir, jr)))
    return _with_tops(ast, mm, tops, lane, t.w, arrays=True)


def dot_tile(rows: int, cols: int, registers: int) -> tuple[int, int]:
    """(rows, columns) of the dot plan's register tile: MR x NR accumulators, each a vector along k, beside MR
    vectors of A, one of B and one left to the compiler; of the tiles that fit (at most 8 a side, no more than
    the matrix has), the one loading the fewest vectors per FMA, (MR + NR) / (MR x NR), then the most
    accumulators: 16 registers (AVX2) give 2 x 6, 32 (AVX-512) 5 x 5. On AVX2 (one thread, kernel time)
    2 x 6 beat 3 x 3, 2 x 4 and 1 x 4 at M = 4-32 (16 x 512 x 512: 174 us against 204, 168, 192)."""
    fits = [(mr, nr) for mr in range(1, min(8, rows) + 1) for nr in range(1, min(8, cols) + 1)
            if mr * nr + mr + 2 <= registers]
    return min(fits, key=lambda t: ((t[0] + t[1]) / (t[0] * t[1]), -t[0] * t[1]))


def dot_plan(ast: UOp, mm: MatmulShape, vector_bytes: int, registers: int) -> UOp | None:
    """The dot plan (module docstring) of matmul `mm`: each output a dot product of a row of A and a row of B^T
    in vector lanes along k, a register tile of MR x NR such sums, each folded across its lanes after the loop;
    no copy of B. For B contiguous along k only (`x @ W.T` with W stored out x in, as nn.Linear keeps it) with
    few rows of A, where copying all of B into panels costs more than the product. None when K is not a
    whole number of vectors of at least 4 lanes or A or B is not contiguous along k."""
    size_m, size_n, size_k = mm.rows, mm.n.src[0].arg, mm.k.src[0].arg
    full = vector_bytes // mm.red.dtype.itemsize
    w = next((w for w in (full, full // 2, full // 4) if w >= 4 and size_k % w == 0), 0)
    if not w:
        return None
    mr, nr = dot_tile(size_m, size_n, registers)
    ids = _fresh_ids(ast)
    # columns outermost: a tile's NR rows of B stay in L1 while every row of tiles reads them (A is small)
    jr, ir = (_range(next(ids), s, AxisType.LOOP) for s in (-(-size_n // nr), -(-size_m // mr)))
    kk, lane = _range(next(ids), size_k // w, AxisType.REDUCE), _range(next(ids), w, AxisType.LANE)
    red = mm.red.replace(src=(mm.red.src[0].substitute({mm.k: kk * w + lane}), kk, lane))
    row0, col0 = _clamped(ir * mr, size_m - mr), _clamped(jr * nr, size_n - nr)
    tops = []
    for i in range(mr):
        for j in range(nr):
            at = {mm.n: col0 + j} | ({} if mm.m is None else {mm.m: row0 + i})
            tops.append(UOp(Op.END, dtypes.void, (mm.store.substitute({mm.red: red}).substitute(at),
                                                  *mm.outer, jr, ir)))
    return _with_tops(ast, mm, tops, lane, w, arrays=False)
