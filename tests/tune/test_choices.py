"""The optimizer's tunable choices: with none in effect it plans by its heuristics; each knob, set for a kernel,
changes that kernel's plan (so a search over it can find something) and never its values; the source cache
keeps plans made under different choices apart."""
from __future__ import annotations

import numpy as np
import pytest
from tolk_cpu.renderer import CRenderer
from tolk_opencl.renderer import OpenCLRenderer

from tolk_core import Tensor
from tolk_core.codegen import choices, generate, optimize
from tolk_core.codegen.choices import KNOBS, Choices, neighbours, using
from tolk_core.engine import source_cache
from tolk_core.testing import kernels

PROGRAMS = {
    "matmul": (lambda a, b: a @ b, [((64, 64), "float32"), ((64, 64), "float32")]),
    "wide": (lambda a: a * 2 + 1, [((2048, 1024), "float32")]),
    "short_sum": (lambda a: a.sum(axis=(1, 2)), [((64, 4, 4), "float32")]),
    "wide_matmul": (lambda a, b: a @ b, [((64, 64), "float32"), ((64, 256), "float32")]),
    "conv": (lambda x, w: x.conv2d(w), [((2, 4, 10, 34), "float32"), ((16, 4, 3, 3), "float32")]),
    "linear": (lambda x, w: x @ w.T, [((16, 256), "float32"), ((96, 256), "float32")]),  # W: 96 KiB
}
# numpy's value of the programs numpy has no method for
REFS = {"conv": lambda x, w: np.einsum("ncijkl,ockl->noij", np.lib.stride_tricks.sliding_window_view(
    x, (3, 3), axis=(2, 3)), w)}
# for each knob: a program whose plan it changes, and a value other than the default
MOVES = {"MAX_ACCUMULATORS": ("conv", 4), "MATMUL_MR": ("matmul", 2), "MATMUL_NR_VECTORS": ("matmul", 1),
         "MATMUL_PACK_B": ("matmul", 1), "MATMUL_DOT_ROWS": ("linear", 0),
         "MATMUL_NC": ("wide_matmul", 64), "MATMUL_KC": ("wide_matmul", 32),
         "PARALLEL_MIN_WORK": ("wide", 1 << 23), "UNROLL_MAX": ("short_sum", 4),
         "GPU_BLOCK": ("matmul", 4), "GPU_LOCAL": ("wide", 64), "GPU_VECTOR_ACCUMULATORS": ("matmul", 4)}


def _source(name, renderer):
    fn, specs = PROGRAMS[name]
    made = [generate(call.src[0], renderer) for call in kernels.build(fn, *specs).calls]
    return [(ks.source, ks.global_size, ks.local_size) for ks in made]  # a group size changes the launch only


def _cpu_renderer() -> CRenderer:
    """The CPU renderer with fake caches (32 KiB L1, 64 KiB L2), so the plans do not depend on this machine's:
    the wide matmul's B (64 KiB) does not fit half the L2 and is packed, the 64 x 64 one's (16 KiB) is read in
    place."""
    r = CRenderer()
    r.cache_bytes = (32 << 10, 64 << 10, r.cache_bytes[2])
    return r


def test_every_knob_has_a_program_it_changes():
    assert set(MOVES) == set(KNOBS)
    for knob, (name, value) in MOVES.items():
        renderer = _cpu_renderer() if KNOBS[knob][1] == "cpu" else OpenCLRenderer()
        base = _source(name, renderer)
        assert getattr(optimize, knob) != value
        with using(Choices.of({knob: value})):
            moved = _source(name, renderer)
        assert moved != base, f"{knob}={value} does not change the plan of {name}"
        assert _source(name, renderer) == base  # outside the block: the heuristics again


@pytest.mark.parametrize("knob", [k for k, (_, where) in KNOBS.items() if where == "cpu"])
def test_a_moved_knob_keeps_the_values(knob):
    name, value = MOVES[knob]
    fn, specs = PROGRAMS[name]
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(shape).astype(np.float32) for shape, _ in specs]
    ref = REFS.get(name, fn)(*[x.astype(np.float64) for x in xs])
    with using(Choices.of({knob: value})):
        got = fn(*[Tensor(x) for x in xs]).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_the_source_cache_keeps_choices_apart(tmp_path):
    from tolk_core import config
    ast = next(iter(kernels.build(*PROGRAMS["matmul"][:1], *PROGRAMS["matmul"][1]).calls)).src[0]
    with config.override(CACHE_DIR=str(tmp_path)):
        base = source_cache.generate_cached(ast, CRenderer()).source
        with using(Choices.of({"MATMUL_MR": 2})):
            moved = source_cache.generate_cached(ast, CRenderer()).source
        again = source_cache.generate_cached(ast, CRenderer()).source
    assert moved != base and again == base


def test_neighbours_step_one_knob_of_the_device_kind():
    defaults = {k: getattr(optimize, k) for k in KNOBS}
    near = neighbours(Choices(), defaults, "cpu")
    assert all(len(c.values) == 1 and KNOBS[c.values[0][0]][1] == "cpu" for c in near)
    acc = sorted(c.get("MAX_ACCUMULATORS", 0) for c in near if c.values[0][0] == "MAX_ACCUMULATORS")
    assert acc == [8, 32]  # the default 16's neighbours on its ladder
    lowest = Choices.of({"UNROLL_MAX": 1})
    assert [c.get("UNROLL_MAX", 0) for c in neighbours(lowest, defaults, "cpu") if dict(c.values).get("UNROLL_MAX")
            and len(c.values) == 1] == [4]


def test_an_unknown_knob_is_named():
    with pytest.raises(ValueError, match="unknown optimizer choice.*NOT_A_KNOB"):
        Choices.of({"NOT_A_KNOB": 1})
    assert choices.current() == Choices()
