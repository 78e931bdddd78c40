"""Placements: where each value lives, decided per compilation lineage (docs/placements.md).

Two layers:
- *Declared intent* lives on the node, in a weak side table keyed by UOp (UOps are immutable and hash-consed, so
  structurally equal values share one intent). It is set at graph construction (`contiguous()`, `realize()`,
  inputs -> On_device; constants -> Effectively_constant; values that must not be recomputed -> Never_virtual),
  is monotone (it only strengthens, through the same lattice) and is read without side effects.
- *Decisions* live in a `Placements` table owned by one lineage (a `Lineage`: the process's root, a fork, a
  `decide_materialized` / `decide_inline` sibling). Lookups fall back to intent while the lineage has not
  decided; a decision shadows any later change of intent. Tables are copied per compile, so sibling compiles
  are hermetic and children inherit.

Modes (`MemoryMode`): Effectively_constant and Never_virtual are *open* requests (as is "no entry"); Virtual
(inlined, no storage), Local (scratch confined to one kernel launch, unobservable) and On_device (a device
buffer) are *settled*. `transition` is the one pure update lattice; the forcing queries settle open states on
the spot and record a provenance exactly when they write (see each method).

Tables hold their nodes weakly: a decision about a node nobody can build any more is dropped with it, so a
long-lived lineage never keeps graphs or device buffers alive.

The size threshold that decides Local versus On_device for a Never_virtual node is the setting
`PLACEMENT_STACK_THRESHOLD` (bytes; <= 0 turns the size check off), read at query time by
`stack_threshold_bytes()` and nowhere else.
"""
from __future__ import annotations

import contextlib
import enum
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tolk_core import config
from tolk_core.errors import TolkError
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp, prod


# ---------------------------------------------------------------- errors
class PlacementError(TolkError):
    """Base of the placement errors."""


class PlacementUserError(PlacementError):
    """A request the program's semantics forbid: inlining a value that must not be recomputed, or reading a
    kernel-local value from a later compile."""


class PlacementConflict(PlacementError, ValueError):
    """Two placements that cannot be reconciled (the lattice's inconsistent cells, bad promotions)."""


class PlacementUndecided(PlacementError, AssertionError):
    """A materialization question asked about a node nobody decided or declared anything for."""


# ---------------------------------------------------------------- vocabulary
class MemoryMode(enum.Enum):
    EFFECTIVELY_CONSTANT = "Eff-const"
    VIRTUAL = "Virtual"
    NEVER_VIRTUAL = "Never-virt"
    LOCAL = "Local"
    ON_DEVICE = "On-dev"


EC, V, NV, L, OD = (MemoryMode.EFFECTIVELY_CONSTANT, MemoryMode.VIRTUAL, MemoryMode.NEVER_VIRTUAL, MemoryMode.LOCAL,
                    MemoryMode.ON_DEVICE)
OPEN = frozenset({EC, NV})          # plus "no entry"
SETTLED = frozenset({V, L, OD})


@dataclass(frozen=True)
class Provenance:
    """Why a mode was requested or decided. A leaf is `code:reason`; a refinement chain `prior -> refinement`
    (built when an open state is turned into a concrete placement) nests to the left. Equality is structural;
    codes are labels, never arithmetic.

    Each code has one meaning, and `DEBUG>=3` prints it (`On-dev/42:realize-output`), so codes are stable: a new
    site takes an unused number. The codes in use (docs/placements.md, "Provenance codes", has the same table):

    code  reason                defined in  meaning
    1     visit-cap             placements  heuristic cap: a value read more than once per element it feeds
                                            (reserved: nothing mints it yet; `decide_inline` would lift it)
    16    scope-local           placements  reserved: a value computed as scalar scratch inside one kernel
    17    surviving-read        placements  reserved: a read left in the final code, so the value needs storage
    24    constant              placements  intent: a constant (Effectively_constant)
    26    never-recompute       placements  intent: a random draw, copy or assigned target (Never_virtual)
    28    contiguous            placements  intent: a user `contiguous()` (On_device)
    29    realize               placements  intent: a user `realize()` (On_device)
    31    decide-materialized   placements  decision: a `decide_materialized` sibling stores the value
    36    read-before-write     placements  reserved: a value read before it is written (a recurrence)
    37    read-only-input       placements  decision: storage a later compile reads but does not compute
    39    inline-reduction-cap  placements  heuristic cap: a reduction read by more than one kernel, or broadcast
                                            to its consumer (Never_virtual; `decide_inline` lifts it)
    41    inline-fanin-cap      placements  heuristic cap (reserved): inlining would read too many stored values
    44    recompute-cap         placements  heuristic cap: a value its consumer broadcasts, whose ops inlined would
                                            multiply the kernel's work past FUSION_WORK_BOUND (Never_virtual;
                                            `decide_inline` lifts it)
    45    kernel-budget         placements  heuristic cap: a value stored to split a kernel that would exceed
                                            KERNEL_MAX_OPS operations or KERNEL_MAX_BUFFERS buffers
    48    parallel-reduction    placements  heuristic cap: a contraction (matmul, convolution) stored so that
                                            the kernel reading it computes only one contraction
    42    realize-output        rangeify    decision: a value the caller asked for (On_device)
    43    crosses-kernel        rangeify    refinement: stored by one kernel, read by another (On_device)
    46    kernel-scratch        rangeify    refinement: a Never_virtual value settled by size (Local or On_device)
    47    row-scratch           rangeify    scheduler: a row a fused reduction and its consumer both read
                                            (Never_virtual, row-sized; then kernel-scratch)
    49    ndarray-backed        placements  intent: storage from the host or `Tensor.empty` (On_device)
    151   inlined               rangeify    decision: everything else, recomputed where read (Virtual)
    177   kernel-fission        placements  decision: a Local two kernels touch, promoted On_device
    """
    code: int = 0
    reason: str = ""
    prior: Provenance | None = None
    refinement: Provenance | None = None

    # named provenances: tags code reads back (assigned below the class)
    VISIT_CAP: ClassVar[Provenance]
    INLINE_REDUCTION_CAP: ClassVar[Provenance]
    INLINE_FANIN_CAP: ClassVar[Provenance]
    RECOMPUTE_CAP: ClassVar[Provenance]
    KERNEL_BUDGET: ClassVar[Provenance]
    PARALLEL_REDUCTION: ClassVar[Provenance]
    READ_BEFORE_WRITE: ClassVar[Provenance]
    SCOPE_LOCAL: ClassVar[Provenance]
    SURVIVING_READ: ClassVar[Provenance]

    @staticmethod
    def site(code: int, reason: str) -> Provenance:
        return Provenance(code, reason)

    @staticmethod
    def refined(prior: Provenance, refinement: Provenance) -> Provenance:
        return Provenance(prior=prior, refinement=refinement)

    @property
    def is_refined(self) -> bool:
        return self.prior is not None

    def leading(self) -> Provenance:
        """The original tag of a chain (its leftmost leaf)."""
        p = self
        while p.prior is not None:
            p = p.prior
        return p

    def __str__(self) -> str:
        if self.prior is not None:
            return f"{self.prior} -> {self.refinement}"
        return f"{self.code}:{self.reason}"


# named provenances: tags that code reads back. Those in HEURISTIC_CAPS are heuristic caps, which `decide_inline` may
# lift (legality and observability verdicts cannot be lifted).
Provenance.VISIT_CAP = Provenance(1, "visit-cap")
Provenance.INLINE_REDUCTION_CAP = Provenance(39, "inline-reduction-cap")
Provenance.INLINE_FANIN_CAP = Provenance(41, "inline-fanin-cap")
Provenance.RECOMPUTE_CAP = Provenance(44, "recompute-cap")
Provenance.KERNEL_BUDGET = Provenance(45, "kernel-budget")
Provenance.PARALLEL_REDUCTION = Provenance(48, "parallel-reduction")
Provenance.READ_BEFORE_WRITE = Provenance(36, "read-before-write")
Provenance.SCOPE_LOCAL = Provenance(16, "scope-local")
Provenance.SURVIVING_READ = Provenance(17, "surviving-read")
HEURISTIC_CAPS = frozenset({Provenance.VISIT_CAP, Provenance.INLINE_REDUCTION_CAP, Provenance.INLINE_FANIN_CAP,
                            Provenance.RECOMPUTE_CAP, Provenance.KERNEL_BUDGET, Provenance.PARALLEL_REDUCTION})

# sites that mint tags nobody reads back (codes: the table in Provenance's docstring; one meaning per code)
CONSTANT = Provenance.site(24, "constant")
NEVER_RECOMPUTE = Provenance.site(26, "never-recompute")
CONTIGUOUS = Provenance.site(28, "contiguous")
REALIZE = Provenance.site(29, "realize")
DECIDE_MATERIALIZED = Provenance.site(31, "decide-materialized")
INPUT = Provenance.site(49, "ndarray-backed")
FISSION = Provenance.site(177, "kernel-fission")
READ_ONLY_INPUT = Provenance.site(37, "read-only-input")

Placement = tuple[MemoryMode, Provenance]


def node_name(u: UOp) -> str:
    """How errors and dumps name a node: its op, shape and dtype."""
    shape = ("x".join(str(s) for s in u.shape) or "()") if u.shape is not None else "-"
    return f"{u.op.name}({shape}, {u.dtype.name})"


def _named(name: str | UOp) -> str:
    return name if isinstance(name, str) else node_name(name)


def _placement_str(pl: Placement | None) -> str:
    return "undecided" if pl is None else f"{pl[0].value}/{pl[1]}"


# ---------------------------------------------------------------- the lattice
def transition(current: Placement | None, mode: MemoryMode, prov: Provenance, name: str | UOp = "node") -> Placement:
    """The placement after requesting `mode` (for reason `prov`) on a node whose effective state is `current`.
    Pure. Raises PlacementUserError for a virtual/never-virtual clash and PlacementConflict for the
    inconsistent cells (Local -> On_device included: decisions are final; only fission promotes). `name` names
    the node in those errors: a text, or the node itself (named by `node_name` only when an error is raised,
    since every graph construction declares intents through here)."""
    if current is None:
        return (mode, prov)
    cur = current[0]
    if cur is mode:
        return current
    if cur is NV and mode is V:
        raise PlacementUserError(f"{_named(name)} cannot be virtual: it is {_placement_str(current)} (requested "
                                 f"{mode.value}/{prov}); it must not be recomputed")
    if cur is V and mode is EC:
        return current
    if (cur, mode) in ((NV, EC), (EC, NV)):
        return (OD, prov)
    if cur is OD and mode is EC:
        return current
    if cur is EC and mode in (V, OD):
        return (mode, prov)
    if cur is NV:
        return (mode, prov)
    if cur is V and mode is NV:
        raise PlacementUserError(f"{_named(name)} is already virtual ({_placement_str(current)}) and cannot become "
                                 f"{mode.value}/{prov}: mark it materialized before its first compile")
    if mode is NV:
        return current
    raise PlacementConflict(f"inconsistent placement for {_named(name)}: it is {_placement_str(current)}, requested "
                            f"{mode.value}/{prov}")


# ---------------------------------------------------------------- declared intent (on the node)
@dataclass
class Intent:
    """Declared intent of one node. Every field is monotone."""
    placement: Placement | None = None
    observable: bool = False      # someone reads the values on the host: never Local, undecided -> not Virtual
    host_constant: bool = False   # the values always equal registered host data


_intents: weakref.WeakKeyDictionary[UOp, Intent] = weakref.WeakKeyDictionary()


def intent(u: UOp) -> Placement | None:
    """The declared placement of `u` (no side effects)."""
    i = _intents.get(u)
    return i.placement if i is not None else None


def declare(u: UOp, mode: MemoryMode, prov: Provenance) -> None:
    """Strengthen `u`'s declared intent through the lattice (errors leave it unchanged)."""
    i = _intents.get(u)
    new = transition(i.placement if i is not None else None, mode, prov, u)
    (i if i is not None else _intents.setdefault(u, Intent())).placement = new


def carry_intent(old: UOp, new: UOp) -> None:
    """A pass rebuilt `old` as `new` on rewritten sources (the same op and argument: the same value): `new`
    keeps what was declared about `old` (a `contiguous()` over a graph from which prepare drops a DETACH is
    still stored)."""
    if (i := _intents.get(old)) is not None and new not in _intents:
        _intents[new] = Intent(i.placement, i.observable, i.host_constant)


def mark_observable(u: UOp) -> None:
    _intents.setdefault(u, Intent()).observable = True


def mark_host_constant(u: UOp) -> None:
    _intents.setdefault(u, Intent()).host_constant = True


def is_observable(u: UOp) -> bool:
    i = _intents.get(u)
    return i is not None and i.observable


def is_slice_alias(u: UOp) -> bool:
    """A view of storage (movement ops down to a BUFFER): it owns no buffer, reads and writes go to the parent."""
    return u.op in GroupOp.Movement and u.storage_base(GroupOp.Movement).op is Op.BUFFER


def stack_threshold_bytes() -> int:
    """The one place the Local/On_device size threshold is read (setting PLACEMENT_STACK_THRESHOLD)."""
    return int(config.get("PLACEMENT_STACK_THRESHOLD"))


def fits_scratch(numel: int, itemsize: int) -> bool:
    """Whether `numel` elements of `itemsize` bytes fit kernel-local scratch (always, with the check off)."""
    threshold = stack_threshold_bytes()
    return threshold <= 0 or numel <= threshold // max(itemsize, 1)


def most_local_materialized_mode(u: UOp, extent: int | None = None) -> MemoryMode:
    """On_device when `u`'s scratch (its `extent` elements per kernel instance; default all of it) is bigger
    than the stack threshold and the check is on, else Local."""
    if extent is None:
        n = prod(u.shape) if u.shape is not None else 1
        extent = n if isinstance(n, int) else int(n.vmax)  # a symbolic size plans for its largest value
    return L if fits_scratch(extent, u.dtype.itemsize) else OD


# ---------------------------------------------------------------- the per-lineage table
class Placements:
    """One lineage's decisions: UOp -> (mode, provenance), falling back to declared intent."""

    def __init__(self, table: weakref.WeakKeyDictionary[UOp, Placement] | None = None,
                 extents: weakref.WeakKeyDictionary[UOp, int | None] | None = None):
        self._table: weakref.WeakKeyDictionary[UOp, Placement] = table if table is not None else \
            weakref.WeakKeyDictionary()
        # elements of scratch a node needs per kernel instance, where that is less than the whole node (a row)
        self._extents: weakref.WeakKeyDictionary[UOp, int | None] = extents if extents is not None else \
            weakref.WeakKeyDictionary()

    @staticmethod
    def create() -> Placements:
        return Placements()

    def copy(self) -> Placements:
        """A snapshot: later writes on either side are invisible to the other."""
        return Placements(weakref.WeakKeyDictionary(self._table), weakref.WeakKeyDictionary(self._extents))

    def set_scratch_extent(self, u: UOp, numel: int | None) -> None:
        """`u` would be kernel-local scratch of `numel` elements per kernel instance (e.g. one row of it):
        the size Never_virtual is judged by when it settles Local or On_device (None, a symbolic size: all of
        `u`, as when none is set)."""
        self._extents[u] = numel

    def _most_local(self, u: UOp) -> MemoryMode:
        return most_local_materialized_mode(u, self._extents.get(u))

    def __len__(self) -> int:
        return len(self._table)

    def entries(self) -> dict[UOp, Placement]:
        """The lineage's own decisions (no intent), for diagnostics."""
        return dict(self._table)

    def get(self, u: UOp) -> Placement | None:
        """The effective state: this lineage's decision if any, else the declared intent. No side effects."""
        pl = self._table.get(u)
        return pl if pl is not None else intent(u)

    def raw_entry(self, u: UOp) -> Placement | None:
        """The lineage's entry only (no intent fallback): None when this lineage never wrote `u`."""
        return self._table.get(u)

    def update(self, u: UOp, mode: MemoryMode, prov: Provenance) -> None:
        """Write `transition(get(u), mode, prov)`, always creating an entry (even when nothing changes, so the
        lineage stops following later intent). Errors are raised before anything is written."""
        self._table[u] = transition(self.get(u), mode, prov, u)

    def unsafe_restore(self, u: UOp, prior: Placement | None) -> None:
        """Put back an entry captured by `raw_entry` (None removes it). No lattice check: fission's undo."""
        if prior is None:
            self._table.pop(u, None)
        else:
            self._table[u] = prior

    def promote_local_to_device(self, u: UOp, prov: Provenance) -> None:
        """Fission's escape hatch: a node assumed confined to one kernel (Local, Never_virtual or undecided)
        whose live range crosses a kernel split gets storage (On_device/prov). Already On_device: no-op.
        Virtual or Effectively_constant: PlacementConflict (not kernel scratch)."""
        cur = self.get(u)
        if cur is not None and cur[0] is OD:
            return
        if cur is not None and cur[0] in (V, EC):
            raise PlacementConflict(f"cannot promote {node_name(u)} to {OD.value}/{prov}: it is "
                                    f"{_placement_str(cur)}, not kernel-scoped scratch")
        self._table[u] = (OD, prov)

    def debug(self, u: UOp) -> str:
        """`Mode/provenance` of the effective state, e.g. `On-dev/36:read-before-write`, or `undecided`."""
        return _placement_str(self.get(u))

    def _refine(self, u: UOp, prov: Provenance) -> Provenance:
        cur = self.get(u)
        return Provenance.refined(cur[1], prov) if cur is not None else prov

    def default_to_most_local(self, u: UOp, prov: Provenance) -> None:
        """Settle an open state as locally as allowed: undecided -> Virtual (On_device when observable: nothing
        stored to recompute from); Effectively_constant -> Virtual; Never_virtual -> Local or On_device by size
        (On_device when observable: Local is unobservable). Settled states are left alone."""
        cur = self.get(u)
        obs = is_observable(u)
        if cur is None:
            self._table[u] = (OD if obs else V, prov)
        elif cur[0] is EC:
            self._table[u] = (V, self._refine(u, prov))
        elif cur[0] is NV:
            self._table[u] = (OD if obs else self._most_local(u), self._refine(u, prov))

    def _undecided(self, u: UOp, query: str) -> PlacementUndecided:
        return PlacementUndecided(f"{query} on {node_name(u)}: no lineage decision and no declared intent")

    # -- forcing queries: answer, settling an open state on the spot
    def is_virtual_force(self, u: UOp, prov: Provenance) -> bool:
        """True for Virtual. Records on undecided (Virtual, or On_device and False when observable) and on
        Effectively_constant (Virtual, plain provenance). Never_virtual answers False without recording."""
        cur = self.get(u)
        if cur is None:
            obs = is_observable(u)
            self._table[u] = (OD if obs else V, prov)
            return not obs
        if cur[0] is EC:
            self._table[u] = (V, prov)
            return True
        return cur[0] is V

    def is_materialized_force(self, u: UOp, prov: Provenance) -> bool:
        """True for On_device. Open states (Effectively_constant, Never_virtual) are settled by
        `default_to_most_local` first; undecided raises PlacementUndecided."""
        cur = self.get(u)
        if cur is None:
            raise self._undecided(u, "is_materialized_force")
        if cur[0] in OPEN:
            self.default_to_most_local(u, prov)
            cur = self.get(u)
        return cur is not None and cur[0] is OD

    def is_in_context_force(self, u: UOp, prov: Provenance) -> bool:
        """Whether `u` owns a buffer. A slice alias answers False first, recording nothing; every open state
        (undecided included) is settled by `default_to_most_local`."""
        if is_slice_alias(u):
            return False
        cur = self.get(u)
        if cur is None or cur[0] in OPEN:
            self.default_to_most_local(u, prov)
            cur = self.get(u)
        return cur is not None and cur[0] is OD

    def is_materialized_peek(self, u: UOp) -> bool:
        """What `is_materialized_force` would answer, without writing (fission judges crossings with it)."""
        cur = self.get(u)
        if cur is None:
            raise self._undecided(u, "is_materialized_peek")
        if cur[0] is NV:
            return is_observable(u) or self._most_local(u) is OD
        return cur[0] is OD

    # -- pure predicates on the effective state
    def known_not_materialized(self, u: UOp) -> bool:
        return (pl := self.get(u)) is not None and pl[0] in (V, L)

    def known_constant(self, u: UOp) -> bool:
        return (pl := self.get(u)) is not None and pl[0] is EC

    def known_non_virtual(self, u: UOp) -> bool:
        return (pl := self.get(u)) is not None and pl[0] in (NV, L, OD)

    def known_virtual(self, u: UOp) -> bool:
        return (pl := self.get(u)) is not None and pl[0] is V

    def mode_is_unspecified(self, u: UOp) -> bool:
        return (pl := self.get(u)) is None or pl[0] in OPEN

    # -- a later compile reading storage it does not compute
    def require_readable(self, u: UOp) -> None:
        """`u` is read as storage by a compile that does not compute it: it must own a buffer. Undecided ->
        On_device (read-only input); Local (settled by an earlier compile of this lineage) is a user error."""
        cur = self.get(u)
        if cur is not None and cur[0] is L:
            raise PlacementUserError(f"{node_name(u)} was settled {_placement_str(cur)} (kernel-local, not stored) "
                                     "by an earlier compile of this lineage, and a later compile reads it: mark it "
                                     "materialized (contiguous() or decide_materialized) before its first compile")
        if cur is None or cur[0] in OPEN:
            self.update(u, OD, READ_ONLY_INPUT)


# ---------------------------------------------------------------- fission bookkeeping
def promote_crossing(p: Placements, touched: dict[UOp, set[UOp]]) -> dict[UOp, Placement | None]:
    """Kernel fission: every node not materialized (by peek) that kernels two or more touch is promoted
    On_device (FISSION). Returns the undo values (raw entries) of the promoted nodes."""
    undo: dict[UOp, Placement | None] = {}
    for u, kernels in touched.items():
        if len(kernels) > 1 and not p.is_materialized_peek(u) and (pl := p.get(u)) is not None and pl[0] in (L, NV):
            undo[u] = p.raw_entry(u)
            p.promote_local_to_device(u, FISSION)
    return undo


def undo_promotions(p: Placements, undo: dict[UOp, Placement | None], touched: dict[UOp, set[int]]) -> None:
    """After kernels coalesce: undo every promotion whose node no longer crosses a kernel boundary."""
    for u, prior in undo.items():
        if len(touched.get(u, ())) <= 1:
            p.unsafe_restore(u, prior)


# ---------------------------------------------------------------- schedule-cache digest
def digest(sink: UOp, p: Placements, inline: Iterable[UOp] = (), positions: dict[UOp, int] | None = None) -> tuple:
    """What placements tell scheduling about `sink`'s graph, by graph position (toposort index), as plain data:
    for each node with a lineage decision or an intent, or whose inlining is preferred (`inline`: a lineage's
    `decide_inline` nodes), (position, placement class, observable, inlining preferred); the placement class is
    the lineage's decision, else the intent's. Equal programs with equal placements give equal digests in every
    process; provenances are left out (they do not steer scheduling), and Effectively_constant counts as
    Virtual, which forcing folds it to (so a constant that an earlier compile of the lineage settled Virtual
    does not change the digest). Nodes with nothing to say are left out: the schedule cache computes this on
    every realize, and most nodes of a graph have no entry. `positions`: each node's position in the toposort,
    where the caller has it (the schedule cache's survey)."""
    prefer = set(inline)
    table_get, intent_get = p._table.get, _intents.get
    nodes = sink.toposort()
    if len(p._table) + len(_intents) + len(prefer) < len(nodes):
        # the tables are the smaller side (tens of entries against a graph's hundreds or thousands of nodes): a
        # weak table's lookup costs a Python call and a weak reference, the positions one dict built in C
        at = (positions if positions is not None else dict(zip(nodes, range(len(nodes)), strict=True))).get
        found = {i: u for u in (*p._table.keys(), *_intents.keys(), *prefer) if (i := at(u)) is not None}
        candidates = sorted(found.items())
    else:
        candidates = list(enumerate(nodes))
    parts = []
    for i, u in candidates:
        pl, it = table_get(u), intent_get(u)
        if pl is None and it is None and u not in prefer:
            continue
        if pl is None and it is not None:
            pl = it.placement
        parts.append((i, (V if pl[0] is EC else pl[0]).name if pl is not None else None,
                      it is not None and it.observable, u in prefer))
    return tuple(parts)


Decisions = tuple[tuple[int, Placement | None], ...]


def recorded(nodes: list[UOp], before: list[Placement | None], p: Placements) -> Decisions:
    """The entries of `p` that differ from `before` (raw entries captured before a compile), by position in
    `nodes`: what that compile decided about them, replayable by `replay` onto an equal graph."""
    return tuple((i, e) for i, (u, b) in enumerate(zip(nodes, before, strict=True)) if (e := p.raw_entry(u)) != b)


def replay(nodes: list[UOp], decisions: Decisions) -> None:
    """Commit `decisions` (from `recorded`) onto `nodes` in the current lineage: a compile skipped because an
    equal graph with an equal digest was compiled before leaves the decisions that compile would have made.
    Written into the current lineage's table directly, not through a `compiling()` fork: restoring entries
    cannot fail halfway, and a fork copies the whole table (every live node's decision) on every cache hit."""
    table = current().placements
    for i, e in decisions:
        table.unsafe_restore(nodes[i], e)


# ---------------------------------------------------------------- lineages
def _uops(values: Iterable[Any]) -> list[UOp]:
    """UOps of tensors (anything with `.uop`) or UOps."""
    return [getattr(v, "uop", v) for v in values]


@dataclass
class Lineage:
    """A compilation lineage: a placements table plus the nodes exempt from the heuristic caps.

    `realize()` compiles from the current lineage: the scheduler works on `begin()`'s fork and `commit()`s it
    when the schedule is built, so children inherit decisions and a failed compile leaves the lineage as it was.
    `with lineage:` makes it current for the realizes in the block."""
    placements: Placements = field(default_factory=Placements)
    inline_preferences: weakref.WeakSet[UOp] = field(default_factory=weakref.WeakSet)
    parent: Lineage | None = None

    def fork(self) -> Lineage:
        """A child holding a snapshot of this lineage's decisions (siblings are hermetic)."""
        return Lineage(self.placements.copy(), weakref.WeakSet(self.inline_preferences), self)

    def decide_materialized(self, tensors: Iterable[Any]) -> Lineage:
        """A fork where each node that is undecided, Never_virtual or On_device is decided On_device (31);
        Virtual, Local and Effectively_constant nodes are left as they are. This lineage and intent are
        untouched."""
        child = self.fork()
        for u in _uops(tensors):
            cur = child.placements.get(u)
            if cur is None or cur[0] in (NV, OD):
                child.placements.update(u, OD, DECIDE_MATERIALIZED)
        return child

    def decide_inline(self, tensors: Iterable[Any]) -> Lineage:
        """A fork that prefers inlining these nodes: the heuristic caps skip them; legality still applies."""
        child = self.fork()
        for u in _uops(tensors):
            child.inline_preferences.add(u)
        return child

    def begin(self) -> Lineage:
        """The working fork of one compile."""
        return Lineage(self.placements.copy(), self.inline_preferences, self)

    def commit(self, work: Lineage) -> None:
        """Adopt the decisions of a compile forked from this lineage by `begin()`."""
        self.placements = work.placements

    def __enter__(self) -> Lineage:
        _stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack.pop()


_root = Lineage()
_stack: list[Lineage] = []


def root() -> Lineage:
    """The process's root lineage."""
    return _root


def current() -> Lineage:
    """The lineage realizes compile from: the innermost `with lineage:` block, else the root."""
    return _stack[-1] if _stack else _root


@contextlib.contextmanager
def compiling(lineage: Lineage | None = None) -> Iterator[Lineage]:
    """A compile from `lineage` (default: current()): yields the working fork, committed if the block succeeds."""
    base = lineage if lineage is not None else current()
    work = base.begin()
    yield work
    base.commit(work)


# ---------------------------------------------------------------- graph-construction hooks (front end)
def seed_input(u: UOp) -> None:
    """Storage uploaded from the host or allocated by the user: On_device."""
    declare(u, OD, INPUT)


def seed_contiguous(u: UOp) -> None:
    """A user `contiguous()`: the CONTIGUOUS node owns a buffer, whatever the heuristics say (a contiguous() of
    storage is that storage: nothing to declare)."""
    if u.src[0].op is not Op.BUFFER:
        declare(u, OD, CONTIGUOUS)


def seed_realize(u: UOp) -> None:
    """A user `realize()`: the value is stored and observable."""
    if u.op is not Op.BUFFER and not is_slice_alias(u):
        declare(u, OD, REALIZE)
    mark_observable(u)


def seed_observed(u: UOp) -> None:
    """`numpy()` / `item()`: the host reads the value (never Local, never undecided-to-Virtual)."""
    mark_observable(u)


def seed_constant(u: UOp) -> None:
    """A constant: Effectively_constant (forcing folds it to Virtual, so it is inlined)."""
    if intent(u) is None:
        declare(u, EC, CONSTANT)


def seed_never_virtual(u: UOp) -> None:
    """A value that must not be recomputed (random draws, copies, assigned targets)."""
    declare(u, NV, NEVER_RECOMPUTE)
