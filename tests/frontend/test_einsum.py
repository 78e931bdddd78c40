"""einsum against numpy's on a table of formulas (explicit and implicit output, diagonals, ellipsis broadcast,
sums of unused labels, several operands), int dtypes, gradients against torch, and the formula errors."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core.errors import ArgumentTypeError, ShapeError
from tolk_core.frontend.tensor import Tensor

RNG = np.random.default_rng(0)

CASES = [  # (formula, operand shapes)
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii", [(4, 4)]),
    ("ii->i", [(4, 4)]),
    ("iii->i", [(3, 3, 3)]),
    ("iji->j", [(3, 5, 3)]),
    ("ij->ji", [(3, 4)]),
    ("ba", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,j", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("...j,jk->...k", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("...ii", [(2, 3, 3)]),
    ("i...->...", [(3, 2, 4)]),
    ("a...b,b...c->...ac", [(2, 3, 4), (4, 3, 5)]),
    ("Ab,bC->CA", [(2, 3), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ijk,ikj->i", [(2, 3, 4), (2, 4, 3)]),
    (" i j , j k -> i k ", [(3, 4), (4, 2)]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),
    ("ij->i", [(0, 4)]),
    ("", [()]),
    (",i->i", [(), (3,)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("formula,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_numpy(device, formula, shapes, dtype) -> None:
    arrays = [RNG.integers(-3, 4, size=s).astype(dtype) for s in shapes]
    want = np.einsum(formula, *arrays)
    got = Tensor.einsum(formula, *[Tensor(a, device=device) for a in arrays])
    assert got.dtype.name == Tensor(arrays[0]).dtype.name
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_top_level_einsum_and_a_list_of_operands() -> None:
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4,)).astype(np.float32)
    np.testing.assert_allclose(tolk_core.einsum("ij,j->i", [Tensor(a), Tensor(b)]).numpy(), a @ b, rtol=1e-5)


def test_size_one_label_broadcasts_as_torch() -> None:
    torch = pytest.importorskip("torch")
    a, b = RNG.standard_normal((3, 1)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32)
    want = torch.einsum("ij,jk->ik", torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_allclose(Tensor.einsum("ij,jk->ik", Tensor(a), Tensor(b)).numpy(), want, rtol=1e-5)


def test_einsum_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    a, b = RNG.standard_normal((2, 3, 3)).astype(np.float32), RNG.standard_normal((2, 3, 4)).astype(np.float32)
    g = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (torch.einsum("bij,bjk->bik", ta, tb) * torch.tensor(g)).sum().backward()
    torch.einsum("bii->", ta).backward()
    oa, ob = Tensor(a).requires_grad_(), Tensor(b).requires_grad_()
    ((Tensor.einsum("bij,bjk->bik", oa, ob) * Tensor(g)).sum() + Tensor.einsum("bii->", oa)).backward()
    np.testing.assert_allclose(oa.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ob.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("formula,shapes,match", [
    ("ij,jk->il", [(2, 3), (3, 4)], "each output label must appear once, and in some input"),
    ("ij->ii", [(2, 2)], "each output label must appear once"),
    ("ijk->i", [(2, 3)], "does not match an operand of 2 dimension"),
    ("ij,jk", [(2, 3)], "names 2 operand"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has sizes 3 and 4"),
    ("ii->i", [(2, 3)], "repeats in one operand over axes of sizes 2 and 3"),
    ("...i...->i", [(2, 3)], "at most one '...'"),
    ("i1->i", [(2, 3)], "labels are letters"),
])
def test_formula_errors_are_named(formula, shapes, match) -> None:
    with pytest.raises(ShapeError, match=match):
        Tensor.einsum(formula, *[Tensor(np.zeros(s, np.float32)) for s in shapes])


def test_non_tensor_operands_are_refused() -> None:
    with pytest.raises(ArgumentTypeError, match="takes Tensors as operands, got ndarray"):
        Tensor.einsum("i->i", np.zeros(3))
