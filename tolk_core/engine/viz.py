"""viz: what the compiler did, recorded schedule by schedule for the HTML view (docs/viz.md).

While recording (`recording()`, or the setting VIZ=1 for a whole process), every schedule Tolk lowers
(`schedule.lower`: `schedule`, `schedule_stores`) becomes a `Record`, taken as plain data at that moment:

- the tensor graph before prepare (the SINK of STOREs lower was given) and after prepare_rangeify, node by node
  (`Node`: op, dtype, shape, argument, sources), with each node's placement and its provenance as the current
  lineage then holds them (docs/placements.md);
- the kernels of the LINEAR in launch order (`Kernel`): the value each stores, the nodes of the prepared graph
  it computes (from that value down to storage or another stored value: a value inlined into two kernels is
  in both), the buffers it reads and writes, its rendered source and name;
- the rewrite rules that fired, counted per pass, while the schedule was built and compiled (the pattern
  matcher reports them only while something observes: `ir.pattern.rewrite_observers`);
- each kernel's launches (time, FLOPs, bytes, executed and nominal operations), from the profiler's record
  point: while recording every launch waits and is timed, as inside `tolk_core.profile()`. A launch counts
  towards the most recent record holding its kernel (a JIT replay's towards its capture's schedule).

Equal schedules (equal graphs up to which storage they read, `schedule.structure`) share one record, which
counts how often it ran; at most MAX_RECORDS are kept. Recording bypasses the schedule cache, so each
schedule is lowered (and seen) again. With VIZ=1 the page is written when the process exits, to VIZ_PATH
(default `viz/index.html` in Tolk's cache directory), and its path printed on stderr.
"""
from __future__ import annotations

import atexit
import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tolk_core import config
from tolk_core.engine.compile import arg_device, render_together
from tolk_core.ir import pattern
from tolk_core.ir.calls import KernelCode, KernelInfo
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp
from tolk_core.plugins import Device
from tolk_core.schedule import placements

MAX_RECORDS = 200


@dataclass
class Node:
    """One node of a recorded graph: `id` (its position in the graph's order), what it is, its sources' ids,
    its placement (`MODE/provenance`, "" when undecided) and the kernels (by index) that compute it."""
    id: int
    op: str
    dtype: str
    shape: str
    arg: str
    src: tuple[int, ...]
    placement: str = ""
    kernels: list[int] = field(default_factory=list)


@dataclass
class Kernel:
    """One kernel of a recorded LINEAR: its name and rendered source, the prepared node it stores (-1: none),
    the nodes it computes, the tensor ops it implements, the buffers it writes and reads (numbered per record
    by first appearance in the LINEAR), and its launches' totals."""
    index: int
    name: str
    source: str
    device: str
    root: int
    nodes: list[int]
    ops: str
    writes: list[int]
    reads: list[int]
    launches: int = 0
    seconds: float = 0.0
    flops: int = 0
    bytes: int = 0
    executed: int = 0
    nominal: int = 0

    @property
    def work_ratio(self) -> float:
        return self.executed / self.nominal if self.nominal else 1.0


@dataclass
class Record:
    """One schedule as the module docstring describes; `runs`: how often an equal schedule was lowered."""
    index: int
    device: str
    before: list[Node]
    after: list[Node]
    kernels: list[Kernel]
    rewrites: dict[str, Counter[str]] = field(default_factory=dict)
    runs: int = 1


class _State:
    def __init__(self) -> None:
        self.depth = 0
        self.records: list[Record] = []
        self.by_key: dict[tuple, Record] = {}
        self.by_ast: dict[UOp, Kernel] = {}
        self.current: Record | None = None
        self.dropped = 0
        self.exit_hook = False


_state = _State()


def active() -> bool:
    """Whether schedules are being recorded (inside `recording()`, or VIZ=1: read here, once per schedule)."""
    return _state.depth > 0 or _from_setting()


def timing() -> bool:
    """Whether launches are timed for the records: cheap (no setting read), for the launch paths."""
    return _state.depth > 0 or _state.exit_hook


def _from_setting() -> bool:
    if config.get("VIZ") < 1:
        return False
    if not _state.exit_hook:  # registered at the first schedule seen, never at import
        _state.exit_hook = True
        pattern.rewrite_observers.append(_observe)
        atexit.register(_write_at_exit)
    return True


@contextlib.contextmanager
def recording() -> Iterator[list[Record]]:
    """Record the schedules of the block; yields the list of records (kept after the block)."""
    _state.depth += 1
    if _state.depth == 1:
        pattern.rewrite_observers.append(_observe)
    try:
        yield _state.records
    finally:
        _state.depth -= 1
        if _state.depth == 0 and not _state.exit_hook:
            pattern.rewrite_observers.remove(_observe)


def records() -> list[Record]:
    """Every record kept so far, in the order first lowered."""
    return list(_state.records)


def clear() -> None:
    """Forget every record."""
    _state.records.clear()
    _state.by_key.clear()
    _state.by_ast.clear()
    _state.current = None
    _state.dropped = 0


def _observe(name: str, fired: list[str]) -> None:
    if fired and (rec := _state.current) is not None:
        rec.rewrites.setdefault(name, Counter()).update(fired)


# ---------------------------------------------------------------- recording a schedule
def _label_arg(u: UOp) -> str:
    if u.op is Op.BUFFER:
        return f"{u.arg} on {u.src[1].arg}"
    if u.op in (Op.UNIQUE, Op.DEVICE, Op.CALL) or u.arg is None:
        return ""
    text = u.arg.name if hasattr(u.arg, "name") and not isinstance(u.arg, (str, tuple)) else repr(u.arg)
    return text if len(text) <= 60 else text[:57] + "..."


def _nodes(sink: UOp) -> tuple[list[Node], dict[UOp, int]]:
    """The graph under `sink` as Nodes (DEVICE and UNIQUE leaves left out: every BUFFER names its device),
    with placements from the current lineage, and each node's id."""
    order = [u for u in sink.toposort() if u.op not in (Op.DEVICE, Op.UNIQUE)]
    ids = {u: i for i, u in enumerate(order)}
    table = placements.current().placements
    out = []
    for u in order:
        shape = "x".join(str(s) for s in u.shape) if u.shape is not None else "-"
        pl = table.debug(u)
        out.append(Node(ids[u], u.op.name, u.dtype.name, shape or "()", _label_arg(u),
                        tuple(ids[s] for s in u.src if s in ids), "" if pl == "undecided" else pl))
    return out, ids


def _storage(u: UOp) -> UOp:
    """The BUFFER under a view (movements, bitcasts, byte runs) of it."""
    while u.op in GroupOp.Movement or u.op in (Op.SLICE, Op.BITCAST):
        u = u.src[0]
    return u


def _written_slots(ast: UOp) -> set[int]:
    """The CALL argument slots kernel `ast` stores into."""
    if isinstance(ast.arg, KernelCode):
        return {i for i, w in enumerate(ast.arg.written) if w}
    return {u.src[0].src[0].arg for u in ast.toposort()
            if u.op is Op.STORE and u.src[0].op is Op.INDEX and u.src[0].src[0].op is Op.PARAM}


def _body(root: UOp, stored: set[UOp]) -> list[UOp]:
    """The nodes a kernel storing `root` computes: from it down to storage or another stored value."""
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        u = stack.pop()
        if u in seen or u.op in (Op.BUFFER, Op.DEVICE, Op.UNIQUE) or (u is not root and u in stored):
            continue
        seen.add(u)
        stack.extend(u.src)
    return list(seen)


def _kernels(linear: UOp, value_of: dict[UOp, UOp], ids: dict[UOp, int]) -> list[Kernel]:
    """The Kernels of `linear`, each with the prepared-graph nodes it computes (see the module docstring)."""
    stored = set(value_of.values())
    numbers: dict[UOp, int] = {}  # each distinct buffer of the LINEAR, numbered by first appearance
    out = []
    for k, call in enumerate(linear.src):
        ast, args = call.src[0], [_storage(a) for a in call.src[1:]]
        device = arg_device(call.src[1])
        _, (ks,) = render_together([ast], Device[device].renderer)
        written = _written_slots(ast)
        roots = [value_of[args[i]] for i in sorted(written) if i < len(args) and args[i] in value_of]
        body = {n for r in roots for n in _body(r, stored)}
        nums = [numbers.setdefault(a, len(numbers)) for a in args]
        ops = call.arg.ops_text() if isinstance(call.arg, KernelInfo) else ""
        out.append(Kernel(k, ks.name, ks.source, device, ids.get(roots[0], -1) if roots else -1,
                          sorted(ids[n] for n in body if n in ids), ops,
                          [nums[i] for i in sorted(written) if i < len(args)],
                          [n for i, n in enumerate(nums) if i not in written]))
    return out


def note_lower(target_device: str, sink: UOp, lower: Callable[[Callable[[UOp], UOp]], tuple[UOp, UOp]],
               new_buffer: Callable[[UOp], UOp], key: Callable[[], tuple]) -> UOp:
    """`lower(new_buffer)` -> (prepared SINK, LINEAR) run and recorded; returns the LINEAR. `key()` is the
    schedule's structural key (equal schedules share a record)."""
    made: dict[UOp, UOp] = {}

    def remembered(v: UOp) -> UOp:
        made[b := new_buffer(v)] = v
        return b
    previous, _state.current = _state.current, Record(len(_state.records), target_device, [], [], [])
    try:
        prepared, linear = lower(remembered)
        before, _ = _nodes(sink)  # after lowering: the placements decided, on the nodes prepare kept
        after, ids = _nodes(prepared)
        value_of = {_storage(s.src[0]): s.src[1] for s in prepared.src if s.op is Op.STORE} | made
        kernels = _kernels(linear, value_of, ids)
    except BaseException:
        _state.current = previous
        raise
    rec = _state.current
    rec.before, rec.after, rec.kernels = before, after, kernels
    for kern in kernels:
        for n in kern.nodes:
            after[n].kernels.append(kern.index)
    _keep(rec, key(), linear)
    return linear


def _keep(rec: Record, key: tuple, linear: UOp) -> None:
    if (old := _state.by_key.get(key)) is not None:
        old.runs += 1
        for name, fired in rec.rewrites.items():
            old.rewrites.setdefault(name, Counter()).update(fired)
        rec = old
    elif len(_state.records) >= MAX_RECORDS:
        _state.dropped += 1
        return
    else:
        _state.by_key[key] = rec
        _state.records.append(rec)
    _state.current = rec
    for call, kern in zip(linear.src, rec.kernels, strict=True):
        _state.by_ast[call.src[0]] = kern


def note_launch(call: UOp, seconds: float, cost: Any) -> None:
    """One timed launch of kernel CALL `call` (a CALL of a SINK or its PROGRAM), with its LaunchCost."""
    body = call.src[0]
    kern = _state.by_ast.get(body.src[0] if body.op is Op.PROGRAM else body)
    if kern is None:
        return
    kern.launches += 1
    kern.seconds += seconds
    kern.flops += cost.flops
    kern.bytes += cost.bytes
    kern.executed += cost.executed
    kern.nominal += cost.nominal


def _write_at_exit() -> None:
    if not _state.records:
        return
    from tolk_core.engine.viz_page import default_path, write_page  # deferred: only a recorded process needs it
    path = write_page(_state.records, config.get("VIZ_PATH") or default_path(), _state.dropped)
    print(f"tolk viz: {len(_state.records)} schedule(s) -> {path}", file=sys.stderr)
