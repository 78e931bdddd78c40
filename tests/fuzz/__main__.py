"""`python -m tests.fuzz [--start N] [--count N] [--seconds S] [--device D ...]`: explore new fuzzer seeds.

Draws programs from seed `start` on, in batches realized together, until `count` programs or `seconds` have
run, on each device; prints every failing seed with a minimized program (known open classes are counted
apart). A failing seed belongs in tests/fuzz/regressions.json once its fix is in.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time

from tests.fuzz.compare import known_open, minimize, run
from tests.fuzz.programs import generate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=int, default=10_000)
    ap.add_argument("--count", type=int, default=2_000)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--device", action="append", default=None, help="CPU, OPENCL (default: both)")
    args = ap.parse_args(argv)
    devices, deadline = args.device or ["CPU", "OPENCL"], time.monotonic() + args.seconds
    failing, known, seed = 0, collections.Counter(), args.start
    while seed < args.start + args.count and time.monotonic() < deadline:
        batch = [generate(s) for s in range(seed, min(seed + args.batch, args.start + args.count))]
        for device in devices:
            for s, why in sorted(run(batch, device).items()):
                p = batch[s - seed]
                if (cls := known_open(p)) is not None:
                    known[cls] += 1
                    continue
                failing += 1
                print(f"FAIL {device} seed {s}: {why}\n  program:   {p.text()}\n  minimized: "
                      f"{minimize(p, device).text()}", flush=True)
        seed += len(batch)
    print(f"seeds {args.start}..{seed - 1} on {', '.join(devices)}: {failing} failing, known open: "
          f"{dict(known) or 'none'}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
