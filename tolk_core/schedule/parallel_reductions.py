"""parallel_reductions: a kernel computes at most one contraction, and not inside another reduction's operand.

A contraction is a reduction of a product of two stored operands over a long axis: a matmul or a convolution.
Models add them side by side: a ResNet block's last convolution plus its strided shortcut, a GRU's x @ W + h @ U.
Inlined into one kernel, the two sums run one after the other per output element, and codegen's matmul and
convolution plans, which tile one reduction's output into registers, do not apply: resnet50's three shortcut
blocks ran at 5.5 GFLOP/s as such kernels where each convolution alone runs at 50-130 (docs/performance.md,
"Pretrained models"). Storing all but the costliest one gives each its own plan; the kept one reads the others'
results in its epilogue, one load per output element each.

A contraction the kernel reads through several slices is several sums side by side as well (a GRU cell's gates
cut from one h @ W_hh^T), and is stored.

A contraction inside a plain reduction's operand is stored too: resnet50's global average pool summed its last
convolution's outputs as they were computed, one scalar dot product each, at 3.4 GFLOP/s (30.7 ms of 128 at
batch 1); stored, the convolution gets its plan and the pool reads 49 values per channel. A contraction inside
another contraction's operand stays (attention's scores inside its weighted sum are the row fusion's), as do
plain sums over the same data (a sum and a sum of squares), where one pass over the data serves both. A value
is stored only where a heuristic cap may store it (`placements.Provenance.PARALLEL_REDUCTION`, which
`decide_inline` lifts), so a row the row fusion has settled is left to it.
"""
from __future__ import annotations

from collections.abc import Callable, Container

from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, prod

# a reduction folding fewer elements per output than this costs less than the store and load it would add
MIN_EXTENT = 16


def _extent(r: UOp) -> int | None:
    shape = r.src[0].shape
    if shape is None:
        return None
    n = prod(shape[a] for a in r.arg[1])
    return n if isinstance(n, int) else None


def _reads_storage(u: UOp, body: Callable[[UOp], list[UOp]], realized: Container[UOp]) -> bool:
    if u in realized or u.op is Op.BUFFER:
        return True
    return any(s in realized or s.op is Op.BUFFER for v in body(u) for s in v.src)


def is_contraction(r: UOp, body: Callable[[UOp], list[UOp]], realized: Container[UOp]) -> bool:
    """Whether reduction `r` sums a product of two operands that both read stored data, over at least
    MIN_EXTENT elements per output."""
    if r.op is not Op.REDUCE_AXIS or r.arg[0] is not Op.ADD or (n := _extent(r)) is None or n < MIN_EXTENT:
        return False
    x = r.src[0]
    while x.op is Op.CAST:
        x = x.src[0]
    return x.op is Op.MUL and all(_reads_storage(s, body, realized) for s in x.src)


def to_store(root: UOp, body: Callable[[UOp], list[UOp]], realized: Container[UOp]) -> list[UOp]:
    """The contractions of the kernel computing `root` to store: those read through several slices (`_sliced`),
    those inside the operand of a plain reduction (not a contraction itself), and of its outermost contractions
    (inside no other reduction's operand) all but the one of most work. `body(u)` is the unstored body of a
    kernel computing `u` (u included), stopping at `realized` values."""
    nodes = body(root)
    reds = [u for u in nodes if u.op is Op.REDUCE_AXIS]
    if not reds:
        return []
    contractions = {r for r in reds if is_contraction(r, body, realized)}
    out = _sliced(nodes, contractions, body)
    if len(reds) < 2:
        return out
    inner = {r: [v for v in body(r) if v is not r and v.op is Op.REDUCE_AXIS] for r in reds}
    out += [v for r in reds if r not in contractions for v in inner[r] if v in contractions]
    nested = {v for vs in inner.values() for v in vs}
    outer = [r for r in reds if r not in nested and r in contractions]
    if len(outer) >= 2:
        keep = max(outer, key=lambda r: (_extent(r) or 0) * (r.size if isinstance(r.size, int) else 0))
        out += [r for r in outer if r is not keep]
    return list(dict.fromkeys(out))


def _sliced(nodes: list[UOp], contractions: set[UOp], body: Callable[[UOp], list[UOp]]) -> list[UOp]:
    """The contractions under a value of the kernel body `nodes` that the kernel reads through two or more
    different slices (SHRINKs of it): each slice sums its own part of the output, so the kernel holds one sum
    per slice side by side, as if they were different contractions. A GRU cell's three gates cut from
    h @ W_hh^T ran as three scalar dot products per output at 9 GFLOP/s; stored, the product is one matmul and
    the cell's kernel reads its three slices."""
    if not contractions:
        return []
    cuts: dict[UOp, set] = {}
    for u in nodes:
        if u.op is Op.SHRINK:
            cuts.setdefault(u.src[0], set()).add(u.arg)
    return [r for v, args in cuts.items() if len(args) > 1 for r in body(v) if r in contractions]
