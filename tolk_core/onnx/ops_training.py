"""The converter of ai.onnx.preview.training's Gradient, on Tolk's autograd."""
from __future__ import annotations

from typing import Any

from tolk_core.frontend.tensor import Tensor
from tolk_core.onnx.context import Ctx, Node

Inputs = list[Any]


def gradient(ctx: Ctx, node: Node, x: Inputs) -> Any:
    """ai.onnx.preview.training Gradient: d(y)/d(x) for each x of `xs` (the node's inputs), y named by the
    `y` attribute, seeded with ones, by Tolk's autograd (docs/training.md)."""
    xs = [ctx.tensor(v) for v in x]
    y = ctx.tensor(ctx.env[str(node.attr("y"))])
    for t in xs:
        t.grad = None
        t.requires_grad_()
    y.backward(Tensor.ones(*y.shape, dtype=y.dtype, device=ctx.device))
    grads = [t.grad if t.grad is not None else t * 0 for t in xs]
    for t in xs:
        t.requires_grad_(False)
    return grads
