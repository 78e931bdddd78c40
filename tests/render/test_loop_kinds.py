"""Loop annotations as `LoopKind`: the optimizer hands renderers members, members equal the strings they
replace, and the old plain-string forms still render the same pragmas while warning (DeprecationWarning naming
the member) for one minor release."""
from __future__ import annotations

import re
import warnings

import pytest
from tolk_cpu.renderer import CRenderer

from tolk_core.codegen import generate, kernel_params
from tolk_core.codegen.linearize import linearize
from tolk_core.codegen.optimize import optimize
from tolk_core.render.cstyle import CStyleRenderer
from tolk_core.render.renderer import LoopKind
from tolk_core.testing import kernels

# kernels whose loops get every kind but PARALLEL_REDUCE (scheduled on PYTHON: nothing runs)
PROGRAMS = {
    "wide": (lambda a: a * 2 + 1, [((2048, 1024), "float32")]),      # PARALLEL outer, SIMD inner
    "long": (lambda a: a * 2 + 1, [((1 << 21,), "float32")]),        # one loop: PARALLEL_SIMD
    "matmul": (lambda a, b: a @ b, [((64, 64), "float32"), ((64, 64), "float32")]),  # register-blocked: UNROLL4
    "short_sum": (lambda a: a.sum(axis=1), [((64, 8), "float32")]),  # UNROLL
}


def _asts(name: str):
    fn, specs = PROGRAMS[name]
    return [call.src[0] for call in kernels.build(fn, *specs).calls]


def _kinds(name: str) -> set[LoopKind]:
    return {k for a in _asts(name) for k in optimize(a.simplify(), CRenderer()).loop_kinds.values()}


def test_members_equal_and_hash_as_the_strings_they_replace():
    old = {"": "PLAIN", "parallel": "PARALLEL", "simd": "SIMD", "parallel simd": "PARALLEL_SIMD",
           "parallel reduce": "PARALLEL_REDUCE",
           "parallel tiles": "PARALLEL_TILES", "unroll": "UNROLL", "unroll4": "UNROLL4"}
    assert {m.value: m.name for m in LoopKind} == old
    for text, name in old.items():
        member = LoopKind[name]
        assert member == text and {text: name}[member] == name and f"{member}" == text


def test_the_optimizer_annotates_loops_with_members():
    assert _kinds("wide") == {LoopKind.PARALLEL, LoopKind.SIMD}
    assert _kinds("long") == {LoopKind.PARALLEL_SIMD}
    assert LoopKind.UNROLL4 in _kinds("matmul") and LoopKind.UNROLL in _kinds("short_sum")
    kinds = [k for n in PROGRAMS for a in _asts(n) for k in optimize(a.simplify(), CRenderer()).loop_kinds.values()]
    assert all(type(k) is LoopKind for k in kinds)


def test_members_render_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        sources = [generate(a, CRenderer()).source for n in PROGRAMS for a in _asts(n)]
    text = "\n".join(sources)
    for pragma in ("#pragma omp parallel for\n", "#pragma omp simd\n", "#pragma omp parallel for simd\n",
                   "#pragma GCC unroll 4\n", "#pragma GCC unroll 16\n"):
        assert pragma in text, pragma


def test_a_string_keyed_pragma_table_warns_and_renders_the_same():
    with pytest.warns(DeprecationWarning) as rec:
        class OldTable(CStyleRenderer):
            loop_pragmas = {"parallel": "#pragma omp parallel for", "simd": "#pragma omp simd"}
    assert sorted(str(w.message).split(":")[0] for w in rec) == \
        ["loop kind 'parallel' given as a plain string", "loop kind 'simd' given as a plain string"]
    assert sorted(re.search(r"use (LoopKind\.\w+)", str(w.message))[1] for w in rec) == \
        ["LoopKind.PARALLEL", "LoopKind.SIMD"]
    assert {w.filename for w in rec} == {__file__}  # blamed on the class statement

    class NewTable(CStyleRenderer):
        loop_pragmas = {LoopKind.PARALLEL: "#pragma omp parallel for", LoopKind.SIMD: "#pragma omp simd"}
    assert all(type(k) is LoopKind for k in OldTable.loop_pragmas)
    old, new = generate(_asts("wide")[0], OldTable()).source, generate(_asts("wide")[0], NewTable()).source
    assert old == new and "#pragma omp parallel for\n" in new and "#pragma omp simd\n" in new


class PassesStrings(CRenderer):
    """A dialect written before LoopKind: it hands its base the plain-string form of the kind."""

    def loop_pragma(self, kind, folds):
        return super().loop_pragma(kind.value, folds)


def test_a_subclass_passing_strings_to_loop_pragma_warns_and_renders_the_same():
    for name in PROGRAMS:
        for a in _asts(name):
            want = generate(a, CRenderer()).source
            with pytest.warns(DeprecationWarning, match=r"given as a plain string: use LoopKind\.") as rec:
                got = generate(a, PassesStrings()).source
            assert got == want
            named = {m for w in rec for m in re.findall(r"use LoopKind\.(\w+)", str(w.message))}
            kinds = {k.name for k in optimize(a.simplify(), CRenderer()).loop_kinds.values()}
            assert kinds <= named <= kinds | {"PLAIN"}  # every kind's warning names it; unannotated loops PLAIN


def test_string_loop_kinds_given_to_render_kernel_warn_and_render_the_same():
    r = CRenderer()
    for a in _asts("matmul"):
        plan = optimize(a.simplify(), r)
        lin, params = linearize(plan.ast, plan.guard), kernel_params(plan.ast)
        want = r.render_kernel("k", lin, params, plan.loop_kinds)
        with pytest.warns(DeprecationWarning, match="given as a plain string") as rec:
            got = r.render_kernel("k", lin, params, {u: k.value for u, k in plan.loop_kinds.items()})
        assert got == want and "#pragma GCC unroll 4" in want
        assert "loop kind 'unroll4' given as a plain string: use LoopKind.UNROLL4" in {str(w.message)[:65] for w in rec}


def test_a_string_naming_no_kind_is_an_error():
    with pytest.raises(ValueError, match=r"unknown loop kind 'unroll8'; the kinds are LoopKind.PLAIN, "):
        LoopKind.of("unroll8")
    with pytest.raises(ValueError, match="unknown loop kind 'vectorize'"):
        CRenderer().loop_pragma("vectorize", ())


def test_the_example_plugins_string_test_still_selects_its_pragma(example_renderer):
    """The example plugin (unmodified) tests `"simd" in kind`: true for SIMD and PARALLEL_SIMD members."""
    r = example_renderer()
    got = {k: r.loop_pragma(k, ()) for k in LoopKind}
    assert got == {k: "#pragma GCC ivdep" if k in (LoopKind.SIMD, LoopKind.PARALLEL_SIMD) else None for k in LoopKind}
    assert "#pragma GCC ivdep\n    for (int r1" in generate(_asts("wide")[0], r).source
