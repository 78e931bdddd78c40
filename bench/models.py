"""Model workloads against torch: `python -m bench --models [--device CPU|OPENCL] [--quick] [--json PATH]`.

Six workloads a PyTorch user writes, each written twice, once with Tolk's public API (`tolk_core.Tensor`,
`tolk_core.jit`, `tolk_core.nn`, `tolk_core.nn.optim`; layers nn does not have are written here from Tensor ops,
as a user would) and once with torch:

- cnn: conv3x3-batchnorm(batch statistics)-relu-maxpool2 twice + linear on the 8x8 digits, Adam: one train step
- gpt: a char-level GPT (2 layers, 4 heads, d 128, context 64, batch 8), AdamW: one train step on windows of
  this repository's docs/*.md (`local_text_tokens`)
- resnet: a stem conv to 16 channels and 4 basic blocks on 16x3x32x32, batch norm with fixed statistics: forward
- attention: causal attention, forward + backward of a sum loss (torch twice: written out, and its fused
  `scaled_dot_product_attention`)
- gru: a GRU cell unrolled 32 steps: forward
- gru_train: a GRU cell unrolled 8 steps, regression loss, SGD: one train step

Both sides start from the same numbers: the Tolk child draws every weight and input from a seeded numpy
generator (in sorted state-dict order) and writes them to a file that the torch child loads. Each side runs in
a child process of its own (no library's thread pool spins while the other is timed; a Tolk compile that
does not finish is stopped after `--timeout` seconds and reported, the other rows still run). A child first
runs two steps and records what it compares: the first step's outputs, the state after it (a train step's
parameters and the gradients it computed for them) and the second step's outputs (a train step's loss after
the update); the parent compares them by the normwise relative error max|tolk - torch| / max|torch| per array
and fails the row above 1e-3 (a jitted forward's replay is also checked against the eager step). Then
each child times its steps: Tolk eagerly and through `tolk_core.jit` (after its warm-up and capture calls),
torch eagerly, each the median of several steps, with Tolk's kernel launches per step.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from bench.rounds import Child, ChildFailed, merge_rounds, serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 0
RTOL = 1e-3
# a parameter's elements whose gradient is at most this much of the array's largest are not compared after
# an update (see max_rel_error)
AMBIGUOUS_GRAD = 1e-4
MAX_CALLS = 200
WORKLOADS = ("cnn", "gpt", "resnet", "attention", "gru", "gru_train")
# the ways torch writes a workload, where there is more than its eager modules ("eager"): attention written
# out as matmul/softmax, and as torch's fused scaled_dot_product_attention
TORCH_VARIANTS = {"attention": ("written", "sdpa")}

# ---------------------------------------------------------------- sizes
# "full" is the workload as described above; "quick" what `--quick` runs; "tiny" what the tests run
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "cnn": {"full": {"batch": 64, "c1": 16, "c2": 32}, "tiny": {"batch": 20, "c1": 4, "c2": 8}},
    "gpt": {"full": {"vocab": 65, "layers": 2, "heads": 4, "d": 128, "ctx": 64, "batch": 8},
            "tiny": {"vocab": 11, "layers": 1, "heads": 2, "d": 16, "ctx": 8, "batch": 2}},
    "resnet": {"full": {"batch": 16, "cin": 3, "c": 16, "blocks": 4, "hw": 32},
               "tiny": {"batch": 2, "cin": 3, "c": 4, "blocks": 1, "hw": 8}},
    "attention": {"full": {"b": 8, "h": 8, "t": 256, "d": 64}, "quick": {"b": 2, "h": 4, "t": 128, "d": 64},
                  "tiny": {"b": 1, "h": 2, "t": 16, "d": 8}},
    "gru": {"full": {"steps": 32, "batch": 16, "inp": 64, "hidden": 128},
            "tiny": {"steps": 4, "batch": 2, "inp": 4, "hidden": 8}},
    "gru_train": {"full": {"steps": 8, "batch": 16, "inp": 64, "hidden": 128},
                  "tiny": {"steps": 3, "batch": 2, "inp": 4, "hidden": 8}},
}


def size_of(name: str, size: str) -> dict[str, int]:
    """The sizes of workload `name` at `size` ("full", "quick" or "tiny"; quick is full where not given)."""
    sizes = SIZES[name]
    return sizes.get(size) or sizes["full"]


# ---------------------------------------------------------------- seeded numbers, shared by both sides
def fill_state(shapes: dict[str, tuple[int, ...]], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A value for every state entry, drawn in sorted-name order: a matrix or filter N(0, 1/fan_in); a norm's
    scale 1 + N(0, 0.1^2); a running variance U(0.5, 1.5); any other vector (biases, shifts, running
    means) N(0, 0.1^2)."""
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) >= 2:
            v = rng.standard_normal(shape) / math.sqrt(math.prod(shape[1:]))
        elif name.endswith("running_var"):
            v = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("weight"):
            v = 1 + 0.1 * rng.standard_normal(shape)
        else:
            v = 0.1 * rng.standard_normal(shape)
        out[name] = v.astype(np.float32)
    return out


def _digits_batch(batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    from tolk_core.demo import load_digits
    x, y = load_digits()
    idx = rng.choice(len(x), batch, replace=False)
    return x[idx].reshape(batch, 1, 8, 8), y[idx]


def local_text_tokens(vocab: int) -> np.ndarray:
    """The char GPT's training text: this repository's own documentation (docs/*.md, sorted by name), a text
    every checkout has. Each character is a token: the `vocab - 1` most frequent characters in order of
    frequency (ties by code point), every other character the last token. int32."""
    docs = os.path.join(ROOT, "docs")
    text = "".join(open(os.path.join(docs, f), encoding="utf-8").read() for f in sorted(os.listdir(docs))
                   if f.endswith(".md"))
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    common = sorted(counts, key=lambda ch: (-counts[ch], ch))[:vocab - 1]
    ids = {ch: i for i, ch in enumerate(common)}
    return np.fromiter((ids.get(ch, vocab - 1) for ch in text), np.int32, len(text))


def make_data(name: str, cfg: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The step's inputs (in the order the step takes them): float32 data, int32 labels and tokens."""
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    if name == "cnn":
        x, y = _digits_batch(cfg["batch"], rng)
        return {"x": x, "y": y.astype(np.int32)}
    if name == "gpt":
        text = local_text_tokens(cfg["vocab"])
        starts = rng.integers(0, len(text) - cfg["ctx"] - 1, cfg["batch"])
        tokens = np.stack([text[s:s + cfg["ctx"] + 1] for s in starts])
        return {"x": tokens[:, :-1].copy(), "y": tokens[:, 1:].copy()}
    if name == "resnet":
        return {"x": f32(cfg["batch"], cfg["cin"], cfg["hw"], cfg["hw"])}
    if name == "attention":
        return {k: f32(cfg["b"], cfg["h"], cfg["t"], cfg["d"]) for k in "qkv"}
    if name in ("gru", "gru_train"):
        data = {"x": f32(cfg["steps"], cfg["batch"], cfg["inp"])}
        return data | ({"y": f32(cfg["batch"], cfg["hidden"])} if name == "gru_train" else {})
    raise KeyError(name)


# ---------------------------------------------------------------- one side of a workload, in a child process
@dataclass
class Side:
    """What differs between Tolk and torch when a step is run and read: `finish` makes a step's outputs exist
    (Tolk: realize, then wait for the device), `numpy` reads one, `counters` are Tolk's (none for torch)."""
    finish: Callable[[list[Any]], None]
    numpy: Callable[[Any], np.ndarray]
    counters: Callable[[], dict[str, float]] = dict


def _say(phase: str) -> None:
    """The phase a child is in, on stderr: the parent names the last one when a child runs out of time."""
    print(f"phase: {phase}", file=sys.stderr, flush=True)


def _delta(side: Side, before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in side.counters().items()}


def check_steps(step: Callable[..., list[Any]], probe: Callable[[], dict[str, Any]], inputs: list[Any],
                side: Side, steps: int = 2) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """One or two steps: the arrays to compare (`out1.i` the first step's outputs, `probe.NAME` the state after
    it, `out2.i` the second step's outputs) and the first step's seconds and counters."""
    _say("first step")
    before, t0 = side.counters(), time.perf_counter()
    outs = step(*inputs)
    side.finish(outs)
    rec: dict[str, Any] = {"first_step_s": time.perf_counter() - t0, "first_step": _delta(side, before)}
    arrays = {f"out1.{i}": side.numpy(o) for i, o in enumerate(outs)}
    arrays |= {f"probe.{k}": side.numpy(v) for k, v in probe().items()}
    if steps == 1:
        return arrays, rec
    _say("second step")
    outs = step(*inputs)
    side.finish(outs)
    arrays |= {f"out2.{i}": side.numpy(o) for i, o in enumerate(outs)}
    return arrays, rec


class Timing(NamedTuple):
    """How long a child times each kind of step: at least `reps` calls, more (up to MAX_CALLS) until `min_s`
    is spent, fewer (but 3) once `budget_s` is."""
    reps: int
    min_s: float
    budget_s: float

    def arg(self) -> str:
        return ",".join(map(str, self))

    @classmethod
    def parse(cls, text: str) -> Timing:
        reps, min_s, budget_s = text.split(",")
        return cls(int(reps), float(min_s), float(budget_s))


def time_steps(call: Callable[[], Any], side: Side, t: Timing) -> dict[str, Any]:
    """Median seconds per call of `call` over the calls `t` asks for, and the counters per call (Tolk's
    kernel launches)."""
    times, before = [], side.counters()
    while len(times) < 3 or (len(times) < t.reps or sum(times) < t.min_s) and len(times) < MAX_CALLS:
        if sum(times) > t.budget_s:
            break
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    per = {k: v / len(times) for k, v in _delta(side, before).items()}
    return {"median_s": statistics.median(times), "best_s": min(times), "steps": len(times), "per_step": per,
            "times": times}


def max_rel_error(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> tuple[float, str]:
    """The largest normwise relative error max|got - want| / max|want| over the arrays of `want`, and the name
    of that array (inf and the name where an array is missing or differs in shape). A parameter after an update
    ("probe.P" beside its gradient "probe.P:grad") is compared where that gradient is not within rounding of zero
    (|g| > AMBIGUOUS_GRAD * max|g|, `want`'s): Adam moves an element by lr * g / (|g| + eps), so for a gradient
    within a few eps of zero the rounding of g decides the step's size and sign (up to lr: a 1e-3 normwise error
    on either side), and which elements those are depends on the data (the char GPT trains on docs/*.md)."""
    worst, where = 0.0, ""
    for name, w in sorted(want.items()):
        g = got.get(name)
        if g is None or g.shape != w.shape:
            return float("inf"), f"{name} (missing or shape {None if g is None else g.shape} vs {w.shape})"
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        if (grad := want.get(f"{name}:grad")) is not None and grad.shape == w.shape and grad.size:
            decided = np.abs(grad) > AMBIGUOUS_GRAD * float(np.max(np.abs(grad)))
            w64, g64 = w64[decided], g64[decided]
        err = float(np.max(np.abs(g64 - w64))) / max(float(np.max(np.abs(w64))), 1e-30) if w64.size else 0.0
        if math.isnan(err):
            return err, name
        if err > worst:
            worst, where = err, name
    return worst, where


def tolk_threads(device: str) -> int:
    """The threads Tolk's kernels use on `device`: on CPU, OpenMP's (OMP_NUM_THREADS where set, else one per
    CPU); elsewhere (PoCL's OpenCL on this CPU) one per CPU too."""
    env = os.environ.get("OMP_NUM_THREADS", "") if device.partition(":")[0].upper() == "CPU" else ""
    return int(env) if env.isdigit() and int(env) > 0 else os.cpu_count() or 1


def profile_rows(call: Callable[[], Any], top: int = 5) -> dict[str, Any]:
    """Tolk's profiler over one more call of `call`: the `top` kernels by time (name, launches, time share, work
    ratio: executed / nominal operations, above 1 where fusion recomputes), the kernel time in all and the
    number of distinct kernels. While profiled every launch waits for the device (tolk_core.profile)."""
    import tolk_core
    if getattr(tolk_core, "profile", None) is None:
        return {"note": "no profiler in this build (tolk_core.profile)", "top": []}
    with tolk_core.profile() as prof:
        call()
    rows = prof.rows
    return {"kernel_s": prof.total_s, "kernels": len(rows),
            "top": [{"name": r.name, "launches": r.launches, "share": r.share, "work_ratio": r.work_ratio,
                     "total_s": r.total_s, "gflops": r.gflops, "ops": r.ops} for r in rows[:top]]}


def tolk_side(device: str) -> Side:
    from tolk_core.counters import GlobalCounters
    from tolk_core.plugins import Device
    dev = Device[device]

    def finish(outs: list[Any]) -> None:
        outs[0].realize(*outs[1:])
        dev.synchronize()  # OpenCL launches are asynchronous: a step is done when its results exist
    keys = ("kernels_launched", "compiles", "disk_cache_hits")
    return Side(finish, lambda t: np.array(t.numpy()), lambda: {k: getattr(GlobalCounters, k) for k in keys})


def tolk_setup(name: str, size: str, device: str) -> tuple[Any, list[Any], dict[str, np.ndarray]]:
    """The Tolk job of workload `name`, its state dict loaded with seeded numbers, its input tensors, and those
    numbers ("state.KEY" and "data.KEY" arrays, what the torch side is built from)."""
    from bench.models_tolk import BUILDERS
    from tolk_core import Tensor
    cfg, rng = size_of(name, size), np.random.default_rng(SEED)
    job = BUILDERS[name](cfg, device)
    model_state = job.model.state_dict() if job.model is not None else {}
    # float entries only: a batch norm's int64 batch counter keeps its zero (torch's side may lack it)
    state = fill_state({k: tuple(v.shape) for k, v in model_state.items() if v.dtype.name.startswith("float")}, rng)
    data = make_data(name, cfg, rng)
    if job.model is not None:
        job.model.load_state_dict({**model_state, **{k: Tensor(v, device=device) for k, v in state.items()}})
    inputs = [Tensor(v, device=device).realize() for v in data.values()]
    return job, inputs, {f"state.{k}": v for k, v in state.items()} | {f"data.{k}": v for k, v in data.items()}


def torch_setup(name: str, size: str, variant: str, numbers: dict[str, np.ndarray]) -> tuple[Any, list[Any]]:
    """The torch job of workload `name` (way `variant`) built from `tolk_setup`'s numbers (its weights loaded
    with load_state_dict: only the batch counters of batch norms may be missing), and its input tensors."""
    import torch

    from bench.models_torch import BUILDERS
    state = {k[6:]: torch.from_numpy(v) for k, v in numbers.items() if k.startswith("state.")}
    job = BUILDERS[name](size_of(name, size), variant)
    if job.model is not None:
        missing, unexpected = job.model.load_state_dict(state, strict=False)
        if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
            raise RuntimeError(f"torch model's state dict differs: missing {missing}, unexpected {unexpected}")
    return job, [torch.from_numpy(v) for k, v in numbers.items() if k.startswith("data.")]


def torch_side() -> Side:
    return Side(lambda outs: None, lambda t: t.detach().numpy().copy())  # .numpy() shares the tensor's memory


def _timer(call: Callable[[], Any], side: Side) -> Callable[[int, float, float], dict[str, Any]]:
    """One round of timed calls of `call`, as the rounds protocol asks for it (bench.rounds)."""
    return lambda reps, min_s, budget_s: time_steps(call, side, Timing(reps, min_s, budget_s))


def _peak_rss_mb() -> float:
    import resource  # the child's peak resident memory: one library's, its own process (Linux: KiB)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tolk_child(name: str, size: str, device: str, workdir: str) -> None:
    """Build the Tolk workload, write its seeded weights and data (state.npz, for the torch child), check two
    steps (tolk.npz), warm up and capture the jitted step, then serve timing rounds of "eager" and "jit"."""
    import tolk_core
    _say("build")
    job, inputs, numbers = tolk_setup(name, size, device)
    np.savez(os.path.join(workdir, "state.npz"), **numbers)
    side = tolk_side(device)
    arrays, rec = check_steps(job.step, job.probe, inputs, side)
    np.savez(os.path.join(workdir, "tolk.npz"), **arrays)
    jitted = tolk_core.jit(job.step)
    for phase in ("jit warm-up", "jit capture"):
        _say(phase)
        t0 = time.perf_counter()
        side.finish(jitted(*inputs))
        rec[phase.replace(" ", "_").replace("-", "_") + "_s"] = time.perf_counter() - t0

    def finish() -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not job.probe():  # a forward (no state changes): the replay's outputs must be the first step's
            outs = jitted(*inputs)
            side.finish(outs)
            out["jit_max_rel_error"] = max_rel_error({f"out1.{i}": side.numpy(o) for i, o in enumerate(outs)},
                                                     {k: v for k, v in arrays.items() if k.startswith("out1.")})[0]
        out["profile"] = profile_rows(lambda: side.finish(jitted(*inputs)))
        return out | {"threads": tolk_threads(device), "peak_rss_mb": _peak_rss_mb()}
    _say("timing rounds")
    serve(rec, {"eager": _timer(lambda: side.finish(job.step(*inputs)), side),
                "jit": _timer(lambda: side.finish(jitted(*inputs)), side)}, finish)


def torch_child(name: str, size: str, variant: str, workdir: str, threads: int) -> None:
    """Build the torch workload from state.npz, check two steps (torch-VARIANT.npz), then serve timing rounds of
    "eager"."""
    import torch
    torch.set_num_threads(threads)
    _say("build")
    with np.load(os.path.join(workdir, "state.npz")) as f:
        job, inputs = torch_setup(name, size, variant, {k: f[k] for k in f.files})
    side = torch_side()
    arrays, rec = check_steps(job.step, job.probe, inputs, side)
    np.savez(os.path.join(workdir, f"torch-{variant}.npz"), **arrays)
    _say("timing rounds")
    serve(rec, {"eager": _timer(lambda: job.step(*inputs), side)},
          lambda: {"threads": torch.get_num_threads(), "peak_rss_mb": _peak_rss_mb()})


# ---------------------------------------------------------------- the parent: children, comparison, table
def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


@dataclass
class Settings:
    device: str
    size: str
    timing: Timing
    timeout_s: float
    threads: int = 0
    rounds: int = 5


def _start(args: list[str], s: Settings) -> tuple[Child | None, dict[str, Any]]:
    """A child (`python -m bench.models child ARGS`) that has built and checked its side: it and its ready
    record, or None and its error record."""
    child = Child("bench.models", args, _child_env(), ROOT, s.timeout_s)
    try:
        return child, child.read()["ready"]
    except ChildFailed as e:
        child.close()
        return None, e.record


def _time_in_rounds(sides: list[tuple[Child | None, dict[str, Any], tuple[str, ...]]], s: Settings) -> None:
    """`s.rounds` rounds, each timing every side's modes (a round's share of `s.timing`) one after the other,
    the order reversed every other round; each side's record gains one merged entry per mode and its closing
    record. A side that fails becomes an error record; the others go on."""
    t, n = s.timing, s.rounds
    per_round = f"{max(1, -(-t.reps // n))} {t.min_s / n} {t.budget_s / n}"
    got: list[dict[str, list[dict[str, Any]]]] = [{m: [] for m in modes} for _, _, modes in sides]
    live = [child is not None for child, _, _ in sides]
    for r in range(n):
        order = [(i, m) for i, (_, _, modes) in enumerate(sides) for m in modes]
        for i, mode in order if r % 2 == 0 else order[::-1]:
            child, rec, _ = sides[i]
            if not live[i] or child is None:
                continue
            try:
                got[i][mode].append(child.ask(f"time {mode} {per_round}"))
            except ChildFailed as e:
                live[i] = False
                rec.update(e.record)
    for i, (child, rec, modes) in enumerate(sides):
        if child is None or not live[i]:
            continue
        try:
            rec.update({m: merge_rounds(got[i][m]) for m in modes}, **child.ask("finish"))
        except ChildFailed as e:
            rec.update(e.record)
        finally:
            child.close()


def run_workload(name: str, s: Settings) -> list[dict[str, Any]]:
    """One row per torch variant of workload `name`: Tolk's child and one torch child per variant, built and
    checked, then timed in alternating rounds; their numbers compared."""
    with tempfile.TemporaryDirectory(prefix="tolk-models-") as work:
        tolk_proc, tolk = _start(["tolk", name, s.size, s.device, work], s)
        have_state = os.path.exists(os.path.join(work, "state.npz"))
        variants = TORCH_VARIANTS.get(name, ("eager",))
        torches = [_start(["torch", name, s.size, v, work, str(s.threads)], s) if have_state and tolk_proc
                   else (None, {"error": "no weights written"}) for v in variants]
        _time_in_rounds([(tolk_proc, tolk, ("eager", "jit")), *((c, r, ("eager",)) for c, r in torches)], s)
        got = _load(os.path.join(work, "tolk.npz"))
        return [_row(name, v, s, tolk, rec, got, _load(os.path.join(work, f"torch-{v}.npz")))
                for v, (_, rec) in zip(variants, torches, strict=True)]


def _load(path: str) -> dict[str, np.ndarray] | None:
    if not os.path.exists(path):
        return None
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def _row(name: str, variant: str, s: Settings, tolk: dict[str, Any], torch_rec: dict[str, Any],
         got: dict[str, np.ndarray] | None, want: dict[str, np.ndarray] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": name, "torch_variant": variant, "size": size_of(name, s.size),
                           "device": s.device, "torch_threads": s.threads, "tolk": tolk, "torch": torch_rec}
    if got is not None and want is not None:
        row["max_rel_error"], row["worst_array"] = max_rel_error(got, want)
        row["ok"] = bool(row["max_rel_error"] <= RTOL)
    else:
        row["max_rel_error"], row["ok"] = None, False
    if tolk.get("jit_max_rel_error", 0.0) > RTOL:
        row["ok"] = False
        row["worst_array"] = f"jitted replay differs from the eager step by {tolk['jit_max_rel_error']:.1e}"
    row["status"] = tolk.get("status") or torch_rec.get("status") or ("ok" if row["ok"] else "MISMATCH")
    t_torch = torch_rec.get("eager", {}).get("median_s")
    for mode in ("eager", "jit"):
        t = tolk.get(mode, {}).get("median_s")
        row[f"torch_over_tolk_{mode}"] = t_torch / t if t and t_torch else None
    return row


TITLES = {"cnn": "CNN digits train step (Adam)", "gpt": "char GPT train step (AdamW)",
          "resnet": "ResNet stack forward (eval)", "attention": "causal attention fwd+bwd",
          "gru": "GRU cell x32 forward", "gru_train": "GRU cell x8 train step (SGD)"}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def _times(rec: dict[str, Any] | None) -> str:
    """A time_steps record as "median (best)" in ms."""
    return "-" if not rec else f"{rec['median_s'] * 1e3:.2f} ({rec['best_s'] * 1e3:.2f})"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table_cells(row: dict[str, Any]) -> list[str]:
    """The cells of one row of the table (what `run_models` prints and docs/performance.md shows)."""
    tolk, torch_rec = row["tolk"], row["torch"]
    label = TITLES[row["workload"]] + ("" if row["torch_variant"] == "eager" else f" [torch {row['torch_variant']}]")
    err = row["max_rel_error"]
    check = "-" if err is None else f"{err:.1e}" + ("" if row["ok"] else f" FAIL ({row['worst_array']})")
    kernels = "/".join(f"{tolk[m]['per_step'].get('kernels_launched', 0):.0f}" if m in tolk else "-"
                       for m in ("eager", "jit"))
    first, compiled = tolk.get("first_step_s"), tolk.get("first_step", {}).get("compiles", 0)
    status = row["status"]
    if "error" in tolk or "error" in torch_rec:
        status += ": " + "; ".join(f"{who} {r['error']}" for who, r in (("tolk", tolk), ("torch", torch_rec))
                                   if "error" in r)
    return [label, check, _times(tolk.get("eager")), _times(tolk.get("jit")), _times(torch_rec.get("eager")),
            _ratio(row["torch_over_tolk_jit"]),
            _ratio(row["torch_over_tolk_eager"]), kernels, "-" if first is None else f"{first:.1f} ({compiled:.0f})",
            _ms(torch_rec.get("first_step_s")), _peaks(tolk, torch_rec), status]


def _peaks(tolk: dict[str, Any], torch_rec: dict[str, Any]) -> str:
    """Peak resident memory of each side's process, MB (Tolk/torch)."""
    return "/".join("-" if r.get("peak_rss_mb") is None else f"{r['peak_rss_mb']:.0f}" for r in (tolk, torch_rec))


HEADER = ["workload", "max rel err", "Tolk eager ms", "Tolk jit ms", "torch ms", "torch/jit", "torch/eager",
          "kernels eager/jit", "Tolk 1st s (compiler runs)", "torch 1st ms", "peak MB Tolk/torch", "status"]
WIDTHS = [44, 11, 17, 17, 17, 9, 11, 17, 25, 12, 18, 0]


def format_line(cells: list[str]) -> str:
    return " ".join(c.rjust(w) if 0 < i < len(cells) - 1 else c.ljust(w) for i, (c, w) in
                    enumerate(zip(cells, WIDTHS, strict=True))).rstrip()


def profile_lines(row: dict[str, Any]) -> list[str]:
    """The profiler's top kernels of one jitted step of the row's workload, a line each (none without one)."""
    prof = row["tolk"].get("profile")
    if not prof:
        return []
    if not prof["top"]:
        return [f"{TITLES[row['workload']]}: {prof.get('note', 'no kernels')}"]
    out = [f"{TITLES[row['workload']]}: {prof['kernels']} kernels, {prof['kernel_s'] * 1e3:.2f} ms kernel time"]
    out += [f"    {r['name']:44s} {r['launches']:4d} launches {r['share']:6.1%} of the time  "
            f"work x{r['work_ratio']:.2f}  {r['ops'][:60]}" for r in prof["top"]]
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown")
    except OSError:
        return "unknown"


def run_models(device: str, quick: bool, json_path: str | None, only: str | None = None,
               timeout_s: float = 180.0) -> int:
    """Every workload (or those whose name contains `only`), one row each (two for attention); prints the table
    and writes JSON rows. Returns 1 when a row failed its check, a child failed or ran out of time."""
    s = Settings(device, "quick" if quick else "full", Timing(5, 1.0, 3.0) if quick else Timing(20, 3.0, 10.0),
                 timeout_s=timeout_s, threads=tolk_threads(device))
    load = os.getloadavg()
    print(f"tolk model workloads on {device} ({'quick' if quick else 'full'} sizes); torch threads {s.threads}; "
          f"load average {load[0]:.1f} on {os.cpu_count()} cpus; {cpu_model()}\n"
          "times: median (best) of the timed steps; torch/jit and torch/eager: torch's median over Tolk's (> 1: "
          "Tolk is faster); first step: Tolk's in s (compiler invocations in it), torch's in ms")
    print(format_line(HEADER), flush=True)
    started, rows = time.perf_counter(), []
    for name in WORKLOADS:
        if only is not None and only not in name:
            continue
        for row in run_workload(name, s):
            rows.append(row)
            print(format_line(table_cells(row)), flush=True)
    print("profile of one jitted step (top 5 kernels by time; work = executed / nominal operations):")
    for row in rows:
        if row["torch_variant"] in ("eager", TORCH_VARIANTS.get(row["workload"], ("",))[0]) and \
                (lines := profile_lines(row)):
            print("\n".join(lines))
    bad = [r for r in rows if r["status"] != "ok"]
    print(f"models took {time.perf_counter() - started:.0f} s; " +
          (f"{len(bad)} ROW(S) FAILED: " + ", ".join(r["workload"] for r in bad) if bad else "every row matches torch"))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": device, "quick": quick, "loadavg": load, "cpu": cpu_model(), "rows": rows}, f,
                      indent=1)
    return 1 if bad else 0


def _child_main(argv: list[str]) -> int:
    """`python -m bench.models child tolk NAME SIZE DEVICE WORKDIR` or
    `... child torch NAME SIZE VARIANT WORKDIR THREADS`: one side, speaking bench.rounds' protocol."""
    who, name, size, where, workdir = argv[:5]
    if who == "tolk":
        tolk_child(name, size, where, workdir)
    else:
        torch_child(name, size, where, workdir, int(argv[5]))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["child"]:
        return _child_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--only")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds each child may run")
    args = ap.parse_args(argv)
    return run_models(args.device, args.quick, args.json, args.only, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
