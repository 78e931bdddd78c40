"""Random tensor programs (fixed seeds): replay equals eager, with new input data each call, graphs on and off.

Every program maps two (6, 8) inputs through 2-5 steps drawn from elementwise ops, reductions broadcast back,
movements (flip, permute through reshape, shrink+pad) and matmuls. All programs' kernels are compiled together
first (one eager realize of every program), so each capture only hits the in-memory program cache.
"""
from __future__ import annotations

import numpy as np
import pytest

import tolk_core
from tolk_core import config
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.ops import Op

N_PROGRAMS = 32
SHAPE = (6, 8)

STEPS = [
    lambda x, y: x + y,
    lambda x, y: x * y,
    lambda x, y: x.maximum(y),
    lambda x, y: (x * 0.5).exp(),
    lambda x, y: (x - 0.5).relu(),
    lambda x, y: -x + 1,
    lambda x, y: x.flip(0),
    lambda x, y: x.flip(1) - y,
    lambda x, y: x.sum(axis=1, keepdim=True).expand(*SHAPE) / 8,
    lambda x, y: x.max(axis=0, keepdim=True) + y,
    lambda x, y: (x @ y.T) @ x * 0.1,
    lambda x, y: x.shrink(((1, 6), (0, 8))).pad(((0, 1), (0, 0))),
    lambda x, y: x.reshape(8, 6).T + y,
    lambda x, y: x.softmax(axis=1),
    lambda x, y: x[:, ::-1] * y[::-1],
]


def make_program(seed: int):
    rng = np.random.default_rng(seed)
    picks = [(int(rng.integers(len(STEPS))), int(rng.integers(3))) for _ in range(int(rng.integers(2, 6)))]
    two_outputs = bool(rng.integers(2))

    def program(a: Tensor, b: Tensor):
        vals = [a, b]
        x = a
        for step, other in picks:
            x = STEPS[step](x, vals[other % len(vals)])
            vals.append(x)
        return (x, x.sum(axis=0)) if two_outputs else x
    return program


def _outputs(ret) -> list[np.ndarray]:
    return [t.numpy() for t in (ret if isinstance(ret, tuple) else (ret,))]


@pytest.mark.parametrize("jit_mode", [1, 2], ids=["graphs", "no-graphs"])
def test_replay_equals_eager(device, jit_mode) -> None:
    programs = [make_program(seed) for seed in range(N_PROGRAMS)]
    rng = np.random.default_rng(1234)

    def data() -> tuple[np.ndarray, np.ndarray]:
        return rng.random(SHAPE, dtype=np.float32), rng.random(SHAPE, dtype=np.float32)

    warm = [p(*(Tensor(d, device=device) for d in data())) for p in programs]
    outs = [t for r in warm for t in (r if isinstance(r, tuple) else (r,))]
    outs[0].realize(*outs[1:])  # every program's kernels in one compile per device
    graphs = 0
    with config.override(JIT=jit_mode):
        for i, program in enumerate(programs):
            jitted = tolk_core.jit(program)
            for call in range(4):
                a, b = data()
                got = _outputs(jitted(Tensor(a, device=device), Tensor(b, device=device)))
                want = _outputs(program(Tensor(a, device=device), Tensor(b, device=device)))
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6,
                                               err_msg=f"program {i}, call {call}, JIT={jit_mode}")
            bodies = {c.src[0].op for c in jitted.captured.linear.src}
            if jit_mode == 2:
                assert Op.CUSTOM_FUNCTION not in bodies, "JIT=2 must not batch into graphs"
            elif len(jitted.captured.linear.src) > 1 or Op.CUSTOM_FUNCTION in bodies:
                graphs += Op.CUSTOM_FUNCTION in bodies
    if jit_mode == 1:
        assert graphs > N_PROGRAMS // 2, "most programs have several kernels: they replay as graphs"
