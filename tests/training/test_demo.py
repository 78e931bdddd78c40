"""The training demo: held-out accuracy on the digits, the CLI flags, the message when the data is missing."""
from __future__ import annotations

import builtins
import time

from tolk_core import cli, demo


def test_demo_reaches_95_percent_held_out_accuracy() -> None:
    st = time.perf_counter()
    report = demo.train("CPU", progress=False)
    took = time.perf_counter() - st
    print(f"demo: {report['accuracy'] * 100:.1f}% held-out accuracy in {took:.1f} s "
          f"({report['steps']} steps, {report})")
    assert report["accuracy"] >= 0.95, report
    assert report["test_size"] == 359 and report["device"] == "CPU"


def test_cli_quick_run_reports(capsys) -> None:
    assert cli.main(["demo", "--quick", "--steps", "3", "--device", "CPU"]) == 0
    out = capsys.readouterr().out
    for field in ("device            CPU", "held-out accuracy", "steps/s", "kernels/step"):
        assert field in out


def test_missing_data_names_the_extra(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setattr(demo, "_DIGITS", tmp_path / "absent.npz")
    real_import = builtins.__import__

    def no_sklearn(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    assert cli.main(["demo", "--quick"]) == 2
    assert "pip install 'tolk-core[demo]'" in capsys.readouterr().err
