"""A data-parallel step's time across processes: examples/distributed/train_digits.py (the digits MLP, batch
50, jitted) in one process and under `tolk launch -n 2` and `-n 4` with each provider; rank 0's median seconds
per step over steps 3..50, and the largest difference of the loss curve from one process's. Ranks beyond the
cores are oversubscribed: reported, not a bar.

    python -m bench.distributed_step [--ranks 2,4] [--providers MPI,TCP]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "examples" / "distributed" / "train_digits.py"


def _run(cmd: list[str], out: Path) -> dict:
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--providers", default="MPI,TCP")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        single = _run([sys.executable, str(TRAIN), "--single", "--jit", "--out", f"{tmp}/1.json"], Path(tmp, "1.json"))
        print(f"load {os.getloadavg()[0]:.1f}; 1 process: {statistics.median(single['seconds'][2:]) * 1e3:.1f} ms/step",
              flush=True)
        for provider in a.providers.split(","):
            for n in (int(r) for r in a.ranks.split(",")):
                out = Path(tmp, f"{provider}{n}.json")
                got = _run([sys.executable, "-m", "tolk_core.cli", "launch", "-n", str(n), "--provider", provider,
                            str(TRAIN), "--jit", "--out", str(out)], out)
                diff = max(abs(x - y) for x, y in zip(got["losses"], single["losses"], strict=True))
                print(f"load {os.getloadavg()[0]:.1f}; {provider} {n} ranks: "
                      f"{statistics.median(got['seconds'][2:]) * 1e3:.1f} ms/step, max |loss - 1 process| "
                      f"{diff:.2e}", flush=True)


if __name__ == "__main__":
    main()
