"""Tier jit: end-to-end programs through the Tensor front end on the device, compared with numpy; then the same
kind of program through `tolk_core.jit`: replays match numpy and eager runs, and on a device with a Graph the
replays are batched (`GlobalCounters.graph_replays`, a DEBUG=2 line per batched replay), without one they are
not (docs/jit.md)."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core.counters import GlobalCounters
from tolk_core.testing.checks import require
from tolk_core.testing.plugin import capabilities
from tolk_core.testing.programs import PROGRAMS, compare, inputs, run_cases

pytestmark = pytest.mark.jit
_RESULTS: dict[str, dict] = {}


def _results(dev) -> dict:
    if dev.name not in _RESULTS:
        caps = capabilities(dev.name.partition(":")[0])
        _RESULTS[dev.name] = run_cases(dev.name, {n: c for n, c in PROGRAMS.items()
                                                  if all(caps.get(x) for x in c.needs)})
    return _RESULTS[dev.name]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.requires(*c.needs)] if c.needs else [])
                                  for n, c in PROGRAMS.items()])
def test_program_matches_numpy(tolk_device, name):
    case = PROGRAMS[name]
    got = _results(tolk_device)[name]
    if isinstance(got, Exception):
        raise got
    want = np.asarray((case.ref or case.fn)(*inputs(name, case)))
    why = compare(got.numpy(), want)
    require(why is None, "end-to-end", f"{name} on {tolk_device.name} differs from numpy: {why}")


def test_second_run_compiles_nothing(tolk_device):
    """Running the same programs again reuses the compiled programs (no compile, identical results)."""
    case = PROGRAMS["mlp"]
    from tolk_core.frontend.tensor import Tensor
    xs = inputs("mlp", case)
    first = case.fn(*(Tensor(x, device=tolk_device.name) for x in xs)).numpy()
    before = GlobalCounters.compiles
    again = case.fn(*(Tensor(x, device=tolk_device.name) for x in xs)).numpy()
    require(GlobalCounters.compiles == before, "Compiler.compile_cached", "an identical program compiled again")
    require(first.tobytes() == again.tobytes(), "end-to-end", "the same program gave different results twice")


def test_symbolic_program_compiles_once(tolk_device):
    """A program over a bound Variable: each value matches numpy, and only the first value compiles."""
    from tolk_core.frontend.tensor import Tensor
    from tolk_core.ir.uop import Variable
    data = np.random.default_rng(6).uniform(-2, 2, (48, 16)).astype(np.float32)
    x, n = Tensor(data, device=tolk_device.name), Variable("rows", 1, 48)

    def program(v):
        w = x.shrink(((0, v), None))
        return (w * 3 + 1).sum(axis=0) + w.exp().sum(axis=0) * 0.5
    program(n.bind(2)).numpy()
    before = GlobalCounters.compiles + GlobalCounters.disk_cache_hits
    for value in (1, 7, 48):
        w = data[:value]
        why = compare(program(n.bind(value)).numpy(), (w * 3 + 1).sum(0) + np.exp(w).sum(0) * 0.5, atol=1e-3)
        require(why is None, "end-to-end", f"rows={value}: {why}")
    require(GlobalCounters.compiles + GlobalCounters.disk_cache_hits == before, "Program.__call__",
            "a new value of a bound Variable compiled again (values must be passed as arguments)")


# ---------------------------------------------------------------- through tolk_core.jit

_CALLS = 5  # warm-up, capture, three replays


def _jitted_runs(device: str, jit_setting: int) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, int]]:
    """A jitted program of several kernels called with new inputs each time, under JIT=`jit_setting`: its
    outputs, numpy's, and what the counters grew by over the replays (the calls after the capture)."""
    import tolk_core
    from tolk_core import config
    from tolk_core.frontend.tensor import Tensor
    rng = np.random.default_rng(11)
    w1, w2 = rng.uniform(-1, 1, (16, 24)).astype(np.float32), rng.uniform(-1, 1, (24, 8)).astype(np.float32)
    tw1, tw2 = Tensor(w1, device=device).realize(), Tensor(w2, device=device).realize()

    def ref(x):
        h = np.maximum(x @ w1, 0)
        return np.exp(h @ w2 - (h @ w2).max(axis=1, keepdims=True)) + x.sum(axis=1, keepdims=True)

    with config.override(JIT=jit_setting):
        @tolk_core.jit
        def step(x):
            h = (x @ tw1).relu()
            return ((h @ tw2) - (h @ tw2).max(axis=1, keepdim=True)).exp() + x.sum(axis=1, keepdim=True)
        xs = [rng.uniform(-1, 1, (6, 16)).astype(np.float32) for _ in range(_CALLS)]
        got, before = [], {}
        for i, x in enumerate(xs):
            if i == 2:
                before = GlobalCounters.snapshot()
            got.append(step(Tensor(x, device=device).realize()).numpy())
    grew = {k: int(GlobalCounters.snapshot()[k] - before[k]) for k in ("graph_replays", "graph_kernels",
                                                                        "kernels_launched")}
    return got, [ref(x) for x in xs], grew


def _check_matches(device: str, got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        why = compare(g, w, atol=1e-4)
        require(why is None, "end-to-end", f"jitted call {i + 1} on {device} differs from numpy: {why}")


def test_jit_replays_without_batching(tolk_device):
    """With JIT=2 (capture, never batch) the replays match numpy and no Graph runs."""
    got, want, grew = _jitted_runs(tolk_device.name, 2)
    _check_matches(tolk_device.name, got, want)
    require(grew["graph_replays"] == 0 and grew["kernels_launched"] > 0, "tolk_core.jit",
            f"JIT=2 must replay kernel by kernel: {grew}")


@pytest.mark.requires("graph")
def test_jit_batches_replays_into_the_graph(tolk_device, capsys):
    """With the device's Graph the replays are batched: each replay call runs at least one batch, the batches
    make launches, DEBUG=2 prints a line per batched replay, and the results equal the unbatched replays' bit
    for bit (the Graph contract)."""
    from tolk_core import config
    plain, _, _ = _jitted_runs(tolk_device.name, 2)
    capsys.readouterr()
    with config.override(DEBUG=2):
        got, want, grew = _jitted_runs(tolk_device.name, 1)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f"graph {tolk_device.name}: ")]
    _check_matches(tolk_device.name, got, want)
    replays = _CALLS - 2
    require(grew["graph_replays"] >= replays and grew["graph_kernels"] >= 2 * grew["graph_replays"],
            "Graph (JIT batching)", f"{replays} replays through {type(tolk_device).__name__}'s Graph batched "
            f"{grew['graph_replays']} time(s) over {grew['graph_kernels']} kernel(s)")
    require(len(lines) >= grew["graph_replays"] and "kernels in one batch" in lines[-1], "Graph (JIT batching)",
            f"DEBUG=2 printed {len(lines)} graph line(s) for {grew['graph_replays']} batched replays")
    for i, (a, b) in enumerate(zip(plain, got, strict=True)):
        require(a.tobytes() == b.tobytes(), "Graph.__call__", f"call {i + 1}: the batched replay differs from "
                "launching the kernels one by one")
