"""Inline calls (docs/prepare.md; prepare step 2): `@tolk_core.function` traces a body once per signature, each
call is a CALL node, and prepare_rangeify replaces it by the body with its parameters bound to the arguments as
flat storage. Values against numpy on every compiled device; the normal form; each refusal's message."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tests.frontend.helpers import close
from tolk_core.errors import CallArgumentError, TolkError
from tolk_core.frontend.function import CallError
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp
from tolk_core.schedule.prepare import (
    InlineCall,
    KernelCode,
    code_call_arguments,
    inline_call,
    is_inline_call,
    prepare_rangeify,
    rule_fires,
)

RNG = np.random.default_rng(3)
A = RNG.standard_normal((4, 5)).astype(np.float32)
B = RNG.standard_normal((5, 3)).astype(np.float32)
C = np.arange(30, dtype=np.float32).reshape(6, 5) / 10


@tolk_core.function
def affine_relu(x: Tensor, w: Tensor, scale: Tensor) -> Tensor:
    return (x @ w).relu() * scale + x.sum()


@tolk_core.function
def stats(x: Tensor) -> tuple[Tensor, Tensor]:
    return x.max(axis=1), (x - x.mean(axis=1, keepdim=True)).contiguous().exp().sum(axis=1)


@tolk_core.function
def outer(x: Tensor, w: Tensor, scale: Tensor) -> Tensor:
    return affine_relu(x, w, scale) - affine_relu(x * 2, w, scale)  # calls nested in a body


@tolk_core.function
def add_k(x: Tensor, k: int) -> Tensor:
    return x + k


def test_inline_calls_equal_numpy(device) -> None:
    x, w = Tensor(A, device=device), Tensor(B, device=device)
    s = Tensor(np.full((), 1.5, np.float32), device=device).reshape(())
    f = lambda a, b: np.maximum(a @ b, 0) * 1.5 + a.sum()  # noqa: E731
    mx, se = stats(x)
    outs = [affine_relu(x, w, s), affine_relu(x.T.T + 1, w, s), mx, se, outer(x, w, s),
            affine_relu(Tensor(C, device=device)[1:5], w, s),
            affine_relu(Tensor(C, device=device)[1:5].contiguous(), w, s),
            add_k(x, 2), add_k(x, 3), stats(x.T)[0]]
    Tensor.realize(*outs)
    wants = [f(A, B), f(A + 1, B), A.max(1), np.exp(A - A.mean(1, keepdims=True)).sum(1), f(A, B) - f(A * 2, B),
             f(C[1:5], B), f(C[1:5], B), A + 2, A + 3, A.T.max(1)]
    for got, want in zip(outs, wants, strict=True):
        close(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_an_argument_that_is_a_view_is_read_in_order(device) -> None:
    @tolk_core.function
    def flat_first(x: Tensor) -> Tensor:
        return x.reshape(-1)[:3] * 1

    got = flat_first(Tensor(A, device=device).T).numpy()  # the transpose's elements in row-major order
    close(got, A.T.reshape(-1)[:3])


def test_traced_once_per_signature() -> None:
    @tolk_core.function
    def double(x: Tensor) -> Tensor:
        return x * 2

    double(Tensor(A, device="CPU"))
    double(Tensor(A + 1, device="CPU"))
    assert double.traces() == 1
    double(Tensor(B, device="CPU"))
    double(Tensor(A.astype(np.int32), device="CPU"))
    assert double.traces() == 3
    assert add_k(Tensor(A, device="CPU"), 5).numpy()[0, 0] == pytest.approx(A[0, 0] + 5)


# ---------------------------------------------------------------- the normal form
def test_prepare_inlines_a_call_with_flat_parameters() -> None:
    x = Tensor(A, device="CPU")
    s = Tensor(np.full((), 2.0, np.float32), device="CPU").reshape(())
    call = affine_relu(x, Tensor(B, device="CPU"), s).uop
    assert is_inline_call(call) and call.shape == (4, 3)
    params = [u for u in call.src[0].toposort() if u.op is Op.PARAM]
    assert sorted(p.arg for p in params) == [(0, (20,)), (1, (15,)), (2, ())]
    before = rule_fires["inline_call"]
    dest = UOp.new_buffer("CPU", 12, dtypes.float32)
    sink = prepare_rangeify(UOp(Op.SINK, dtypes.void, (UOp(Op.STORE, dtypes.void, (dest, call)),)))
    nodes = sink.toposort()
    assert rule_fires["inline_call"] > before
    assert not any(u.op in (Op.CALL, Op.PARAM) for u in nodes)
    # the (4, 5) argument is bound as its 20 elements, flat, then viewed as (4, 5) again by the body
    assert any(u.op is Op.RESHAPE and u.arg == (20,) and u.src[0] is x.uop for u in nodes)
    assert s.uop in nodes  # the scalar parameter is the 0-d argument itself


def _call(body: UOp, *args: UOp) -> UOp:
    return UOp(Op.CALL, body.dtype, (body, *args), InlineCall("f"))


def _param(slot: int, shape: tuple, dtype=dtypes.float32) -> UOp:
    return UOp(Op.PARAM, dtype, (), (slot, shape))


@pytest.mark.parametrize("make,message", [
    (lambda: _call(_param(0, (6,)) * 2, UOp.new_buffer("CPU", 5, dtypes.float32)),
     r"call of f: PARAM 0 is storage of 6 elements, its argument BUFFER of shape \(5,\) has 5"),
    (lambda: _call(_param(0, ()) + 1, UOp.new_buffer("CPU", 3, dtypes.float32)),
     r"call of f: PARAM 0 is a scalar, its argument BUFFER has shape \(3,\)"),
    (lambda: _call(_param(0, (4,)) + 1, UOp.new_buffer("CPU", 4, dtypes.int32)),
     r"call of f: PARAM 0 is float32, its argument BUFFER is int32"),
    (lambda: _call(_param(1, (4,)) + 1, UOp.new_buffer("CPU", 4, dtypes.float32)),
     r"call of f: PARAM 1 has no argument \(the call passes 1\)"),
])
def test_an_argument_that_does_not_fit_is_refused(make, message) -> None:
    with pytest.raises(CallArgumentError, match=message) as e:
        inline_call(make())
    assert isinstance(e.value, TolkError) and isinstance(e.value, ValueError)


def test_an_argument_of_the_parameter_s_size_in_any_shape_fits() -> None:
    arg = UOp(Op.RESHAPE, dtypes.float32, (UOp.new_buffer("CPU", 6, dtypes.float32),), (2, 3))
    out = inline_call(_call(_param(0, (6,)) * 2, arg))
    assert out.src[0].op is Op.RESHAPE and out.src[0].arg == (6,) and out.src[0].src[0] is arg


# ---------------------------------------------------------------- what a traced body cannot do
def test_a_body_that_reads_data_copies_or_returns_no_tensor_is_refused() -> None:
    @tolk_core.function
    def reads(x: Tensor) -> Tensor:
        return x * float(x.sum().item())

    @tolk_core.function
    def copies(x: Tensor) -> Tensor:
        return x.to("PYTHON") + 1

    @tolk_core.function
    def returns_a_number(x: Tensor) -> int:
        return 3

    x = Tensor(A, device="CPU")
    with pytest.raises(CallError, match="cannot read a value computed from a function's arguments while tracing"):
        reads(x)
    with pytest.raises(CallError, match="copies between devices"):
        copies(x)
    with pytest.raises(CallError, match=r"must return a Tensor or a tuple of Tensors to be called inline "
                                        r"\(or None when it stores into its arguments\), not int"):
        returns_a_number(x)


def test_a_0d_array_is_a_0d_tensor_and_binds_a_scalar_parameter(device) -> None:
    for data in (np.array(2.5, np.float32), np.float32(2.5), np.array(7, np.int32)):
        t = Tensor(data, device=device)
        assert t.shape == () and t.numpy().shape == ()
        assert t.item() == data.item()
    s = Tensor(np.array(1.5, np.float32), device=device)  # no reshape(()) needed to bind a scalar parameter
    x, w = Tensor(A, device=device), Tensor(B, device=device)
    close(affine_relu(x, w, s).numpy(), np.maximum(A @ B, 0) * 1.5 + A.sum(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- bodies that store into their arguments
@tolk_core.function
def increment(x: Tensor) -> Tensor:
    x.assign(x + 1)
    return x * 2


@tolk_core.function
def fill_part(out: Tensor, v: Tensor) -> Tensor:
    out[1:3] = v * 10
    return out


@tolk_core.function
def before_and_after(x: Tensor) -> Tensor:
    y = x * 3  # read before the store: the value the argument had when the call was made
    x.assign(x.flip(0) + 1)
    return y + x


@tolk_core.function
def store_twice(x: Tensor, v: Tensor) -> None:
    x.assign(v)
    x.assign(v)


@tolk_core.function
def nested(x: Tensor, v: Tensor) -> Tensor:
    fill_part(x, v)
    return increment(x)


V = np.array([1.5, -2.0], np.float32)


@pytest.mark.parametrize("case", ["increment", "fill_part", "before_and_after", "store_twice", "nested", "lazy"])
def test_a_body_that_stores_into_an_argument_equals_numpy(device, case) -> None:
    a = C[0].copy()  # 5 elements
    x, want = Tensor(a.copy(), device=device).realize(), a.copy()
    v = Tensor(V, device=device)
    if case == "increment":
        got, want_got = increment(x), (a + 1) * 2
        want += 1
    elif case == "fill_part":
        got, want_got = fill_part(x, v), None
        want[1:3] = V * 10
        want_got = want
    elif case == "before_and_after":
        got, want_got = before_and_after(x), a * 3 + a[::-1] + 1
        want = a[::-1] + 1
    elif case == "store_twice":  # the value is the argument's reversal at the time of the call, stored twice
        got, want_got = store_twice(x, x.flip(0) * 1), None
        want = a[::-1].copy()
    elif case == "nested":
        got = nested(x, v)
        want[1:3] = V * 10
        want += 1
        want_got = want * 2
    else:  # a lazy argument stored into is realized first, and the caller's tensor sees the store
        x = Tensor(a.copy(), device=device) * 1
        got, want_got = increment(x), (a + 1) * 2
        want += 1
    if want_got is None:
        assert got is None
    else:
        close(got.numpy(), want_got)
    close(x.numpy(), want)


def test_a_call_s_stores_run_when_it_is_made_and_its_result_reads_the_output(kernels) -> None:
    @tolk_core.function
    def add_then_scale(x: Tensor) -> Tensor:  # a graph of its own: not served by a cached schedule
        x.assign(x + 2)
        return x * 3

    x = Tensor(C[0].copy(), device="CPU").realize()
    before = rule_fires["resolve_returned_after"]
    with kernels() as k:
        got = add_then_scale(x)
    assert k.count == 1  # the store ran; the result is lazy
    call = got.uop
    assert is_inline_call(call) and any(u.op is Op.AFTER for u in call.src[0].toposort())
    close(got.numpy(), (C[0] + 2) * 3)
    assert rule_fires["resolve_returned_after"] > before  # the returned state is read from x's storage
    stores = [u for u in call.src[0].toposort() if u.op is Op.STORE]
    assert len(stores) == 1 and stores[0].src[0].op is Op.PARAM and stores[0].src[0].arg == (0, (5,))


def test_a_repeated_store_in_a_body_fires_the_rule() -> None:
    before = rule_fires["repeated_store"]
    x = Tensor(C[1].copy(), device="CPU").realize()
    store_twice(x, Tensor(V.repeat(3)[:5], device="CPU"))
    assert rule_fires["repeated_store"] > before
    close(x.numpy(), V.repeat(3)[:5])


# ---------------------------------------------------------------- a kernel given as code
SAXPY = {
    "CPU": ("void saxpy(float* restrict out, const float* restrict x, const float* restrict y) {\n"
            "  for (int i = 0; i < 6; i++) out[i] = 2.0f * x[i] + y[i];\n}\n", (1, 1, 1), None),
    "OPENCL": ("__kernel void saxpy(__global float* out, __global const float* x, __global const float* y) {\n"
               "  int i = get_global_id(0);\n  out[i] = 2.0f * x[i] + y[i];\n}\n", (6, 1, 1), (1, 1, 1)),
}


def _saxpy(device: str, outputs, x: Tensor, y: Tensor) -> list[Tensor]:
    src, gs, ls = SAXPY[device]
    return tolk_core.custom_kernel(src, "saxpy", outputs, [x, y], gs, ls)


def test_a_kernel_given_as_code_equals_numpy(device, kernels) -> None:
    a, b = np.arange(48, dtype=np.float32) / 4, RNG.standard_normal(6).astype(np.float32)
    x, y = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    with kernels() as k:
        out, = _saxpy(device, [((6,), dtypes.float32)], x[:6], y)  # runs of storage from the first: as they are
    assert k.count == 1
    close(out.numpy(), 2 * a[:6] + b)
    with kernels() as k:
        out, = _saxpy(device, [((2, 3), dtypes.float32)], x[7:13], (y * 3).reshape(2, 3).T)
    assert k.count == 3  # the run read at element 7 and the computed, transposed value are stored first
    close(out.numpy().reshape(-1), 2 * a[7:13] + (b * 3).reshape(2, 3).T.reshape(-1))
    t = Tensor(np.zeros(64, np.float32), device=device).realize()
    _saxpy(device, [t[32:38]], x[:6], y)  # a run written in place, at an offset (128 bytes: OpenCL's alignment)
    want = np.zeros(64, np.float32)
    want[32:38] = 2 * a[:6] + b
    close(t.numpy(), want)
    _saxpy(device, [t[3:9]], x[:6], y)  # at 12 bytes: OpenCL cannot view it; through new storage and back
    want[3:9] = 2 * a[:6] + b
    close(t.numpy(), want)


def _code_call(written: tuple[bool, ...], *args: UOp) -> UOp:
    callee = UOp(Op.SINK, dtypes.void, (), KernelCode("k", "k", written))
    return UOp(Op.CALL, dtypes.void, (callee, *args))


def test_code_call_arguments_pass_runs_in_place_and_materialise_the_rest() -> None:
    buf = UOp.new_buffer("CPU", 12, dtypes.float32)
    other = UOp.new_buffer("CPU", 12, dtypes.float32)
    head = UOp(Op.SHRINK, dtypes.float32, (buf,), ((0, 6),))
    tail = UOp(Op.SHRINK, dtypes.float32, (buf,), ((6, 12),))
    reordered = UOp(Op.PERMUTE, dtypes.float32, (UOp(Op.RESHAPE, dtypes.float32, (other,), (3, 4)),), (1, 0))
    before = rule_fires["code_call_arguments"]
    out = code_call_arguments(_code_call((True, False, False), UOp.new_buffer("CPU", 6, dtypes.float32), head,
                                         UOp(Op.SHRINK, dtypes.float32, (other,), ((6, 12),))))
    assert out.src[2] is buf  # a run from the first element: the storage itself
    assert out.src[3].op is Op.CONTIGUOUS  # read at phase 6, storage nobody writes: copied to new storage first
    aliased = code_call_arguments(_code_call((True, False), head, tail))
    assert aliased.src[1] is buf and aliased.src[2] is tail  # its storage is written through another argument
    written = code_call_arguments(_code_call((True, False), tail, reordered))
    assert written.src[1] is tail and written.src[2].op is Op.CONTIGUOUS  # a value of its own
    with pytest.raises(CallArgumentError, match=r"call of kernel k: argument 0 \(PERMUTE \(4, 3\)\) is written but "
                                                "is not a run of whole elements of storage of its type"):
        code_call_arguments(_code_call((True,), reordered))
    from tolk_core.ir.pattern import graph_rewrite
    from tolk_core.schedule.prepare import pm_code_calls
    graph_rewrite(_code_call((False,), tail), pm_code_calls)
    assert rule_fires["code_call_arguments"] > before


# ---------------------------------------------------------------- gradients through an inline call
def test_gradients_flow_through_an_inline_call(device) -> None:
    # d/dx, d/dw of sum((relu(x @ w) * s + sum(x)) * r), by hand: r weights each output element
    r = RNG.standard_normal((4, 3)).astype(np.float32)
    x, w = Tensor(A, device=device).requires_grad_(), Tensor(B, device=device).requires_grad_()
    s = Tensor(np.array(1.5, np.float32), device=device)
    (affine_relu(x, w, s) * Tensor(r, device=device)).sum().backward()
    upstream = (A @ B > 0) * 1.5 * r  # through relu and the scale
    close(x.grad.numpy(), upstream @ B.T + r.sum(), rtol=1e-4, atol=1e-4)  # + the x.sum() term, once per output
    close(w.grad.numpy(), A.T @ upstream, rtol=1e-4, atol=1e-4)
