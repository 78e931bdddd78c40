"""Einstein summation: `Tensor.einsum(formula, *operands)` (also `tolk_core.einsum`), numpy's and torch's
notation (ONNX's Einsum).

An op belongs here when it parses a subscript formula. The formula names each operand's axes by letters
(a-z, A-Z); `...` stands for the broadcast axes the named ones leave, aligned on the right across operands as
numpy broadcasts. With `->` the output's labels are given; without it (implicit) the output is the broadcast
axes, then every label used exactly once, in alphabetical (ASCII) order, as numpy.

Lowering, movement ops and reductions only:
1. per operand, a label repeated within it takes the diagonal (the axes are moved last, flattened, and every
   (n+1)-th element read: `Tensor._strided`); a label in no other operand and not in the output is summed out;
2. the operands are combined left to right: each pair is permuted onto the union of its labels, size-1 axes
   inserted for the missing ones, multiplied (broadcast) and summed over the labels no later operand and not
   the output uses — a contraction, the product-and-sum `matmul` is, fused into one reduce kernel;
3. the result is permuted into the output's order.
Sizes of one label must agree (a size 1 broadcasts, as torch). The result dtype is the operands' promoted dtype;
integers accumulate in it (as torch and numpy's einsum), bools combine as or-of-ands.
Formula mistakes (an output label no input has, a repeated output label, a label count that does not match an
operand's rank, two `...`) raise ShapeError naming the formula and the problem.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tolk_core.errors import ArgumentTypeError, ShapeError
from tolk_core.frontend.arguments import check_devices
from tolk_core.ir.dtype import least_upper_dtype

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor

Labels = list[str]  # one label per axis; a broadcast (`...`) axis is "." plus its position from the right


def _split_terms(formula: str, ranks: list[int]) -> tuple[list[Labels], Labels | None]:
    """The labels of each input term, and of the output (None: implicit), ellipses expanded."""
    text = formula.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ShapeError(f"einsum {formula!r} names {len(terms)} operand(s), but {len(ranks)} were given")
    width = 0
    for t, r in zip(terms, ranks, strict=True):
        named = len(t.replace("...", ""))
        if "..." in t:
            width = max(width, r - named)
    ins = [_expand(t, r, formula) for t, r in zip(terms, ranks, strict=True)]
    return ins, _expand(rhs, None, formula, width) if arrow else None


def _expand(term: str, rank: int | None, formula: str, width: int = 0) -> Labels:
    """A term's labels; `...` becomes its broadcast axes ("." + position from the right). `rank` None: the
    output, whose `...` has the full broadcast `width`."""
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise ShapeError(f"einsum {formula!r}: a term has at most one '...' (and no other dots), got {term!r}")
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if not c.isascii() or not c.isalpha():
            raise ShapeError(f"einsum {formula!r}: labels are letters a-z, A-Z, got {c!r}")
    n = (width if rank is None else rank - len(head) - len(tail)) if dots else 0
    if rank is not None and (n < 0 or (not dots and len(head) != rank)):
        raise ShapeError(f"einsum {formula!r}: term {term!r} does not match an operand of {rank} dimension(s)")
    return list(head) + [f".{n - 1 - i}" for i in range(n)] + list(tail)


def _implicit_output(ins: list[Labels]) -> Labels:
    """numpy's implicit output: the broadcast axes (widest first), then the labels used once, sorted."""
    every = [lab for t in ins for lab in t]
    dots = sorted({lab for lab in every if lab.startswith(".")}, key=lambda lab: -int(lab[1:]))
    return dots + sorted(lab for lab in set(every) if not lab.startswith(".") and every.count(lab) == 1)


def _diagonals(x: Tensor, labels: Labels) -> tuple[Tensor, Labels]:
    """x with each repeated label reduced to its diagonal: distinct labels, in first-seen order."""
    while len(set(labels)) < len(labels):
        lab = next(lab for lab in labels if labels.count(lab) > 1)
        a, b = [i for i, v in enumerate(labels) if v == lab][:2]
        n = x.shape[a]
        if x.shape[b] != n:
            raise ShapeError(f"einsum: label {lab!r} repeats in one operand over axes of sizes {n} and {x.shape[b]}")
        rest = [i for i in range(x.ndim) if i not in (a, b)]
        x = x.permute(rest + [a, b]).reshape(tuple(x.shape[i] for i in rest) + (n * n,))
        x = x._strided([1] * len(rest) + [n + 1]) if n > 1 else x
        labels = [labels[i] for i in rest] + [lab]
    return x, labels


def _sum_out(x: Tensor, labels: Labels, keep: set[str]) -> tuple[Tensor, Labels]:
    """x summed over the labels not in `keep` (integers accumulate in their own dtype)."""
    axes = tuple(i for i, lab in enumerate(labels) if lab not in keep)
    if not axes:
        return x, labels
    kind = x.dtype.kind
    out = x.max(axis=axes) if kind == "b" else x.sum(axis=axes, dtype=x.dtype if kind in "iu" else None)
    return out, [lab for lab in labels if lab in keep]


def _aligned(x: Tensor, labels: Labels, order: Labels) -> Tensor:
    """x permuted into `order` (a superset of its labels), size 1 where it lacks a label."""
    mine = [lab for lab in order if lab in labels]
    x = x.permute([labels.index(lab) for lab in mine])
    return x.reshape(tuple(x.shape[mine.index(lab)] if lab in mine else 1 for lab in order))


def _check_sizes(formula: str, ops: list[tuple[Tensor, Labels]]) -> None:
    """ShapeError when one label has two sizes neither of which is 1."""
    sizes: dict[str, int] = {}
    for x, labels in ops:
        for lab, s in zip(labels, x.shape, strict=True):
            if s != 1 and sizes.setdefault(lab, s) != s:
                name = "'...'" if lab.startswith(".") else repr(lab)
                raise ShapeError(f"einsum {formula!r}: label {name} has sizes {sizes[lab]} and {s}")


def einsum(formula: str, *operands: Any) -> Tensor:
    """Einstein summation of `operands` (Tensors, or one sequence of them) by `formula` (module docstring)."""
    ts: list[Tensor] = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], Sequence) \
        else list(operands)
    if not ts or any(not hasattr(t, "uop") for t in ts):
        raise ArgumentTypeError(f"einsum {formula!r} takes Tensors as operands, got "
                                f"{', '.join(type(t).__name__ for t in ts) or 'none'}")
    check_devices("einsum", ts)
    ins, out = _split_terms(formula, [t.ndim for t in ts])
    out = _implicit_output(ins) if out is None else out
    if len(set(out)) < len(out) or any(lab not in {v for t in ins for v in t} for lab in out):
        raise ShapeError(f"einsum {formula!r}: each output label must appear once, and in some input")
    dt = least_upper_dtype(*(t.dtype for t in ts))
    ops = [_diagonals(t.cast(dt), labels) for t, labels in zip(ts, ins, strict=True)]
    _check_sizes(formula, ops)
    for k, (x, labels) in enumerate(ops):  # labels only this operand has, and not the output: summed now
        others = {lab for j, (_, ls) in enumerate(ops) if j != k for lab in ls}
        ops[k] = _sum_out(x, labels, others | set(out))
    acc, acc_labels = ops[0]
    for k in range(1, len(ops)):
        x, labels = ops[k]
        order = acc_labels + [lab for lab in labels if lab not in acc_labels]
        left, right = _aligned(acc, acc_labels, order), _aligned(x, labels, order)
        prod = left & right if dt.kind == "b" else left * right
        later = {lab for _, ls in ops[k + 1:] for lab in ls}
        acc, acc_labels = _sum_out(prod, order, later | set(out))
    acc, acc_labels = _sum_out(acc, acc_labels, set(out))
    return acc.permute([acc_labels.index(lab) for lab in out]) if acc_labels != out else acc


class EinsumMixin:
    """`Tensor.einsum` (a staticmethod, as torch.einsum)."""

    __slots__ = ()
    einsum = staticmethod(einsum)
