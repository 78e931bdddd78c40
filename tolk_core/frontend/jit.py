"""`@tolk_core.jit`: capture a function of Tensors once, replay its kernels on every later call.

Inputs are the Tensor arguments: positional, keyword, and one level inside list/tuple/dict arguments. Each is
checked before `engine.jit` sees it (the engine sees whole buffers only): its shape, dtype, device and view (the
movement ops over its buffer) must match the capture's, else `JitError` names the argument and what differs.
Everything else about an argument (ints, floats, strings, objects) is compared with the capture's too: a
changed Python value would be silently baked in, so it raises `JitError` naming it. Bound `Variable`s
(BIND nodes) passed as arguments become the call's var_vals instead.

Outputs: replay returns new Tensor objects over the same held buffers, stamped with the call number; reading
one after a later call overwrote its buffer raises `JitError` naming both calls (no copy per call). Buffers
reachable from any live Tensor after capture (outputs, state kept on objects, lazily read values) are held:
never planned into arenas. Reading tensor data during capture raises `JitError` (the value would be baked in).

Also (docs/jit.md): NumPy arguments the function uploads are uploaded again on every replay; random draws take
their key from a stored input refilled before every replay; a closure or global Tensor rebound since capture
raises `JitError`; calls (and reads of their outputs) from several threads take turns on one lock.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

from tolk_core import config
from tolk_core.engine import buffers as storage
from tolk_core.engine import jit as engine_jit
from tolk_core.errors import JitError
from tolk_core.frontend import random
from tolk_core.frontend import tensor as tensor_mod
from tolk_core.frontend.tensor import ReadGuard, Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.uop import UOp
from tolk_core.runtime import ranks
from tolk_core.schedule import placements

R = TypeVar("R")
_SCALARS = (int, float, bool, str, bytes, type(None), complex)


def _leaves(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(name, value) of every argument, looking one level into lists, tuples and dicts."""
    out: list[tuple[str, Any]] = []
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", kwargs[k]) for k in
                                                                   sorted(kwargs)]
    for name, a in named:
        if isinstance(a, (list, tuple)):
            out += [(f"{name}[{i}]", x) for i, x in enumerate(a)] or [(name, type(a))]
        elif isinstance(a, dict):
            out += [(f"{name}[{k!r}]", a[k]) for k in a] or [(name, dict)]
        else:
            out.append((name, a))
    return out


def _base(u: UOp) -> UOp | None:
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u if u.op is Op.BUFFER else None


def _view(u: UOp) -> tuple[tuple[Op, Any], ...]:
    """The movement ops over a Tensor's buffer, outermost first (its view; no UOp is built)."""
    ops = []
    while u.op in GroupOp.Movement:
        ops.append((u.op, u.arg))
        u = u.src[0]
    return tuple(ops)


def _describe(value: Any) -> Any:
    """What a non-Tensor argument is compared by: its value for plain data, else its identity."""
    if isinstance(value, _SCALARS) or (isinstance(value, UOp) and value.op is not Op.BIND):
        return ("value", value)
    if isinstance(value, np.ndarray):  # uploaded afresh on every replay: its shape and dtype are the capture's
        return ("array", value.shape, value.dtype.str)
    return ("object", id(value))


class _Stamp(ReadGuard):
    """The read guard of a Tensor returned by call `call` of jitted `fn`: its data may be read until a later
    call of `fn` overwrites the buffers it views."""

    def __init__(self, fn: TolkJit, call: int):
        self.fn, self.call = fn, call
        self.lock = fn._lock  # a read holds the function's lock: no call overwrites the buffers mid-read

    def check(self, t: Tensor) -> None:
        if self.call != self.fn.calls:
            raise JitError(f"this Tensor was returned by call {self.call} of jitted {self.fn.name}, whose buffers "
                           f"call {self.fn.calls} has since overwritten; read it (.numpy()) or copy it before "
                           "calling again")


class TolkJit(Generic[R]):
    """The wrapper `jit` returns; call it like the function. `reset()` returns to warmup; `captured` is the
    engine's captured schedule; `free_intermediates()` releases the capture's arenas."""

    def __init__(self, fn: Callable[..., R], prune: bool = False):
        self.fn, self.prune = fn, prune
        self.name = getattr(fn, "__name__", repr(fn))
        self.calls = 0
        self._engine: engine_jit.TinyJit | None = None
        self._signature: list[tuple[str, Any]] | None = None
        self._ret: Any = None
        self._current: tuple[tuple, dict] = ((), {})  # the arguments of the call in progress
        self._lock = threading.RLock()
        # the Tensors the function's closure and globals named at capture: (name, tensor, its buffer)
        self._free: list[tuple[str, Tensor, UOp | None]] = []
        self._draws: list[Tensor] = []  # the storage of each random draw's key, in draw order
        self._uploads: list[tuple[str, UOp]] = []  # (NumPy argument, the storage the capture uploaded it into)
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        cache = obj.__dict__.setdefault("_tolk_jits", {}) if hasattr(obj, "__dict__") else {}
        if (bound := cache.get(id(self))) is None:
            bound = cache[id(self)] = TolkJit(functools.partial(self.fn, obj), self.prune)
            bound.name = self.name
        return bound

    @property
    def captured(self) -> engine_jit.CapturedJit | None:
        return None if self._engine is None else self._engine.captured

    def reset(self) -> None:
        self._engine, self._signature, self._ret, self._free = None, None, None, []

    def _upload_arrays(self, leaves: list[tuple[str, Any]]) -> None:
        """Copy each NumPy argument the capture uploaded (`Tensor(arr)` of the argument itself) into the
        storage the capture made for it: a replay reads this call's array, as its contents are now."""
        named = dict(leaves)
        for name, buf in self._uploads:
            host = np.ascontiguousarray(np.asarray(named[name]).astype(dtypes.to_np(buf.dtype), copy=False))
            if host.size:
                storage.runtime_buffer(buf).copyin(host.reshape(-1).view(np.uint8).data)

    def _check_free_tensors(self) -> None:
        """A Tensor the function reads through its closure or a global, rebound to another Tensor (or to other
        storage) since capture, raises JitError: the replay would read the captured one's buffer."""
        if not self._free:  # only Tensors free at capture are checked: none, nothing to look up
            return
        now = {name: (t, b) for name, t, b in _free_tensors(self.fn)}
        for name, t, buf in self._free:
            cur = now.get(name)
            if cur is None or cur[0] is not t or cur[1] is not buf:
                raise JitError(f"{name!r}, a Tensor jitted {self.name} reads from its closure or globals, was "
                               "rebound since capture: replays would read the captured Tensor. Update it in place "
                               "(.assign(...)), pass it as an argument, or reset() the JIT")

    def free_intermediates(self) -> None:
        if (cap := self.captured) is not None:
            cap.free_intermediates()

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        """One call; calls from several threads take turns (one lock per jitted function): a replay writes the
        same output buffers every call, so two at once would hand one call's results to the other."""
        with self._lock:
            return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> R:
        if config.get("JIT") == 0:
            return self._run(args, kwargs)
        leaves = _leaves(args, kwargs)
        inputs, uops, var_vals, signature = self._inputs(leaves)
        device = inputs[0][1].device if inputs else _default_device()
        if isinstance(device, tuple):  # sharded inputs (docs/multi-device.md): graphs batch the first device's
            device = ranks.local_of(device)  # (this process's: the others of a tuple spanning ranks are remote)
        if self._engine is None:
            self._engine = engine_jit.create(device, fxn=lambda _uops, _vv: self._run(*self._current),
                                             prune=self.prune)
        if self._engine.cnt >= 2:
            return self._replay(leaves, uops, var_vals, signature)
        self._current = (args, kwargs)
        phase = self._engine.cnt
        # the capture compiles in a lineage of its own (a fork of the current one): its placement decisions
        # are hermetic, and the lineage it was called from is left as it was
        lineage = placements.current().fork() if phase == 1 else contextlib.nullcontext()
        arrays = {id(v): n for n, v in leaves if isinstance(v, np.ndarray)}
        uploads: list[tuple[str, UOp]] = []
        hook = (lambda data, buf: uploads.append((arrays[id(data)], buf)) if id(data) in arrays else None)
        draws: list[Tensor] = []
        if phase == 1:
            tensor_mod.upload_hooks.append(hook)
            random.recording.append(draws)
        try:
            with lineage:
                ret = self._engine.call(uops, var_vals, held_buffers=_held_buffers if phase == 1 else None)
        finally:
            self._current = ((), {})
            if phase == 1:
                tensor_mod.upload_hooks.remove(hook)
                random.recording.remove(draws)
                self._uploads, self._draws = uploads, draws
        self.calls += 1
        if phase == 0:
            return ret
        self._signature, self._ret = signature, ret
        self._free = _free_tensors(self.fn)
        return self._stamp(self._ret)

    def _replay(self, leaves: list[tuple[str, Any]], uops: list[UOp], var_vals: dict[str, int],
                signature: list) -> R:
        """A call after the capture: the arguments checked against it, this call's NumPy arguments and random
        keys copied into the storage the capture read them from, the kernels replayed."""
        self._validate(signature)
        self._check_free_tensors()
        if self._uploads:
            self._upload_arrays(leaves)
        for stored in self._draws:  # the next keys of the stream, as eager draws would take them
            buf = _base(stored.uop)
            assert buf is not None  # a key is uploaded storage
            storage.runtime_buffer(buf).copyin(random.next_key().view(np.uint8).data)
        assert self._engine is not None
        self._engine.call(uops, var_vals)
        self.calls += 1
        return self._stamp(self._ret)

    # ---- helpers
    def _run(self, args: tuple, kwargs: dict) -> Any:
        ret = self.fn(*args, **kwargs)
        outs = [t for t in _flatten(ret) if isinstance(t, Tensor)]
        if outs:
            outs[0].realize(*outs[1:])
        return ret

    def _inputs(self, leaves: list[tuple[str, Any]]) \
            -> tuple[list[tuple[str, Tensor]], list[UOp], dict[str, int], list]:
        """(the Tensor arguments by name, the BUFFERs they view in order, the bound Variables' values, the
        call's signature) of the arguments' `leaves`."""
        inputs: list[tuple[str, Tensor]] = []
        var_vals: dict[str, int] = {}
        signature: list[tuple[str, Any]] = []
        seen: dict[UOp, str] = {}
        for name, v in leaves:
            if isinstance(v, Tensor):
                if not _stored(v):  # lazy: compute it (a view of stored data stays a view)
                    v.realize()
                for base in _bases(v):
                    if (other := seen.get(base)) is not None:
                        raise JitError(f"duplicate inputs to JIT: {other} and {name} share one buffer; pass it "
                                       "once or pass a copy (.contiguous())")
                    seen[base] = name
                signature.append((name, ("tensor", v.shape, v.dtype, v.device, _view(v.uop))))
                inputs.append((name, v))
            elif isinstance(v, UOp) and v.op is Op.BIND:
                var, val = v.unbind()
                var_vals[var.expr] = val
                signature.append((name, ("variable", var)))
            else:
                signature.append((name, _describe(v)))
        return inputs, list(seen), var_vals, signature

    def _validate(self, signature: list[tuple[str, Any]]) -> None:
        want = self._signature
        assert want is not None
        if want == signature:  # the common case, compared in C (the dtypes and devices are the same objects)
            return
        if [n for n, _ in want] != [n for n, _ in signature]:
            raise JitError(f"JIT arguments of {self.name} changed since capture: captured "
                           f"{[n for n, _ in want]}, called with {[n for n, _ in signature]}")
        for (name, w), (_, g) in zip(want, signature, strict=True):
            if w == g:
                continue
            if w[0] == "tensor" and g[0] == "tensor":
                for i, what in ((1, "shape"), (2, "dtype"), (3, "device"), (4, "view")):
                    if w[i] != g[i]:
                        raise JitError(f"JIT input mismatch in {self.name}: {name} has {what} {_show(g, i)}, the "
                                       f"capture had {_show(w, i)}")
            raise JitError(f"JIT {name} of {self.name} changed since capture: {_show_arg(w)} -> "
                           f"{_show_arg(g)}; non-Tensor arguments are baked into the capture (reset() the JIT, or "
                           "pass the value as a Tensor or a bound Variable)")

    def _stamp(self, ret: Any) -> Any:
        """Fresh Tensor objects over the returned buffers, remembered as this call's outputs."""
        def wrap(t: Any) -> Any:
            if not isinstance(t, Tensor):
                return t
            out = t._wrap(t.uop)  # its device is canonical already: no second resolve per output per call
            out._read_guard = _Stamp(self, self.calls)
            return out
        if isinstance(ret, (list, tuple)):
            return type(ret)(wrap(t) for t in ret)
        if isinstance(ret, dict):
            return {k: wrap(v) for k, v in ret.items()}
        return wrap(ret)


def _stored(t: Tensor) -> bool:
    """Whether `t` views storage (each shard of a sharded tensor)."""
    if t.uop.op is Op.MULTI:
        return all(_base(s) is not None for s in t.uop.src)
    return _base(t.uop) is not None


def _bases(t: Tensor) -> list[UOp]:
    """The BUFFERs stored tensor `t` views: one, or one per shard of a sharded tensor (each a JIT input)."""
    parts = t.uop.src if t.uop.op is Op.MULTI else (t.uop,)
    out = [b for s in parts if (b := _base(s)) is not None]
    assert len(out) == len(parts)  # _inputs computed every input into storage
    return out


def _free_tensors(fn: Any) -> list[tuple[str, Tensor, UOp | None]]:
    """(name, Tensor, its buffer) for every Tensor the function (under partials) names as a free variable
    (closure cell) or global. Only the function's own code: Tensors reached through other functions or
    attributes of objects are not seen."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    named = {}
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        with contextlib.suppress(ValueError):  # an empty cell
            named[name] = cell.cell_contents
    glob = getattr(fn, "__globals__", {})
    named.update({n: glob[n] for n in code.co_names if n in glob})
    return [(n, v, _base(v.uop)) for n, v in named.items() if isinstance(v, Tensor)]


def _flatten(ret: Any) -> list[Any]:
    if isinstance(ret, (list, tuple)):
        return list(ret)
    if isinstance(ret, dict):
        return list(ret.values())
    return [ret]


def _show(sig: tuple, i: int) -> str:
    v = sig[i]
    return v.name if i == 2 else (_view_text(v) if i == 4 else str(v))


def _view_text(view: tuple[tuple[Op, Any], ...]) -> str:
    return " of ".join(f"{op.name.lower()}{arg}" for op, arg in view) + " of its buffer" if view else \
        "its buffer as is"


def _show_arg(sig: tuple) -> str:
    if sig[0] == "value":
        return repr(sig[1])
    if sig[0] == "tensor":
        return f"Tensor{sig[1]}"
    if sig[0] == "variable":
        return f"Variable {sig[1].expr}"
    if sig[0] == "array":
        return f"a NumPy array of shape {sig[1]} and dtype {sig[2]}"
    return "another object"


def _default_device() -> str:
    from tolk_core.plugins import Device
    return Device.DEFAULT


def _held_buffers() -> list[UOp]:
    """Every BUFFER reachable from a live Tensor: outputs, state kept on objects, values read later."""
    held: dict[UOp, None] = {}
    for obj in gc.get_objects():
        if type(obj) is Tensor:
            held.update(dict.fromkeys(u for u in obj.uop.toposort() if u.op is Op.BUFFER))
    return list(held)


def jit(fn: Callable[..., R] | None = None, *, prune: bool = False) -> Any:
    """Decorator: `@jit` or `@jit(prune=...)` over a function (or method) of Tensors; see the module docstring.

    Call 1 runs eagerly, call 2 captures (and returns real results), later calls replay. `JIT=0` runs every call
    eagerly; `JIT=2` replays without graph batching."""
    if fn is None:
        return lambda f: TolkJit(f, prune)
    return TolkJit(fn, prune)

