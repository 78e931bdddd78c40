"""Generated code is unchanged: every program of the kernel corpus, regenerated for every renderer, equals the
stored source byte for byte (tests/fixtures/kernel_corpus/<renderer>.json, written by
`python -m tests.render.kernel_corpus --write`; see that module for what is stored and when regenerating is
allowed)."""
from __future__ import annotations

import pytest

from tests.render import kernel_corpus

SHOWN = 5  # mismatching programs whose diffs are printed in full


@pytest.mark.parametrize("renderer", list(kernel_corpus.RENDERERS))
def test_generated_code_matches_corpus(renderer: str) -> None:
    stored = kernel_corpus.load(renderer)
    assert stored, f"the {renderer} corpus file holds no programs"
    problems = kernel_corpus.differences(renderer, stored, kernel_corpus.corpus(renderer))
    if problems:
        more = f"\n\n... and {len(problems) - SHOWN} more program(s)" if len(problems) > SHOWN else ""
        pytest.fail(f"{len(problems)} program(s) of the {renderer} corpus changed. If the change of generated code "
                    "is intended, regenerate with `python -m tests.render.kernel_corpus --write` in its own commit "
                    "saying why.\n\n" + "\n\n".join(problems[:SHOWN]) + more, pytrace=False)


def test_renderers_are_pinned() -> None:
    """The corpus's renderers carry the pinned capabilities, not the machine's: an OpenCL renderer made without a
    device reports no CPU threads and no extensions, the corpus's has the fixed ones."""
    from tolk_opencl.renderer import OpenCLRenderer
    bare = OpenCLRenderer()
    assert bare.cpu_threads == 0 and not bare.extensions
    pinned = kernel_corpus.make_renderer("opencl")
    assert pinned.cpu_threads == 2 and pinned.extensions == frozenset(kernel_corpus.OPENCL_EXTENSIONS)
    for name, (_, attrs) in kernel_corpus.RENDERERS.items():
        r = kernel_corpus.make_renderer(name)
        assert {a: getattr(r, a) for a in kernel_corpus.PINNED_ATTRS} == attrs, name
