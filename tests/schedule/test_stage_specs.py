"""SPEC=1 validates the output of every stage of the pipeline: a malformed node planted in what a pass returns is
reported as a StageSpecError naming that pass, the stage's spec and the node; with SPEC=0 nothing is checked."""
from __future__ import annotations

import numpy as np
import pytest

from tests.render.kernels import kernel_asts
from tolk_core import config
from tolk_core.codegen import generate
from tolk_core.codegen import linearize as linearize_mod
from tolk_core.codegen import optimize as optimize_mod
from tolk_core.errors import StageSpecError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp, prod
from tolk_core.plugins import Device
from tolk_core.schedule import linear, prepare
from tolk_core.schedule.linear import create_linear
from tolk_core.schedule.prepare import prepare_rangeify


def _program() -> UOp:
    """SINK(STORE(new storage, a reduction of stored data)): a sum over rows plus one."""
    src = UOp.new_buffer("CPU", 12, dtypes.float32)
    value = UOp(Op.REDUCE_AXIS, dtypes.float32, (UOp(Op.RESHAPE, dtypes.float32, (src,), (3, 4)),), (Op.ADD, (1,)))
    value = UOp(Op.RESHAPE, dtypes.float32, (value,), (3,)) + UOp(Op.EXPAND, dtypes.float32, (UOp(
        Op.RESHAPE, dtypes.float32, (UOp.const(dtypes.float32, 1.0),), (1,)),), (3,))
    return UOp(Op.SINK, dtypes.void, (UOp(Op.STORE, dtypes.void, (UOp.new_buffer("CPU", 3, dtypes.float32), value)),))


def _new_buffer(v: UOp) -> UOp:
    return UOp.new_buffer("CPU", prod(v.shape), v.dtype)


def test_well_formed_stages_pass_with_spec_on() -> None:
    with config.override(SPEC=1):
        lin = create_linear(prepare_rangeify(_program()), _new_buffer)
        for call in lin.src:
            generate(call.src[0], Device.renderer_for("CPU"))
    assert len(lin.src) == 1


def test_prepare_rangeify_output_is_validated(monkeypatch) -> None:
    real = prepare.graph_rewrite

    def planting(sink, pm, *args, name: str = "", **kw):  # the last pass returns a value wrapped in a DETACH
        out = real(sink, pm, *args, name=name, **kw)
        if name != "prepare_rangeify step 3":
            return out
        store = out.src[0]
        return out.replace(src=(store.replace(src=(store.src[0], UOp(Op.DETACH, dtypes.float32, (store.src[1],)))),))

    monkeypatch.setattr(prepare, "graph_rewrite", planting)
    with config.override(SPEC=1), pytest.raises(StageSpecError, match="^prepare_rangeify produced a bad prepared "
                                                "graph: prepared spec: DETACH is not allowed") as e:
        prepare_rangeify(_program())
    assert (e.value.producer, e.value.stage, e.value.node.op) == ("prepare_rangeify", "prepared", Op.DETACH)
    with config.override(SPEC=0):
        assert prepare_rangeify(_program()).src[0].src[1].op is Op.DETACH  # off: nothing checks


def test_rangeify_output_is_validated(monkeypatch) -> None:
    real = linear.rangeify

    def planting(*args, **kw):  # the kernel loses the buffer of its last slot
        kernels = real(*args, **kw)
        kernels[0].buffers.pop()
        return kernels

    monkeypatch.setattr(linear, "rangeify", planting)
    prepared = prepare_rangeify(_program())
    with config.override(SPEC=1), pytest.raises(StageSpecError, match=r"^rangeify produced a bad linear graph: "
                                                r"linear spec: the kernel reads PARAM slots \[0, 1\], the call "
                                                "passes 1 buffers") as e:
        create_linear(prepared, _new_buffer)
    assert e.value.node.op is Op.CALL
    with config.override(SPEC=0):
        assert len(create_linear(prepared, _new_buffer).src[0].src) == 2  # off: the kernel and one buffer


@pytest.fixture
def kernel() -> UOp:
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="CPU")
    (ast,) = kernel_asts([x.sum(axis=1)])
    return ast


def test_optimize_output_is_validated(monkeypatch, kernel) -> None:
    real = optimize_mod.optimize

    def planting(ast, renderer, noopt=False):  # a range whose kind is a string
        plan = real(ast, renderer, noopt)
        r = next(u for u in plan.ast.toposort() if u.op is Op.RANGE)
        plan.ast = plan.ast.substitute({r: UOp(Op.RANGE, r.dtype, r.src, (7301, "loop"))})
        return plan

    monkeypatch.setattr(optimize_mod, "optimize", planting)
    with config.override(SPEC=1, NOOPT=1), pytest.raises(StageSpecError, match="^codegen.optimize produced a bad "
                                                         "kernel graph: kernel spec: RANGE kind 'loop'") as e:
        generate(kernel, Device.renderer_for("CPU"))
    assert e.value.node.arg == (7301, "loop")


def test_linearize_output_is_validated(monkeypatch, kernel) -> None:
    real = linearize_mod.linearize
    monkeypatch.setattr(linearize_mod, "linearize", lambda sink, guard=None: real(sink, guard)[:-1])  # last END
    with config.override(SPEC=1, NOOPT=1), pytest.raises(StageSpecError, match=r"^codegen.linearize produced a bad "
                                                         r"linearized graph: linearized spec: 1 loop\(s\) never"):
        generate(kernel, Device.renderer_for("CPU"))
