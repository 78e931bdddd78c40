"""profile: where the time goes, per kernel, and how much of each kernel's work is recomputation.

`with tolk_core.profile() as prof: ...` records every kernel launched inside the block (by `run_linear` and by
the JIT's replay) with the time it took; afterwards `prof.rows` holds one `ProfileRow` per kernel (aggregated
over its launches, the most expensive first) and `prof.table()` renders them as text. Profiles are per thread
of control (a context variable) and nest: a launch is recorded by every profile open around it. While a
profile is open every launch waits for the device (the time is the program's own when it reports one, else
the wall time of the call); a JIT's graph batch launches its kernels one by one (the Graph contract says that
gives its results), so each kernel gets its own time and the batch's saved launch overhead is not measured.

The counts come from the kernel, not from timers (docs/performance.md, "Profiling"):

- executed operations: counted on the kernel AST as rangeify lowered it (before codegen's optimizations), on
  the loop nest it states. The ranges an END or a REDUCE closes are loops nested in the order listed, the
  first of them inside the loops that END or REDUCE itself is evaluated in (the output loops of the kernel's
  END are outermost; a reduction's loops open where its value is needed). A node is evaluated inside the
  innermost loop among the ranges it depends on: once per iteration of that loop and of every loop enclosing
  it; a node that depends on no range runs once. Each ALU op and CAST counts one operation per evaluation, a
  REDUCE one per iteration of its own loops (the element it folds in); address arithmetic (index-typed values
  and constants, and the boolean masks computed from them) and the zero a padded view selects where it is
  padding are not counted. Sizes are evaluated with the launch's Variable values.
- FLOPs: the executed ALU ops and REDUCEs on floats (a float result, or a comparison of floats); casts are not.
- bytes: per buffer the kernel reads, and per buffer it writes, the elements its loads (stores) touch, counted
  like operations and capped at the buffer's size: an upper bound on the distinct bytes the kernel moves
  (a matmul's inputs count once, not once per use; a cache that misses moves more).
- nominal operations: what the tensor ops the kernel implements stand for, each computed once by its distinct
  values (`KernelInfo`, from the tensor graph before lowering, `schedule/work.py`). `work ratio` = executed /
  nominal; 1.0 when nominal is 0 (a copy). Above 1, the kernel recomputes values its fusion inlined (once per
  iteration of a loop they do not depend on); below 1, lowering folded operations away.

A kernel given as code (`custom_kernel`) has no AST to count: its rows have launches and time, no counts.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tolk_core.codegen.linearize import range_deps
from tolk_core.engine import viz
from tolk_core.engine.scoped import Scopes
from tolk_core.ir.calls import KernelInfo
from tolk_core.ir.dtype import PtrDType, dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp, sint

_NO_INFO = KernelInfo()


# ---------------------------------------------------------------------------------------------- counting
@dataclass(frozen=True)
class KernelCost:
    """The executed work of one kernel AST as terms over its loop nest (module docstring): `ops` and `flops`
    are (loop sizes, count) pairs, `accesses` are (loop sizes, bytes per element, elements of the buffer or
    None, (slot, is_store)) per load and store of a buffer. `at(var_vals)` evaluates them."""
    ops: tuple[tuple[tuple[sint, ...], int], ...]
    flops: tuple[tuple[tuple[sint, ...], int], ...]
    accesses: tuple[tuple[tuple[sint, ...], int, int | None, tuple[int, bool]], ...]

    def at(self, var_vals: dict[str, int]) -> tuple[int, int, int]:
        """(executed operations, FLOPs, bytes) at these Variable values."""
        def n(sizes: tuple[sint, ...]) -> int:
            return int(math.prod(s if isinstance(s, int) else s.eval(var_vals) for s in sizes))  # ints by now
        touched: dict[tuple[int, bool], list] = {}
        for sizes, item, cap, key in self.accesses:
            t = touched.setdefault(key, [0, item, cap])
            t[0] += n(sizes)
        nbytes = sum(item * (e if cap is None else min(e, cap)) for e, item, cap in touched.values())
        return sum(n(s) * c for s, c in self.ops), sum(n(s) * c for s, c in self.flops), nbytes


def _addressing(u: UOp, addr: set[UOp]) -> bool:
    """Whether `u` is address arithmetic: an index-typed value or constant, or a boolean ALU op over those."""
    if u.dtype == dtypes.index or u.op in (Op.RANGE, Op.SPECIAL, Op.CONST, Op.DEFINE_VAR):
        return True
    return u.op in GroupOp.ALU and dtypes.is_bool(u.dtype) and bool(u.src) and all(s in addr for s in u.src)


def _loop_nest(ast: UOp) -> tuple[dict[UOp, frozenset[UOp]], Callable[[frozenset[UOp]], frozenset[UOp]]]:
    """The ranges each node depends on, and `scope(ranges)`: those ranges with every range enclosing them."""
    deps = range_deps(ast)
    closer: dict[UOp, tuple[UOp, int]] = {}  # range -> (the REDUCE or END closing it, its position there)
    for u in ast.toposort():
        if u.op in (Op.REDUCE, Op.END):
            for i, r in enumerate(u.src[1:]):
                if r.op is Op.RANGE:
                    closer.setdefault(r, (u, i))
    memo: dict[UOp, frozenset[UOp]] = {}

    def enclosing(r: UOp) -> frozenset[UOp]:  # r and the ranges whose loops enclose its loop
        if (hit := memo.get(r)) is None:
            out = {r}
            if (c := closer.get(r)) is not None:
                node, i = c
                out |= scope(deps[node])
                out |= scope(frozenset(s for s in node.src[1:1 + i] if s.op is Op.RANGE))
            hit = memo[r] = frozenset(out)
        return hit

    def scope(ranges: frozenset[UOp]) -> frozenset[UOp]:
        return frozenset().union(*(enclosing(r) for r in ranges))
    return deps, scope


def _sizes(scope: frozenset[UOp]) -> tuple[sint, ...]:
    """The trip counts of the loops in `scope` (their product is what counts: the order is any)."""
    return tuple(r.src[0].arg if r.src[0].op is Op.CONST else r.src[0] for r in scope)


def _is_flop(u: UOp) -> bool:
    """Whether counted node `u` is a floating-point operation (a float result or a comparison of floats)."""
    return u.op is not Op.CAST and (dtypes.is_float(u.dtype) or (u.op in GroupOp.Comparison and
                                                                  dtypes.is_float(u.src[0].dtype)))


def _term(terms: dict[frozenset[UOp], int], scope: frozenset[UOp]) -> None:
    terms[scope] = terms.get(scope, 0) + 1


def _count(ast: UOp) -> KernelCost:
    """The KernelCost of kernel SINK `ast`: one term per counted node and per buffer access."""
    deps, scope = _loop_nest(ast)
    addr: set[UOp] = set()
    ops: dict[frozenset[UOp], int] = {}  # loops a counted node is evaluated in -> how many such nodes
    flops: dict[frozenset[UOp], int] = {}
    accesses = []
    for u in ast.toposort():
        if _addressing(u, addr):
            addr.add(u)
            continue
        if u.op is Op.REDUCE:
            loops = scope(deps[u] | {r for r in u.src[1:] if r.op is Op.RANGE})
        elif (u.op in GroupOp.ALU and not (u.op is Op.WHERE and u.src[0] in addr)) or u.op is Op.CAST:
            loops = scope(deps[u])
        elif u.op in (Op.LOAD, Op.STORE) and u.src[0].op is Op.INDEX and u.src[0].src[0].op is Op.PARAM:
            p = u.src[0].src[0]
            cap = p.dtype.size if isinstance(p.dtype, PtrDType) and p.dtype.size >= 0 else None
            accesses.append((_sizes(scope(deps[u])), p.dtype.itemsize, cap, (p.arg, u.op is Op.STORE)))
            continue
        else:
            continue
        _term(ops, loops)
        if _is_flop(u):
            _term(flops, loops)
    return KernelCost(tuple((_sizes(k), n) for k, n in ops.items()), tuple((_sizes(k), n) for k, n in flops.items()),
                      tuple(accesses))


_costs: weakref.WeakKeyDictionary[UOp, KernelCost] = weakref.WeakKeyDictionary()


def kernel_cost(ast: UOp) -> KernelCost:
    """The executed work of kernel SINK `ast` (counted once per AST; see the module docstring)."""
    if (hit := _costs.get(ast)) is None:
        hit = _costs[ast] = _count(ast)
    return hit


def _ast(call: UOp) -> UOp:
    body = call.src[0]
    return body.src[0] if body.op is Op.PROGRAM else body


@dataclass(frozen=True)
class LaunchCost:
    """The work of one launch: executed and nominal operations, FLOPs, bytes; `work_ratio` executed/nominal."""
    executed: int
    nominal: int
    flops: int
    bytes: int

    @property
    def work_ratio(self) -> float:
        return self.executed / self.nominal if self.nominal else 1.0


def launch_cost(call: UOp, var_vals: dict[str, int]) -> LaunchCost:
    """The work of running kernel CALL `call` (a CALL of a SINK or of its PROGRAM) at these Variable values."""
    info = call.arg if isinstance(call.arg, KernelInfo) else _NO_INFO
    executed, flops, nbytes = kernel_cost(_ast(call)).at(var_vals)
    nominal = info.nominal if isinstance(info.nominal, int) else int(info.nominal.eval(var_vals))
    return LaunchCost(executed, nominal, flops, nbytes)


def launch_line(device: str, name: str, gsize: tuple, lsize: tuple | None, seconds: float, cost: LaunchCost) -> str:
    """DEBUG=2's line for one launch: device, kernel, launch sizes, time, GFLOP/s, work ratio."""
    gflops = cost.flops / seconds / 1e9 if seconds > 0 else 0.0
    return (f"*** {device:8s} {name:40s} global={gsize} local={lsize} {seconds * 1e6:9.1f} us "
            f"{gflops:8.2f} GFLOP/s  work x{cost.work_ratio:.2f}")


# ---------------------------------------------------------------------------------------------- recording
@dataclass
class ProfileRow:
    """One kernel of a profile, over all its launches (see the module docstring for each count).

    `total_s`: the launches' time; `share`: its fraction of the profile's kernel time; `flops`, `bytes`,
    `executed`, `nominal`: totals over the launches; `gflops`, `gbs`: achieved rates over `total_s`; `ops`: the
    tensor ops the kernel implements ("MUL x2, ADD, REDUCE_AXIS(ADD)"); `work_ratio`: executed / nominal."""
    name: str
    device: str
    launches: int = 0
    total_s: float = 0.0
    share: float = 0.0
    flops: int = 0
    bytes: int = 0
    executed: int = 0
    nominal: int = 0
    ops: str = ""

    @property
    def gflops(self) -> float:
        return self.flops / self.total_s / 1e9 if self.total_s > 0 else 0.0

    @property
    def gbs(self) -> float:
        return self.bytes / self.total_s / 1e9 if self.total_s > 0 else 0.0

    @property
    def work_ratio(self) -> float:
        return self.executed / self.nominal if self.nominal else 1.0


@dataclass(frozen=True)
class Launch:
    """One launch of a profile kept launch by launch (`profile(trace=...)`): its kernel, device, end on the
    host clock (`time.perf_counter()` when the launch returned) and duration in seconds, and its cost."""
    name: str
    device: str
    end_s: float
    seconds: float
    cost: LaunchCost


@dataclass
class Profile:
    """What one `profile()` block recorded (module docstring). `rows`: per kernel, the most time first;
    `launches`: each launch in order, kept when the profile was opened with a trace (else None)."""
    _rows: dict[tuple[str, str], ProfileRow] = field(default_factory=dict)
    launches: list[Launch] | None = None

    def add(self, device: str, name: str, seconds: float, call: UOp, cost: LaunchCost) -> None:
        if self.launches is not None:
            self.launches.append(Launch(name, device, time.perf_counter(), seconds, cost))
        if (row := self._rows.get((device, name))) is None:
            info = call.arg if isinstance(call.arg, KernelInfo) else _NO_INFO
            row = self._rows[(device, name)] = ProfileRow(name, device, ops=info.ops_text())
        row.launches += 1
        row.total_s += seconds
        row.flops += cost.flops
        row.bytes += cost.bytes
        row.executed += cost.executed
        row.nominal += cost.nominal

    @property
    def rows(self) -> list[ProfileRow]:
        total = sum(r.total_s for r in self._rows.values())
        for r in self._rows.values():
            r.share = r.total_s / total if total > 0 else 0.0
        return sorted(self._rows.values(), key=lambda r: -r.total_s)

    @property
    def total_s(self) -> float:
        """The kernel time of every launch recorded."""
        return sum(r.total_s for r in self._rows.values())

    def table(self) -> str:
        """The rows as a text table, one line per kernel, then the total."""
        head = (f"{'kernel':40s} {'device':8s} {'launches':>8s} {'total ms':>10s} {'share':>6s} {'GFLOP/s':>9s} "
                f"{'GB/s':>8s} {'work':>8s}  ops")
        lines = [head] + [f"{r.name:40s} {r.device:8s} {r.launches:8d} {r.total_s * 1e3:10.3f} {r.share:6.1%} "
                          f"{r.gflops:9.2f} {r.gbs:8.2f} {r.work_ratio:8.2f}  {r.ops}" for r in self.rows]
        lines.append(f"{'total':40s} {'':8s} {sum(r.launches for r in self.rows):8d} {self.total_s * 1e3:10.3f}")
        return "\n".join(lines)


_profiles: Scopes[Profile] = Scopes("tolk_profiles")


def profiling() -> bool:
    """Whether a profile is open or VIZ records (launches wait and are recorded)."""
    return bool(_profiles.open()) or viz.timing()


@contextlib.contextmanager
def profile(trace: str | os.PathLike[str] | None = None) -> Iterator[Profile]:
    """Record every kernel launched inside the block; the yielded Profile's `rows` hold them afterwards. With
    `trace`, each launch is kept too, and written to that file when the block ends as a Chrome / Perfetto
    trace (`engine/trace.py`; open it in ui.perfetto.dev or chrome://tracing)."""
    prof = Profile(launches=[] if trace is not None else None)
    with _profiles.enter(prof):
        try:
            yield prof
        finally:
            if trace is not None:
                from tolk_core.engine.trace import write_trace  # deferred: only a traced profile needs it
                write_trace(prof, trace)


def record(device: str, name: str, seconds: float, call: UOp, var_vals: dict[str, int],
           cost: LaunchCost | None = None) -> None:
    """Record one launch of kernel CALL `call` in every open profile (`cost`: its launch_cost, if known)."""
    if (profs := _profiles.open()) or viz.timing():
        cost = cost if cost is not None else launch_cost(call, var_vals)
        for p in profs:
            p.add(device, name, seconds, call, cost)
        viz.note_launch(call, seconds, cost)


def timed(launch: Callable[..., float | None], *args, **kwargs) -> float:
    """Seconds one waited launch took: the program's own time when it reports one, else the call's wall time."""
    st = time.perf_counter()
    et = launch(*args, wait=True, **kwargs)
    return et if et is not None else time.perf_counter() - st
