"""Rendered kernel sources remembered on disk, so a new process skips code generation for kernels it has seen.

Optimizing, linearizing and rendering the demo MLP's two kernels takes about 20 ms of Python, most of a warm
process's first call once the binary itself comes from the compile cache. `generate_cached` keys a kernel by:

- the kernel AST's structure (every node's op, dtype, argument and sources, in topological order);
- the renderer: its class and its plain-data attributes, class-level ones included (OpenCL's extensions, the
  limits the optimizer reads);
- every setting's current value (NOOPT, thread thresholds, ...: settings are few and cheap to read) and the
  optimizer choices in effect (`codegen.choices`: a tuned kernel's plan);
- the code that generates: the size and modification time of every module of tolk_core and of the renderer's
  package, so an edited or upgraded Tolk never reads sources an older version wrote.

A kernel whose AST argument has no stable text (an object printed with its address) or whose launch size is
symbolic is generated every time. DISABLE_COMPILER_CACHE turns this cache off with the binary cache. Entries
are verified (`runtime.cache_file`): a damaged one warns and is generated and written again.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from tolk_core import config
from tolk_core.codegen import KernelSource, choices, generate
from tolk_core.ir.dtype import DType, dtypes
from tolk_core.ir.uop import UOp
from tolk_core.render.cstyle import KernelParam
from tolk_core.runtime import cache_file
from tolk_core.runtime.compiler import cache_dir


def structure_text(ast: UOp) -> str | None:
    """The AST as stable text, or None when some argument has no stable text."""
    index: dict[UOp, int] = {}
    lines = []
    for u in ast.toposort():
        line = f"{u.op.name} {u.dtype!r} {u.arg!r} {[index[s] for s in u.src]}"
        if " at 0x" in line:
            return None
        index[u] = len(index)
        lines.append(line)
    return "\n".join(lines)


@functools.cache
def _code_fingerprint(renderer_module: str) -> str:
    """Size and modification time of every module of tolk_core and of the renderer's top-level package."""
    roots = {Path(__file__).resolve().parents[1]}
    mod = sys.modules.get(renderer_module.partition(".")[0])
    if mod is not None and (file := getattr(mod, "__file__", None)):
        roots.add(Path(file).resolve().parent)
    h = hashlib.sha256()
    for root in sorted(roots):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in sorted(filenames):
                if f.endswith(".py"):
                    st = os.stat(os.path.join(dirpath, f))
                    h.update(f"{dirpath}/{f}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def _plain(v: Any) -> str | None:
    """Stable text of a plain-data attribute value (sets sorted: their order follows per-process string
    hashes); None for anything else (functions, tables of functions, the device object)."""
    if isinstance(v, (frozenset, set)):
        return repr(sorted(map(repr, v)))
    if v is None or isinstance(v, (bool, int, float, str, tuple)):
        return repr(v)
    return None


def _renderer_identity(renderer: Any) -> str:
    """The renderer's class and every plain-data attribute it has, its class's included (limits the optimizer
    reads, such as `local_max` or `shared_bytes`, may be set on the class)."""
    attrs = ((k, _plain(getattr(renderer, k))) for k in dir(renderer) if not k.startswith("_") and k != "device_obj")
    return f"{type(renderer).__module__}.{type(renderer).__qualname__} {[(k, t) for k, t in attrs if t is not None]}"


def _key(ast: UOp, renderer: Any) -> str | None:
    if (text := structure_text(ast)) is None:
        return None
    ident = _renderer_identity(renderer)
    settings = repr([(n, config.get(n)) for n in sorted(config.SETTINGS)])
    h = hashlib.sha256()
    for part in (_code_fingerprint(type(renderer).__module__), ident, settings, repr(choices.current()), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _dtype(row: list) -> DType:
    name, itemsize, kind, count = row
    dt = getattr(dtypes, name)
    assert (dt.itemsize, dt.kind) == (itemsize, kind), f"dtype {name} changed meaning"
    return dt.vec(count) if count > 1 else dt


def _dump(ks: KernelSource) -> str | None:
    if not all(isinstance(g, int) for g in ks.global_size):
        return None
    return json.dumps({"name": ks.name, "source": ks.source, "global_size": list(ks.global_size),
                       "local_size": None if ks.local_size is None else list(ks.local_size),
                       "params": [[p.slot, [p.dtype.name, p.dtype.itemsize, p.dtype.kind, p.dtype.count], p.written,
                                   p.var] for p in ks.params], "vars": list(ks.vars)})


def _load(text: str) -> KernelSource:
    d = json.loads(text)
    return KernelSource(d["name"], d["source"], tuple(d["global_size"]),
                        None if d["local_size"] is None else tuple(d["local_size"]),
                        tuple(KernelParam(slot, _dtype(dt), written, var) for slot, dt, written, var in d["params"]),
                        tuple(d["vars"]))


def generate_cached(ast: UOp, renderer: Any) -> KernelSource:
    """`generate(ast, renderer)`, read from the disk cache when this kernel was generated before."""
    if config.get("DISABLE_COMPILER_CACHE") or (key := _key(ast, renderer)) is None:
        return generate(ast, renderer)
    path = cache_dir() / "source" / key[:2] / f"{key}.json"
    if (data := cache_file.read_entry(path, "kernel source")) is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError, AssertionError):
            return _load(data.decode())  # whole but unreadable: written by a Tolk whose dtypes differ
    ks = generate(ast, renderer)
    if (text := _dump(ks)) is not None:
        with contextlib.suppress(OSError):  # an unwritable cache only costs the next process the generation
            cache_file.write_entry(path, text.encode())
    return ks
