"""The model workloads of bench.models compute in Tolk what they compute in torch (CPU): one step of each, at
the tiny sizes, from the same seeded weights and data. Compared: the step's outputs (a train step's loss, a
forward's output, attention's gradients of q, k and v) and, after a train step, every parameter and its
gradient (the backward pass and the optimizer's update), by the benchmark's own check: normwise relative error
max|tolk - torch| / max|torch| at most 1e-3 per array (float32 on both sides; the sums run in different
orders).

CPU only: the same comparison on OpenCL is `python -m bench --models --device OPENCL`; here its cold compile
(PoCL) alone takes about 90 s, over this file's budget."""
from __future__ import annotations

import pytest

from bench import models as M

torch = pytest.importorskip("torch", reason="torch is not installed: the model workloads compare against it "
                                            "(pip install torch==2.13.0, CPU)")


@pytest.fixture
def cpu() -> str:
    from tolk_core.plugins import Device
    try:
        Device["CPU"]
    except Exception as e:  # noqa: BLE001 - the reason is the skip message
        pytest.skip(f"CPU device unavailable here: {e}")
    return "CPU"


@pytest.mark.parametrize("name", M.WORKLOADS)
def test_workload_matches_torch(name: str, cpu: str) -> None:
    device = cpu
    job, inputs, numbers = M.tolk_setup(name, "tiny", device)
    got, _ = M.check_steps(job.step, job.probe, inputs, M.tolk_side(device), steps=1)
    assert got, "the step computed nothing to compare"
    for variant in M.TORCH_VARIANTS.get(name, ("eager",)):
        tjob, tinputs = M.torch_setup(name, "tiny", variant, numbers)
        want, _ = M.check_steps(tjob.step, tjob.probe, tinputs, M.torch_side(), steps=1)
        assert sorted(got) == sorted(want)
        err, where = M.max_rel_error(got, want)
        assert err <= M.RTOL, f"{name} (torch {variant}): {where} differs by {err:.2e}"


def test_max_rel_error_names_the_worst_array() -> None:
    import numpy as np
    want = {"a": np.array([1.0, -4.0], np.float32), "b": np.array([2.0], np.float32)}
    got = {"a": np.array([1.0, -3.9], np.float32), "b": np.array([2.0], np.float32)}
    err, where = M.max_rel_error(got, want)
    assert where == "a" and err == pytest.approx(0.1 / 4, rel=1e-5)
    assert M.max_rel_error({"a": want["a"]}, want) == (float("inf"), "b (missing or shape None vs (1,))")


def test_parameters_are_compared_where_their_gradient_decides_the_update() -> None:
    """After an Adam step an element whose gradient is within rounding of zero moved by up to lr either way: such
    elements of a parameter ("probe.P" beside "probe.P:grad") are left out; every other difference counts."""
    import numpy as np
    want = {"probe.w": np.array([0.5, -0.25, 0.125], np.float32), "probe.w:grad": np.array([0.1, 1e-9, -0.2])}
    got = {"probe.w": np.array([0.5, -0.251, 0.125], np.float32), "probe.w:grad": want["probe.w:grad"].copy()}
    assert M.max_rel_error(got, want) == (0.0, "")  # the 1e-9 element's step is rounding's
    got["probe.w"][2] = 0.126  # an element its gradient decides
    err, where = M.max_rel_error(got, want)
    assert where == "probe.w" and err == pytest.approx(0.001 / 0.5, rel=1e-4)
    got["probe.w:grad"][0] = 0.1001  # gradients themselves are compared whole
    assert M.max_rel_error(got, want)[1] == "probe.w"
    assert M.max_rel_error({"probe.w:grad": got["probe.w:grad"]}, {"probe.w:grad": want["probe.w:grad"]})[0] > 0
