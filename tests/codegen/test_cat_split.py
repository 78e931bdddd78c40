"""A kernel with no reduction whose gates compare an output range with constants (a cat, a pad) is cut at those
constants into pieces that each read one input ungated (codegen/borders.py, `split_at_gates`). Values against
numpy for cats along every axis, parts of one element, odd sizes and pads; on the CPU source of a cat of
contiguous parts: no gate left and no division or remainder in the indices."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tolk_core.codegen import generate
from tolk_core.engine.schedule import schedule
from tolk_core.engine.target import target_for
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device


def _body(t: Tensor) -> str:
    """The one kernel's CPU source, its signature line left out."""
    linear, _, _ = schedule(target_for("CPU"), [t.uop])
    srcs = [generate(call.src[0], Device["CPU"].renderer).source for call in linear.src]
    assert len(srcs) == 1
    return srcs[0].split("{", 1)[1]


def _parts(shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    rng = np.random.default_rng(len(shapes))
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("shapes, axis", [
    ([(1, 4, 64, 32)] * 3, 0),          # the q, k, v gradients of an attention step
    ([(2, 5, 3), (2, 7, 3)], 1),        # odd parts along a middle axis
    ([(3, 5), (3, 1), (3, 6)], 1),      # a part of one element along the innermost axis
    ([(1, 6), (1, 6), (1, 6), (1, 6)], 0),
])
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])  # PYTHON: the reference renderer meets the pieces too
def test_a_cat_matches_numpy(shapes, axis, device):
    arrays = _parts(shapes)
    t = Tensor.cat(*[Tensor(a, device=device) for a in arrays], dim=axis)
    np.testing.assert_array_equal(t.numpy(), np.concatenate(arrays, axis=axis))


def test_a_cat_of_contiguous_parts_reads_them_ungated_with_plain_indices():
    arrays = _parts([(1, 4, 64, 32)] * 3)
    t = Tensor.cat(*[Tensor(a) for a in arrays], dim=0)
    body = _body(t)
    assert not re.search(r"[/%]", body), body   # every index a sum of range multiples
    assert not re.search(r"\(r\d+<\d+\)", body), body  # no gate on a range (a loop's own bound is "r1 < 8")
    np.testing.assert_array_equal(t.numpy(), np.concatenate(arrays, axis=0))


@pytest.mark.parametrize("pad", [((2, 3), (0, 0)), ((0, 0), (1, 4)), ((1, 1), (2, 2))])
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_pad_matches_numpy(pad, device):
    (a,) = _parts([(5, 7)])
    t = Tensor(a, device=device).pad(pad)
    np.testing.assert_array_equal(t.numpy(), np.pad(a, pad))
