"""ONNX's backend test suite on one Tolk device, scored: `python -m tolk_core.onnx.scoreboard --device CPU
[--write docs/onnx.md] [--known tests/onnx/known_failures.json] [--only REGEX]`.

Runs every case of `onnx.backend.test.BackendTest` (node tests, the `light/` architectures and the `simple/`,
`pytorch-converted/`, `pytorch-operator/` models) through tolk_core.onnx.backend, then reports the pass rate
per category and per op, the overall node-test rate, the rate over the operators docs/onnx.md commits to
(skips counted as failures) and every failing test with its reason. `--write` replaces the scoreboard section
of the given markdown file; `--known` writes the failing tests and their reasons as the list the pytest suite
marks xfail(strict=True) (tests/onnx/test_backend.py)."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
import unittest
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# the operators the import commits to (docs/onnx.md, "Operators"): the target is computed over these
LISTED_OPS = tuple("""Abs Acos Add And ArgMax ArgMin Asin Atan AveragePool BatchNormalization BitShift Cast CastLike
Ceil Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace Div Dropout Einsum Elu
Equal Erf Exp Expand Flatten Floor Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalMaxPool Greater
GreaterOrEqual GroupNormalization HardSigmoid HardSwish Identity InstanceNormalization IsInf IsNaN
LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax MatMul Max MaxPool Mean Min Mod Mul Neg Not OneHot Or
Pad Pow PRelu Range Reciprocal ReduceL1 ReduceL2 ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
ReduceSumSquare Relu Reshape Resize Round ScatterElements ScatterND Selu Shape Sigmoid Sign Sin Sinh Size Slice
Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh Tile TopK Transpose Trilu Unsqueeze
Where Xor""".split())

CATEGORIES = {"OnnxBackendNodeModelTest": "node", "OnnxBackendRealModelTest": "light",
              "OnnxBackendSimpleModelTest": "simple", "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
              "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator"}
START, END = "<!-- scoreboard:start -->", "<!-- scoreboard:end -->"


@dataclass
class Outcome:
    name: str
    category: str
    op: str
    passed: bool
    reason: str


def node_ops() -> dict[str, str]:
    """Node test name -> the op it tests (its model's first node; an `_expanded` test counts for its op)."""
    from onnx.backend.test.loader import load_model_tests
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators warn about the casts they exercise
        cases = load_model_tests(kind="node")
    for case in cases:
        model = case.model
        out[str(case.name)] = model.graph.node[0].op_type if model is not None and model.graph.node else "?"
    for name in list(out):
        base = re.sub(r"_expanded(_ver\d+)?$", "", name)
        if base != name and base in out:
            out[name] = out[base]
    return out


def _reason(err: str) -> str:
    """The last exception line of a traceback, shortened: what the scoreboard lists per failing test."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    picked = next((ln for ln in reversed(lines) if re.match(r"^[\w.]+(Error|Exception|Exit)\b", ln)),
                  lines[-1] if lines else "")
    if picked.startswith("AssertionError") or "Mismatched elements" in err:
        mism = next((ln.strip() for ln in lines if "Mismatched elements" in ln), "")
        picked = f"wrong values ({mism})" if mism else "wrong output (assertion)"
    return picked.strip()[:200]


class _Collect(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcomes: dict[str, tuple[bool, str]] = {}

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        self.outcomes[test._testMethodName] = (True, "")

    def addFailure(self, test: unittest.TestCase, err) -> None:  # noqa: N802, ANN001
        self.outcomes[test._testMethodName] = (False, _reason("".join(traceback.format_exception(*err))))

    addError = addFailure  # noqa: N815 - unittest's name

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        if "no matched include pattern" not in reason:  # a test filtered out by --only is not run, not scored
            self.outcomes[test._testMethodName] = (False, f"skipped: {reason}")


def run_suite(device: str, only: str | None = None) -> list[Outcome]:
    """Every CPU case of ONNX's backend suite on Tolk's `device` (TOLK_DEVICE for the run)."""
    os.environ["TOLK_DEVICE"] = device
    import onnx.backend.test

    import tolk_core.onnx.backend as backend
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # ONNX documents passing the backend module; its annotation says the class
        bt = onnx.backend.test.BackendTest(backend, "tolk_scoreboard")  # type: ignore[arg-type]
    bt.include(only if only else r".*_cpu$")
    ops = node_ops()
    results: list[Outcome] = []
    for cls_name, cls in bt.test_cases.items():
        category = CATEGORIES.get(cls_name, cls_name)
        collect = _Collect()
        unittest.TestLoader().loadTestsFromTestCase(cls).run(collect)
        for method, (ok, why) in sorted(collect.outcomes.items()):
            if not method.endswith("_cpu"):
                continue
            name = method.removesuffix("_cpu")
            results.append(Outcome(name, category, ops.get(name, "(model)") if category == "node" else "(model)",
                                   ok, why))
    return results


def _rate(rows: list[Outcome]) -> str:
    ok = sum(r.passed for r in rows)
    return f"{ok}/{len(rows)} ({100 * ok / max(len(rows), 1):.1f}%)"


def render(device: str, results: list[Outcome], seconds: float) -> str:
    """The scoreboard as markdown."""
    node = [r for r in results if r.category == "node"]
    listed = [r for r in node if r.op in LISTED_OPS]
    out = [f"Device **{device}**, onnx {_onnx_version()}, {len(results)} tests in {seconds:.0f} s. "
           f"Command: `python -m tolk_core.onnx.scoreboard --device {device} --write docs/onnx.md`.", "",
           f"- node tests whose op is in the committed list: **{_rate(listed)}** (skips count as failures)",
           f"- all node tests: **{_rate(node)}**", "", "| category | passed |", "|---|---|"]
    by_cat: dict[str, list[Outcome]] = defaultdict(list)
    for r in results:
        by_cat[r.category].append(r)
    out += [f"| {c} | {_rate(rows)} |" for c, rows in by_cat.items()]
    out += ["", "Per op (node tests, listed ops first):", "", "| op | passed | listed |", "|---|---|---|"]
    by_op: dict[str, list[Outcome]] = defaultdict(list)
    for r in node:
        by_op[r.op].append(r)
    for op in sorted(by_op, key=lambda o: (o not in LISTED_OPS, o)):
        out.append(f"| {op} | {_rate(by_op[op])} | {'yes' if op in LISTED_OPS else ''} |")
    failing = [r for r in results if not r.passed]
    out += ["", f"Failing tests ({len(failing)}):", "", "| test | category | op | reason |", "|---|---|---|---|"]
    out += [f"| {r.name} | {r.category} | {r.op} | {r.reason.replace('|', '/')} |" for r in failing]
    return "\n".join(out) + "\n"


def _onnx_version() -> str:
    import onnx
    return onnx.__version__


def write_section(path: Path, device: str, body: str) -> None:
    """Replace (or append) the scoreboard section of `device` between its markers in `path`."""
    text = path.read_text() if path.exists() else ""
    start, end = START.replace("start", f"start {device}"), END.replace("end", f"end {device}")
    block = f"{start}\n{body}{end}"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + f"\n\n## Scoreboard: {device}\n\n{block}\n"
    path.write_text(text)


def write_known(path: Path, device: str, results: list[Outcome]) -> None:
    """The failing tests of `device` with their reasons, merged into the known-failures file."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data[device] = {r.name: r.reason for r in results if not r.passed}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tolk_core.onnx.scoreboard",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--device", default="CPU")
    p.add_argument("--write", type=Path, help="markdown file whose scoreboard section to replace")
    p.add_argument("--known", type=Path, help="known-failures JSON to update for this device")
    p.add_argument("--only", help="regex of test names to run (default: every _cpu test)")
    args = p.parse_args(argv)
    t0 = time.time()
    results = run_suite(args.device, args.only)
    body = render(args.device, results, time.time() - t0)
    if args.write:
        write_section(args.write, args.device, body)
    if args.known:
        write_known(args.known, args.device, results)
    sys.stdout.write(body if not args.write else body.split("\n\n")[0] + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
