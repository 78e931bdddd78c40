"""bench/pretrained.py's own pieces (the run itself is docs/performance.md's): the inputs each row feeds, the
table from child records (a failed child is a '-' cell, never a crash), and this process's peak memory."""
from __future__ import annotations

from bench import pretrained


def test_inputs_shapes():
    mini = pretrained.inputs("minilm", 2)
    assert mini["input_ids"].shape == mini["attention_mask"].shape == (2, pretrained.SEQ)
    assert (mini["input_ids"][:, 0] == 101).all() and (mini["input_ids"][:, -1] == 102).all()
    assert pretrained.inputs("resnet50", 3)["x"].shape == (3, 3, 224, 224)


def test_table_ratio_and_failed_child():
    ok = {"median_ms": 20.0, "best_ms": 18.0, "first_s": 1.5, "peak_rss_mb": 300.0, "rel_err": 2e-7}
    results = [{"model": "minilm", "batch": 1, "engines": {"tolk": ok, "ort": dict(ok, median_ms=10.0),
                                                            "torch": {"error": "timed out after 900 s"}}}]
    row = pretrained.table(results).splitlines()[-1]
    assert row.startswith("| minilm | 1 | 20.0 (18.0) | 10.0 (18.0) | - | 0.50 |")
    assert "1.50/1.50/-" in row and "300/300/-" in row


def test_peak_rss_is_positive():
    assert pretrained.peak_rss_mb() > 1
