"""Gradients of fuzzer programs against torch: the share of programs made of differentiable float ops only
(elementwise arithmetic, transcendental functions, movements, sums and means) is rebuilt in torch, given fresh
inputs in [0.5, 2) (where every op is smooth and defined: log, sqrt, division), and the gradient of a weighted
sum of its result is compared with Tolk's."""
from __future__ import annotations

from typing import Any

import numpy as np

from tests.fuzz.programs import Node, Program, build, generate

_ELEMENTWISE = {"neg": lambda t: -t[0], "square": lambda t: t[0] * t[0], "reciprocal": lambda t: 1 / t[0],
                "sqrt": lambda t: t[0].sqrt(), "add": lambda t: t[0] + t[1], "sub": lambda t: t[0] - t[1],
                "mul": lambda t: t[0] * t[1], "div": lambda t: t[0] / t[1], "exp": lambda t: t[0].exp(),
                "log": lambda t: t[0].log(), "exp2": lambda t: t[0].exp2(), "log2": lambda t: t[0].log2(),
                "sin": lambda t: t[0].sin(), "cos": lambda t: t[0].cos(), "tanh": lambda t: t[0].tanh(),
                "sigmoid": lambda t: t[0].sigmoid(), "rsqrt": lambda t: t[0].rsqrt(),
                # the new transcendental functions defined on the whole line (asin, acos, atanh, acosh and tan
                # have poles or domain ends a composite of [0.5, 2) inputs can reach)
                "atan": lambda t: t[0].atan(), "sinh": lambda t: t[0].sinh(), "cosh": lambda t: t[0].cosh(),
                "asinh": lambda t: t[0].asinh()}
_MOVES = ("flip", "permute", "reshape", "expand", "pad", "index", "slice")
_REDUCE = ("sum", "mean")


def _nodes(node: Node):
    yield node
    for k in node.kids:
        yield from _nodes(k)


def differentiable(p: Program) -> bool:
    """Whether every node is a float32/float64 op torch rebuilds here, with at least one op and an element."""
    ok_op = lambda n: n.op == "input" or n.op in _ELEMENTWISE or n.op in _MOVES or n.op in _REDUCE
    no_neg_step = lambda n: n.op != "slice" or all(len(s) < 3 or s[2] is None or s[2] > 0 for s in n.arg)
    nodes = list(_nodes(p.root))
    return p.root.op != "input" and all(n.dtype in ("float32", "float64") and ok_op(n) and no_neg_step(n)
                                        for n in nodes) and all(s > 0 for s in p.root.shape) and \
        all(x.size for x in p.inputs)


def _torch(node: Node, ts: list, torch: Any) -> Any:
    if node.op == "input":
        return ts[node.arg]
    kids = [_torch(k, ts, torch) for k in node.kids]
    if node.op in _ELEMENTWISE:
        return _ELEMENTWISE[node.op](kids)
    x, a = kids[0], node.arg
    if node.op == "flip":
        return torch.flip(x, dims=tuple(a) if isinstance(a, tuple) else (a,))
    if node.op == "permute":
        return x.permute(tuple(a))
    if node.op == "reshape":
        return x.reshape(tuple(a))
    if node.op == "expand":
        return x.expand(tuple(a))
    if node.op == "pad":  # torch's pad lists (before, after) from the last axis back
        return torch.nn.functional.pad(x, [v for pair in reversed(a) for v in pair])
    if node.op == "index":
        return x[(slice(None),) * a[0] + (a[1],)]
    if node.op == "slice":
        return x[tuple(slice(*s) for s in a)]
    axis, keep = a
    return getattr(torch, node.op)(x, dim=axis, keepdim=keep)


def gradient_mismatches(seeds, device: str) -> tuple[int, list[str]]:
    """(how many of `seeds` were differentiable programs, the descriptions of those whose gradients differ)."""
    import torch

    from tolk_core.frontend.tensor import Tensor
    checked, bad = 0, []
    for s in seeds:
        p = generate(s)
        if not differentiable(p):
            continue
        checked += 1
        rng = np.random.default_rng(s)
        xs = [rng.uniform(0.5, 2.0, x.shape).astype(x.dtype) for x in p.inputs]
        w = rng.standard_normal(p.root.shape)
        ours = [Tensor(x, device=device).requires_grad_() for x in xs]
        (build(p.root, ours) * Tensor(w.astype(p.root.dtype), device=device)).sum().backward()
        theirs = [torch.tensor(x, requires_grad=True) for x in xs]
        (_torch(p.root, theirs, torch) * torch.tensor(w.astype(p.root.dtype))).sum().backward()
        for i, (o, t) in enumerate(zip(ours, theirs, strict=True)):
            want = np.zeros_like(xs[i]) if t.grad is None else t.grad.numpy()
            got = np.zeros_like(xs[i]) if o.grad is None else o.grad.numpy()
            tol = 1e-4 if xs[i].dtype == np.float32 else 1e-9
            if not np.allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max(initial=0)))):
                bad.append(f"seed {s} input {i}: {p.text()}\n    max |diff| {np.abs(got - want).max():.3g}")
    return checked, bad
