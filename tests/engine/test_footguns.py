"""What users of other JITs trip over, each handled: feedback (ring buffers), baked-in Python values, stale
outputs, views and reshapes, reads during capture, duplicate inputs, state read outside the function."""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core.counters import GlobalCounters
from tolk_core.errors import JitError
from tolk_core.frontend import tensor as tensor_mod
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.uop import Variable

N = 8


def test_output_fed_back_as_input_ring_buffer(device) -> None:
    def shift_in(buf: Tensor, new: Tensor) -> Tensor:  # out[i] = buf[i-1]: wrong if a kernel writes buf in place
        return buf[:-1].pad(((1, 0),)) + new.pad(((0, N - 1),))

    jitted = tolk_core.jit(shift_in)
    eager = jit_buf = Tensor(np.arange(N, dtype=np.float32), device=device)
    for i in range(6):
        new = np.array([100 + i], np.float32)
        eager = shift_in(eager, Tensor(new, device=device)).realize()
        jit_buf = jitted(jit_buf, Tensor(new, device=device))
        np.testing.assert_array_equal(jit_buf.numpy(), eager.numpy(), err_msg=f"call {i}")


@pytest.mark.parametrize("first, second", [(2, 3), (0.5, 0.25)])
def test_changed_python_scalar_raises_naming_it(device, first, second) -> None:
    jitted = tolk_core.jit(lambda x, k: x * k)
    x = Tensor(np.ones(4, np.float32), device=device)
    for _ in range(3):
        np.testing.assert_array_equal(jitted(x, first).numpy(), np.full(4, first, np.float32))
    with pytest.raises(JitError, match=f"argument 1 of <lambda> changed since capture: {first!r} -> {second!r}"):
        jitted(x, second)


def test_reading_an_output_after_the_next_call_raises_naming_both(device) -> None:
    jitted = tolk_core.jit(lambda x: x + 1)
    outs = [jitted(Tensor(np.full(4, i, np.float32), device=device)) for i in range(4)]
    np.testing.assert_array_equal(outs[3].numpy(), np.full(4, 4, np.float32))
    np.testing.assert_array_equal(outs[0].numpy(), np.full(4, 1, np.float32))  # warmup output: its own buffer
    with pytest.raises(JitError, match="returned by call 3 of jitted <lambda>, whose buffers call 4 has since"):
        outs[2].numpy()


@pytest.mark.parametrize("make, message", [
    (lambda a: a.reshape(N // 2, 2 * 2), "argument 0 has shape \\(4, 4\\), the capture had \\(2, 8\\)"),
    (lambda a: a.reshape(4, 4).T.contiguous().realize().reshape(4, 4).T,
     "argument 0 has view permute\\(1, 0\\) of reshape\\(4, 4\\) of its buffer, the capture had reshape\\(4, 4\\)"),
])
def test_reshaped_or_transposed_input_raises_saying_how(device, make, message) -> None:
    shape = (2, 8) if "2, 8" in message else (4, 4)
    jitted = tolk_core.jit(lambda x: x * 2)
    for _ in range(3):
        jitted(Tensor(np.ones(shape, np.float32), device=device))
    bad = make(Tensor(np.arange(16, dtype=np.float32), device=device))
    with pytest.raises(JitError, match=message):
        jitted(bad)


def test_dtype_and_device_mismatch_say_which_argument(device) -> None:
    jitted = tolk_core.jit(lambda x, y: x + y)
    x = Tensor(np.ones(4, np.float32), device=device)
    for _ in range(3):
        jitted(x, Tensor(np.ones(4, np.float32), device=device))
    with pytest.raises(JitError, match="argument 1 has dtype int32, the capture had float32"):
        jitted(x, Tensor(np.ones(4, np.int32), device=device))


def test_reading_data_during_capture_raises(device) -> None:
    def peek(x: Tensor) -> Tensor:
        y = x + 1
        return y * float(y.numpy()[0])

    jitted = tolk_core.jit(peek)
    jitted(Tensor(np.ones(4, np.float32), device=device))
    with pytest.raises(JitError, match="cannot read tensor data while a JIT captures"):
        jitted(Tensor(np.ones(4, np.float32), device=device))
    Tensor(np.ones(2, np.float32), device=device).numpy()  # capture ended: reads work again
    assert not tensor_mod.read_checks  # the check is the capture state itself: no hook is left installed


def test_duplicate_inputs_raise(device) -> None:
    jitted = tolk_core.jit(lambda a, b: a + b)
    x = Tensor(np.ones(4, np.float32), device=device)
    with pytest.raises(JitError, match="duplicate inputs to JIT: argument 0 and argument 1 share one buffer"):
        jitted(x, x)


def test_tensors_inside_lists_and_dicts_are_inputs(device) -> None:
    jitted = tolk_core.jit(lambda xs, d: xs[0] * xs[1] + d["b"])
    for i in range(4):
        a, b, c = (np.full(4, i + k, np.float32) for k in range(3))
        got = jitted([Tensor(a, device=device), Tensor(b, device=device)], {"b": Tensor(c, device=device)})
        np.testing.assert_array_equal(got.numpy(), a * b + c)


def test_jitted_method(device) -> None:
    class Scale:
        def __init__(self, k: float):
            self.k = Tensor(np.full(4, k, np.float32), device=device)

        @tolk_core.jit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.k

    two, three = Scale(2), Scale(3)
    for i in range(4):
        x = np.full(4, i, np.float32)
        np.testing.assert_array_equal(two(Tensor(x, device=device)).numpy(), x * 2)
        np.testing.assert_array_equal(three(Tensor(x, device=device)).numpy(), x * 3)


def test_training_step_with_gradients_read_outside_matches_eager(device) -> None:
    rng = np.random.default_rng(0)
    n, d, lr = 32, 4, 0.1

    def step(w: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        grad = (x.T @ (x @ w - y)) / n  # d/dw of mean squared error / 2
        return w - grad * lr, grad

    jitted = tolk_core.jit(step)
    w_eager = w_jit = Tensor(np.zeros((d, 1), np.float32), device=device)
    for i in range(6):
        xs = rng.standard_normal((n, d), dtype=np.float32)
        ys = xs @ np.arange(1, d + 1, dtype=np.float32).reshape(d, 1)
        w_eager, g_eager = step(w_eager, Tensor(xs, device=device), Tensor(ys, device=device))
        w_eager.realize(g_eager)
        w_jit, g_jit = jitted(w_jit, Tensor(xs, device=device), Tensor(ys, device=device))
        np.testing.assert_allclose(g_jit.numpy(), g_eager.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
        np.testing.assert_allclose(w_jit.numpy(), w_eager.numpy(), rtol=1e-5, atol=1e-6)


def test_symbolic_length_replays_without_recapture(device) -> None:
    data = np.random.default_rng(5).uniform(-1, 1, (64, 8)).astype(np.float32)
    x = Tensor(data, device=device)
    n = Variable("n", 1, 64)

    def window(x: Tensor, length) -> Tensor:
        rows = x.shrink(((0, length), None))
        return (rows * 3 + 1).sum(axis=0) + rows.exp().max(axis=0)

    jitted = tolk_core.jit(window)
    jitted(x, n.bind(5)), jitted(x, n.bind(7))
    schedules, compiles = GlobalCounters.schedules, GlobalCounters.compiles
    for value in (1, 9, 33, 64, 2):
        want = (data[:value] * 3 + 1).sum(0) + np.exp(data[:value]).max(0)
        np.testing.assert_allclose(jitted(x, n.bind(value)).numpy(), want, rtol=1e-5, atol=1e-5)
    assert (GlobalCounters.schedules, GlobalCounters.compiles) == (schedules, compiles), "replayed, not recaptured"
    with pytest.raises(JitError, match="argument 1 of window changed since capture: Variable n -> 3"):
        jitted(x, 3)


def test_eager_code_never_reads_a_jit_output_as_a_cached_value(device) -> None:
    jitted = tolk_core.jit(lambda x: x + 1)
    xs = [Tensor(np.full(4, i, np.float32), device=device) for i in range(4)]
    lazy = xs[1] + 1  # the same value the capture computes (hash-consed: one UOp)
    for x in xs:
        jitted(x)
    # the capture computed xs[1] + 1 into the output buffer, which the replay with xs[3] overwrote since
    np.testing.assert_array_equal(lazy.numpy(), np.full(4, 2, np.float32))


def test_state_kept_on_an_object_is_held_and_jit_0_runs_eagerly(device) -> None:
    class Model:
        @tolk_core.jit
        def __call__(self, x: Tensor) -> Tensor:
            self.hidden = (x * 2).contiguous().realize()  # read outside the function: must not be an arena slot
            return (self.hidden + 1).exp().sum()

    m = Model()
    for i in range(4):
        x = np.full(8, i * 0.1, np.float32)
        out = m(Tensor(x, device=device))
        np.testing.assert_allclose(m.hidden.numpy(), x * 2, rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), np.exp(x * 2 + 1).sum(), rtol=1e-5)
    from tolk_core import config
    from tolk_core.counters import GlobalCounters
    with config.override(JIT=0):
        before = GlobalCounters.schedules
        m(Tensor(np.ones(8, np.float32), device=device))
        assert GlobalCounters.schedules > before
