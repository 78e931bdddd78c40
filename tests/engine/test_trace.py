"""`tolk_core.profile(trace=...)`: the launches as a Chrome / Perfetto trace (docs/performance.md, "Traces"),
loaded back and checked against the profile's rows and the launch counter."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

import tolk_core
from tolk_core import Tensor
from tolk_core.counters import GlobalCounters


def test_trace_holds_one_event_per_launch(device, tmp_path):
    rng = np.random.default_rng(0)
    x = Tensor(rng.random((16, 32), dtype=np.float32), device=device).realize()
    w = Tensor(rng.random((32, 8), dtype=np.float32), device=device).realize()
    path = tmp_path / "traces" / "step.json"
    start = GlobalCounters.kernels_launched
    with tolk_core.profile(trace=path) as prof:
        for _ in range(3):
            got = (x @ w).relu().contiguous().softmax(axis=1).numpy()
    launched = GlobalCounters.kernels_launched - start
    ref = np.maximum(x.numpy() @ w.numpy(), 0)
    ref = np.exp(ref - ref.max(1, keepdims=True))
    np.testing.assert_allclose(got, ref / ref.sum(1, keepdims=True), rtol=1e-5)

    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    kernels = [e for e in events if e["ph"] == "X"]
    assert len(kernels) == launched and launched >= 6  # at least two kernels, three times
    rows = {r.name: r for r in prof.rows}
    assert Counter(e["name"] for e in kernels) == {name: r.launches for name, r in rows.items()}
    for name, r in rows.items():
        mine = [e for e in kernels if e["name"] == name]
        assert sum(e["dur"] for e in mine) == pytest.approx(r.total_s * 1e6, rel=1e-6)
        assert sum(e["args"]["flops"] for e in mine) == r.flops and all(e["args"]["ops"] == r.ops for e in mine)
        assert sum(e["args"]["bytes"] for e in mine) == r.bytes
    # one named track per device, launches in order on it, none overlapping the next
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(names.values()) == {next(iter(rows.values())).device}
    assert [e for e in events if e["name"] == "process_name"][0]["args"] == {"name": "tolk"}
    starts = [e["ts"] for e in kernels]
    assert starts == sorted(starts) and min(starts) == 0
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(kernels, kernels[1:], strict=False))


def test_a_profile_without_trace_keeps_no_launches():
    x = Tensor(np.ones(8, np.float32), device="CPU")
    with tolk_core.profile() as prof:
        assert (x + 1).numpy().tolist() == [2.0] * 8
    assert prof.launches is None and sum(r.launches for r in prof.rows) == 1
