"""The placement rules of docs/placements.md as 55 numbered cases ("rows"; the numbers only order them): the
update lattice (1-19), the forcing queries (20-34), peeks and defaulting (35-41), promotion and undo (42-46),
lineages and predicates (47-50), the scheduler (51-54) and the schedule-cache digest (55).

Rows 1-50 and 55 exercise the Placements table directly on tensor-level UOps; rows 51-54 run the scheduler
(see test_placements_schedule.py for the end-to-end programs). Conventions: p0 the existing provenance,
p the new one; "small" is 100 float32 elements, "large" 5000 (20 000 bytes > 16 384); nodes are unobservable and
not aliases unless the row says so.
"""
from __future__ import annotations

import pytest

from tolk_core import config
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule import placements as pm
from tolk_core.schedule.placements import (
    EC,
    NV,
    OD,
    L,
    Lineage,
    PlacementConflict,
    Placements,
    PlacementUndecided,
    PlacementUserError,
    Provenance,
    V,
)

p0 = Provenance.site(900, "p0")
p = Provenance.site(901, "p")
_keep: list[UOp] = []  # the tables are weak: keep the nodes of each test alive


def node(numel: int = 100, observable: bool = False) -> UOp:
    """A fresh computed float32 value of `numel` elements (distinct per call: a new BUFFER under it)."""
    buf = UOp.new_buffer("CPU", numel, dtypes.float32)
    u = UOp(Op.EXP2, dtypes.float32, (buf,))
    _keep.append(u)
    if observable:
        pm.mark_observable(u)
    return u


def alias() -> UOp:
    """A slice alias: a view of storage that owns no buffer."""
    buf = UOp.new_buffer("CPU", 100, dtypes.float32)
    u = UOp(Op.SHRINK, dtypes.float32, (buf,), ((10, 20),))
    _keep.append(u)
    return u


def with_state(mode, prov=p0, n: int = 100, observable: bool = False) -> tuple[Placements, UOp]:
    """A fresh table whose entry for a fresh node is (mode, prov)."""
    t, u = Placements.create(), node(n, observable)
    t.update(u, mode, prov)
    return t, u


# ---------------------------------------------------------------- rows 1-19: the update lattice
def test_row01_none_update_virtual() -> None:
    t, u = Placements.create(), node()
    t.update(u, V, p)
    assert t.raw_entry(u) == (V, p) and pm.intent(u) is None


def test_row02_none_update_local() -> None:
    t, u = Placements.create(), node()
    t.update(u, L, p)
    assert t.raw_entry(u) == (L, p)


@pytest.mark.parametrize("row, req, want", [(3, V, (V, p)), (4, NV, (OD, p)), (5, OD, (OD, p)), (7, EC, (EC, p0))])
def test_rows03_07_from_effectively_constant(row, req, want) -> None:
    t, u = with_state(EC)
    t.update(u, req, p)
    assert t.get(u) == want


def test_row06_constant_to_local_conflicts_and_writes_nothing() -> None:
    t, u = with_state(EC)
    with pytest.raises(PlacementConflict, match=r"EXP2\(100, float32\).*Eff-const/900:p0.*Local/901:p"):
        t.update(u, L, p)
    assert t.raw_entry(u) == (EC, p0)


def test_row08_virtual_absorbs_constant() -> None:
    t, u = with_state(V)
    t.update(u, EC, p)
    assert t.get(u) == (V, p0)


def test_row09_virtual_then_never_virtual_is_a_user_error() -> None:
    t, u = with_state(V)
    with pytest.raises(PlacementUserError,
                       match=r"EXP2\(100, float32\) is already virtual.*Virtual/900:p0.*Never-virt"):
        t.update(u, NV, p)
    assert t.get(u) == (V, p0)


def test_row10_virtual_to_on_device_conflicts() -> None:
    t, u = with_state(V)
    with pytest.raises(PlacementConflict, match="Virtual/900:p0.*On-dev/901:p"):
        t.update(u, OD, p)


def test_row11_never_virtual_to_virtual_is_a_user_error() -> None:
    t, u = with_state(NV)
    with pytest.raises(PlacementUserError, match=r"EXP2\(100, float32\) cannot be virtual.*Never-virt/900:p0.*Virtual"):
        t.update(u, V, p)
    assert t.get(u) == (NV, p0)


@pytest.mark.parametrize("row, req, want", [(12, L, (L, p)), (13, EC, (OD, p))])
def test_rows12_13_from_never_virtual(row, req, want) -> None:
    t, u = with_state(NV)
    t.update(u, req, p)
    assert t.get(u) == want


def test_row14_local_to_on_device_conflicts_decisions_are_final() -> None:
    t, u = with_state(L)
    with pytest.raises(PlacementConflict, match="Local/900:p0.*On-dev/901:p"):
        t.update(u, OD, p)
    assert t.get(u) == (L, p0)


def test_row15_local_absorbs_never_virtual() -> None:
    t, u = with_state(L)
    t.update(u, NV, p)
    assert t.get(u) == (L, p0)


def test_row16_on_device_absorbs_constant_and_never_virtual() -> None:
    t, u = with_state(OD)
    t.update(u, EC, p)
    assert t.get(u) == (OD, p0)
    t.update(u, NV, p)
    assert t.get(u) == (OD, p0)


def test_row17_on_device_to_local_conflicts() -> None:
    t, u = with_state(OD)
    with pytest.raises(PlacementConflict):
        t.update(u, L, p)


def test_row18_update_never_writes_intent() -> None:
    t, u = Placements.create(), node()
    pm.declare(u, NV, p0)
    t.update(u, L, p)
    assert t.raw_entry(u) == (L, p) and pm.intent(u) == (NV, p0)


def test_row19_unchanged_update_still_creates_an_entry() -> None:
    t, u = Placements.create(), node()
    pm.declare(u, OD, p0)
    assert t.raw_entry(u) is None
    t.update(u, OD, p)
    assert t.raw_entry(u) == (OD, p0)


def test_full_lattice_table() -> None:
    """Every cell of the lattice table (docs/placements.md): acc (accepted: the mode listed, with the new provenance),
    unch (unchanged: the old entry), ue (PlacementUserError), ia (inconsistent: PlacementConflict)."""
    acc, unch, ue, ia = "acc", "unch", PlacementUserError, PlacementConflict
    table = {
        None: {EC: (acc, EC), V: (acc, V), NV: (acc, NV), L: (acc, L), OD: (acc, OD)},
        EC: {EC: unch, V: (acc, V), NV: (acc, OD), L: ia, OD: (acc, OD)},
        V: {EC: unch, V: unch, NV: ue, L: ia, OD: ia},
        NV: {EC: (acc, OD), V: ue, NV: unch, L: (acc, L), OD: (acc, OD)},
        L: {EC: ia, V: ia, NV: unch, L: unch, OD: ia},
        OD: {EC: unch, V: ia, NV: unch, L: ia, OD: unch},
    }
    for cur, row in table.items():
        for req, want in row.items():
            before = None if cur is None else (cur, p0)
            if isinstance(want, type):
                with pytest.raises(want):
                    pm.transition(before, req, p)
            elif want == unch:
                assert pm.transition(before, req, p) == before
            else:
                assert pm.transition(before, req, p) == (want[1], p), (cur, req)


# ---------------------------------------------------------------- rows 20-34: forcing queries
def test_row20_virtual_force_defaults_undecided_to_virtual() -> None:
    t, u = Placements.create(), node()
    assert t.is_virtual_force(u, p) is True and t.raw_entry(u) == (V, p)


def test_row21_virtual_force_on_observable_undecided_materializes() -> None:
    t, u = Placements.create(), node(observable=True)
    assert t.is_virtual_force(u, p) is False and t.raw_entry(u) == (OD, p)


def test_row22_virtual_force_folds_constant_with_plain_provenance() -> None:
    t, u = with_state(EC, observable=True)
    assert t.is_virtual_force(u, p) is True and t.raw_entry(u) == (V, p)


def test_row23_virtual_force_on_never_virtual_writes_nothing() -> None:
    t, u = Placements.create(), node()
    pm.declare(u, NV, p0)
    assert t.is_virtual_force(u, p) is False and t.raw_entry(u) is None
    t2, u2 = with_state(NV)
    assert t2.is_virtual_force(u2, p) is False and t2.raw_entry(u2) == (NV, p0)


def test_row24_materialized_force_on_undecided_raises() -> None:
    t, u = Placements.create(), node()
    with pytest.raises(PlacementUndecided, match=r"EXP2\(100, float32\)"):
        t.is_materialized_force(u, p)


@pytest.mark.parametrize("row, n, observable, answer, mode", [
    (25, 100, False, False, L), (26, 5000, False, True, OD), (27, 100, True, True, OD)])
def test_rows25_27_materialized_force_settles_never_virtual(row, n, observable, answer, mode) -> None:
    t, u = with_state(NV, n=n, observable=observable)
    assert t.is_materialized_force(u, p) is answer
    assert t.raw_entry(u) == (mode, Provenance.refined(p0, p))


def test_row28_materialized_force_folds_constant_refined() -> None:
    t, u = with_state(EC)
    assert t.is_materialized_force(u, p) is False and t.raw_entry(u) == (V, Provenance.refined(p0, p))


@pytest.mark.parametrize("query, answer", [("is_virtual_force", False), ("is_materialized_force", True),
                                           ("is_in_context_force", True)])
def test_row29_settled_intent_answers_without_entries(query, answer) -> None:
    t, u = Placements.create(), node()
    pm.declare(u, OD, p0)
    assert getattr(t, query)(u, p) is answer and len(t) == 0


def test_row30_in_context_force_defaults_undecided_to_virtual() -> None:
    t, u = Placements.create(), node()
    assert t.is_in_context_force(u, p) is False and t.raw_entry(u) == (V, p)


def test_row31_in_context_force_on_observable_undecided_materializes() -> None:
    t, u = Placements.create(), node(observable=True)
    assert t.is_in_context_force(u, p) is True and t.raw_entry(u) == (OD, p)


def test_row32_alias_is_never_in_context() -> None:
    t, a = Placements.create(), alias()
    t.update(a, OD, p0)
    assert t.is_in_context_force(a, p) is False and t.raw_entry(a) == (OD, p0)


def test_row33_undecided_alias_records_nothing() -> None:
    t, a = Placements.create(), alias()
    assert t.is_in_context_force(a, p) is False and len(t) == 0


def test_row34_threshold_zero_turns_the_size_check_off() -> None:
    t, u = with_state(NV, n=5000)
    with config.override(PLACEMENT_STACK_THRESHOLD=0):
        assert t.is_in_context_force(u, p) is False
    assert t.raw_entry(u) == (L, Provenance.refined(p0, p))


def test_threshold_is_read_at_query_time() -> None:
    """NV of 100 float32 (400 bytes) is Local under the default, On_device under a 256-byte threshold."""
    t, u = with_state(NV, n=100)
    with config.override(PLACEMENT_STACK_THRESHOLD=256):
        assert t.is_materialized_peek(u) is True
    assert t.is_materialized_peek(u) is False


# ---------------------------------------------------------------- rows 35-41: peeks and defaulting
def test_row35_peek_small_never_virtual_agrees_with_force() -> None:
    t, u = with_state(NV)
    assert t.is_materialized_peek(u) is False and t.raw_entry(u) == (NV, p0)
    assert t.is_materialized_force(u, p) is False


@pytest.mark.parametrize("n, observable", [(5000, False), (100, True)])
def test_row36_peek_large_or_observable_never_virtual(n, observable) -> None:
    t, u = with_state(NV, n=n, observable=observable)
    assert t.is_materialized_peek(u) is True and t.raw_entry(u) == (NV, p0)


@pytest.mark.parametrize("mode", [EC, V, L])
def test_row37_peek_not_materialized(mode) -> None:
    t, u = with_state(mode)
    assert t.is_materialized_peek(u) is False


def test_row38_peek_on_undecided_raises() -> None:
    with pytest.raises(PlacementUndecided):
        Placements.create().is_materialized_peek(node())


def test_row39_default_folds_observable_constant_refined() -> None:
    t, u = with_state(EC, observable=True)
    t.default_to_most_local(u, p)
    assert t.get(u) == (V, Provenance.refined(p0, p))


@pytest.mark.parametrize("mode", [V, L, OD])
def test_row40_default_leaves_settled_states(mode) -> None:
    t, u = with_state(mode)
    t.default_to_most_local(u, p)
    assert t.get(u) == (mode, p0)


def test_row41_refinement_chains() -> None:
    a, b, c = Provenance.site(1, "a"), Provenance.site(2, "b"), Provenance.site(3, "c")
    t, u = with_state(NV, prov=a)
    t.default_to_most_local(u, b)
    assert t.get(u) == (L, Provenance.refined(a, b))
    chain = Provenance.refined(Provenance.refined(a, b), c)
    assert str(chain) == "1:a -> 2:b -> 3:c" and chain.leading() == a
    assert Provenance.INLINE_REDUCTION_CAP.leading() is Provenance.INLINE_REDUCTION_CAP


# ---------------------------------------------------------------- rows 42-46: promotion and undo
def test_row42_promote_and_restore_a_local_entry() -> None:
    t, u = with_state(L)
    prior = t.raw_entry(u)
    t.promote_local_to_device(u, p)
    assert t.get(u) == (OD, p)
    t.unsafe_restore(u, prior)
    assert t.get(u) == (L, p0)


def test_row43_restore_none_falls_back_to_intent() -> None:
    t, u = Placements.create(), node()
    pm.declare(u, NV, p0)
    prior = t.raw_entry(u)
    assert prior is None
    t.promote_local_to_device(u, p)
    assert t.raw_entry(u) == (OD, p)
    t.unsafe_restore(u, prior)
    assert t.raw_entry(u) is None and t.get(u) == (NV, p0)


def test_row44_promote_undecided() -> None:
    t, u = Placements.create(), node()
    t.promote_local_to_device(u, p)
    assert t.raw_entry(u) == (OD, p)


def test_row45_promote_on_device_is_a_no_op() -> None:
    t, u = with_state(OD)
    t.promote_local_to_device(u, p)
    assert t.get(u) == (OD, p0)


@pytest.mark.parametrize("mode", [V, EC])
def test_row46_promote_virtual_or_constant_conflicts(mode) -> None:
    t, u = with_state(mode)
    with pytest.raises(PlacementConflict, match="not kernel-scoped scratch"):
        t.promote_local_to_device(u, p)
    assert t.get(u) == (mode, p0)


# ---------------------------------------------------------------- rows 47-50: lineages and predicates
def test_row47_child_writes_are_hermetic() -> None:
    parent, x = Placements.create(), node()
    child, sibling = parent.copy(), parent.copy()
    child.update(x, V, p)
    assert parent.get(x) is None and sibling.get(x) is None and child.get(x) == (V, p)


def test_row48_copy_is_a_snapshot() -> None:
    parent, y = Placements.create(), node()
    child = parent.copy()
    parent.update(y, OD, p)
    assert child.get(y) is None


def test_row49_lineage_shadows_newer_intent() -> None:
    t, x = Placements.create(), node()
    t.update(x, V, p0)
    pm.declare(x, OD, p)
    assert t.get(x) == (V, p0)
    assert Placements.create().get(x) == (OD, p)


def test_row50_known_predicates_matrix() -> None:
    rows = {  # state: (not_materialized, constant, non_virtual, virtual, unspecified)
        None: (False, False, False, False, True), EC: (False, True, False, False, True),
        V: (True, False, False, True, False), NV: (False, False, True, False, True),
        L: (True, False, True, False, False), OD: (False, False, True, False, False)}
    for state, want in rows.items():
        t, u = (Placements.create(), node()) if state is None else with_state(state)
        got = (t.known_not_materialized(u), t.known_constant(u), t.known_non_virtual(u), t.known_virtual(u),
               t.mode_is_unspecified(u))
        assert got == want, state
        # the same matrix at node level (intent only)
        v = node()
        if state is not None:
            pm.declare(v, state, p0)
        fresh = Placements.create()
        assert (fresh.known_not_materialized(v), fresh.known_constant(v), fresh.known_non_virtual(v),
                fresh.known_virtual(v), fresh.mode_is_unspecified(v)) == want


# ---------------------------------------------------------------- rows 51-54 against the scheduler
def test_row51_later_compile_reading_a_local_is_a_user_error() -> None:
    """A lineage settled x Local in an earlier compile; a later compile reads x's storage without computing it."""
    from tolk_core.schedule.rangeify import realize_points
    x = UOp.new_buffer("CPU", 100, dtypes.float32)
    lineage = Lineage()
    lineage.placements.update(x, L, pm.Provenance.site(16, "scope-local"))
    y = UOp(Op.EXP2, dtypes.float32, (x,))
    with pytest.raises(PlacementUserError, match=r"BUFFER\(100, float32\).*Local.*mark it materialized"):
        realize_points([y], lineage.begin())


def test_row52_decide_materialized_sibling() -> None:
    """The placement side of row 52 (numbers and kernel counts: test_placements_schedule.py)."""
    base, x = Lineage(), node()
    child = base.decide_materialized([x])
    assert child.placements.raw_entry(x) == (OD, pm.DECIDE_MATERIALIZED) and pm.DECIDE_MATERIALIZED.code == 31
    assert base.placements.raw_entry(x) is None and pm.intent(x) is None
    v = node()
    base.placements.update(v, V, p0)
    assert base.decide_materialized([v]).placements.raw_entry(v) == (V, p0)  # V, L, EC are skipped


def test_rows53_54_fission_promotes_crossing_locals_and_undoes_on_coalesce() -> None:
    """Row 53: a Local written in kernel 1 and read in kernel 2 is promoted On_device (177) before the kernels are
    scheduled; row 54: when the kernels coalesce into one, the promotion is undone (back to L/p0)."""
    t, u = with_state(L)
    inner, _ = with_state(L)
    undo = pm.promote_crossing(t, {u: {1, 2}})
    assert t.get(u) == (OD, pm.FISSION) and pm.FISSION.code == 177 and list(undo) == [u]
    pm.undo_promotions(t, undo, {u: {1, 2}})
    assert t.get(u) == (OD, pm.FISSION)           # still crossing: kept
    pm.undo_promotions(t, undo, {u: {1}})
    assert t.get(u) == (L, p0)


# ---------------------------------------------------------------- row 55: the schedule-cache digest
def test_row55_digest_tells_local_from_on_device() -> None:
    u = node()
    sink = UOp(Op.SINK, dtypes.void, (u,))
    a, b = Placements.create(), Placements.create()
    a.update(u, L, p)
    b.update(u, OD, p)
    assert pm.digest(sink, a) != pm.digest(sink, b)
    c = Placements.create()
    c.update(u, L, p0)  # provenance is not part of the placement class
    assert pm.digest(sink, a) == pm.digest(sink, c)


# ---------------------------------------------------------------- the provenance codes
def test_provenance_codes_are_distinct_and_documented() -> None:
    """Every provenance tag defined in placements.py and rangeify.py has a code of its own (DEBUG>=3 prints the
    code, so one code with two meanings would make a dump ambiguous), and both tables of codes list it: the
    docstring of `Provenance` and docs/placements.md."""
    import re
    from pathlib import Path

    from tolk_core.schedule import rangeify

    tags = {v for mod in (pm, rangeify, Provenance) for v in vars(mod).values()
            if isinstance(v, Provenance) and not v.is_refined}
    by_code: dict[int, set[str]] = {}
    for t in tags:
        by_code.setdefault(t.code, set()).add(t.reason)
    assert {c: r for c, r in by_code.items() if len(r) > 1} == {}
    assert len(tags) == 22 and pm.REALIZE.code != pm.CONTIGUOUS.code
    doc = (Path(__file__).resolve().parents[2] / "docs" / "placements.md").read_text()
    doc_rows = set(re.findall(r"^\| (\d+) \| `([a-z-]+)` \|", doc, re.M))
    docstring_rows = set(re.findall(r"^ {4}(\d+) +([a-z-]+) ", Provenance.__doc__, re.M))
    want = {(str(t.code), t.reason) for t in tags}
    assert doc_rows == want and docstring_rows == want
