"""rangeify: ranges index the tensor graph, movement ops become index maths, kernels end where values need storage.

Input: the prepared tensor graph of the outputs to compute, each paired with where it is stored (a new BUFFER,
or a view of existing storage for an assignment).
Output: kernels, each a kernel-level SINK whose PARAM slots name the buffers it reads and writes.

Which values get storage (a kernel boundary):
- every output, every CONTIGUOUS;
- a value holding an unstored reduction that is broadcast (EXPAND) on its way to a consumer: inlining it
  would recompute the reduction once per broadcast copy (this is why softmax is three kernels);
- a reduction read by more than one kernel: reductions are never computed twice.
Everything else is inlined (recomputed) into each kernel that reads it: fusion is the default.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.shape import apply_movement_op
from tolk_core.ir.uop import UOp, prod, resolve, sint

# the leaves a kernel reads from memory; everything else is computed
_STORAGE = (Op.BUFFER,)


@dataclass
class Kernel:
    """One kernel: its AST (a SINK of one STORE ended by its ranges) and the BUFFER bound to each PARAM slot."""
    ast: UOp
    buffers: list[UOp] = field(default_factory=list)


def _is_expanding(u: UOp) -> bool:
    return u.op is Op.EXPAND and any(i != o for i, o in zip(u.src[0].shape, u.arg, strict=True))


def realize_points(sink_values: list[UOp]) -> set[UOp]:
    """The values that need storage, given the values the caller asked for (see the module docstring).

    Broadcasts are visited sources-first, and before each one the reductions already read by several kernels
    are stored: a value is only stored for a broadcast if it still computes an unstored reduction then.
    """
    order = UOp(Op.SINK, dtypes.void, tuple(sink_values)).toposort()
    realized: set[UOp] = set(sink_values) | {u.src[0] for u in order if u.op is Op.CONTIGUOUS}
    realized |= {u for u in order if u.op in _STORAGE}
    _store_shared_reductions(realized)
    for u in order:
        if _is_expanding(u):
            x = u.src[0]
            while x.op in GroupOp.Movement:
                x = x.src[0]
            if x not in realized and any(b.op is Op.REDUCE_AXIS for b in _kernel_body(x, realized)):
                realized.add(x)
                _store_shared_reductions(realized)
    return realized


def _store_shared_reductions(realized: set[UOp]) -> None:
    """Store, until none is left, every unstored reduction that more than one kernel would compute."""
    while True:
        readers: dict[UOp, int] = {}
        for k in realized:
            for u in _kernel_body(k, realized):
                if u.op is Op.REDUCE_AXIS and u is not k:
                    readers[u] = readers.get(u, 0) + 1
        shared = {u for u, n in readers.items() if n > 1}
        if not shared:
            return
        realized |= shared


def _kernel_body(root: UOp, realized: set[UOp]) -> list[UOp]:
    """The unstored nodes a kernel computing `root` evaluates (root included), stopping at stored values."""
    seen, stack, out = {root}, [root], []
    while stack:
        u = stack.pop()
        out.append(u)
        for s in (u.src if (u is root or u not in realized) else ()):
            if s not in seen and s not in realized:
                seen.add(s)
                stack.append(s)
    return out


class _Lowerer:
    """Lower one kernel: index every value by range expressions, turning movements into index maths."""

    def __init__(self, realized: dict[UOp, UOp]):
        self.realized = realized                   # stored value -> its BUFFER
        self.params: dict[UOp, UOp] = {}           # BUFFER -> PARAM
        self.buffers: list[UOp] = []
        self.memo: dict[tuple, UOp] = {}
        self.nranges = 0

    def param(self, buf: UOp, size: sint) -> UOp:
        """The PARAM slot of `buf`, typed by the size of the value it holds (symbolic sizes are left out of
        the type, so one kernel serves every bound value)."""
        if (p := self.params.get(buf)) is None:
            ptr = buf.dtype.ptr(size if isinstance(size, int) else -1)
            p = self.params[buf] = UOp(Op.PARAM, ptr, (), len(self.buffers))
            self.buffers.append(buf)
        return p

    def new_range(self, size: sint, kind: str) -> UOp:
        if isinstance(size, int) and size == 1:
            return UOp.const(dtypes.index, 0)
        bound = size if isinstance(size, UOp) else UOp.const(dtypes.index, size)
        r = UOp(Op.RANGE, dtypes.index, (bound,), (self.nranges, kind))
        self.nranges += 1
        return r

    def load(self, buf: UOp, shape: tuple[sint, ...], idxs: tuple[UOp, ...], gate: UOp | None) -> UOp:
        flat = UOp.const(dtypes.index, 0)
        stride = 1
        for i, s in reversed(list(zip(idxs, shape, strict=True))):
            flat = flat + i * stride
            stride *= s
        param = self.param(buf, prod(shape))
        index = UOp(Op.INDEX, param.dtype, (param, flat) + ((gate,) if gate is not None else ()))
        return UOp(Op.LOAD, buf.dtype, (index,))

    def lower(self, u: UOp, idxs: tuple[UOp, ...], gate: UOp | None, top: bool = False) -> UOp:
        key = (u, idxs, gate, top)
        if (hit := self.memo.get(key)) is not None:
            return hit
        if not top and u in self.realized:
            ret = self.load(self.realized[u], tuple(u.shape), idxs, gate)
        elif u.op is Op.BUFFER:
            ret = self.load(u, (u.arg,), idxs, gate)
        elif u.op is Op.CONST:
            ret = u
        elif u.op in GroupOp.Movement:
            src_idxs, valid = apply_movement_op(u.op, tuple(u.src[0].shape), u.arg, idxs)
            if valid is None:
                ret = self.lower(u.src[0], tuple(src_idxs), gate)
            else:
                valid = valid.simplify()
                g = valid if gate is None else gate.alu(Op.AND, valid)
                inner = self.lower(u.src[0], tuple(src_idxs), g)
                ret = UOp(Op.WHERE, u.dtype, (valid, inner, UOp.const(u.dtype, _zero(u.dtype))))
        elif u.op is Op.REDUCE_AXIS:
            op, axes = u.arg
            in_shape = u.src[0].shape
            rngs = {a: self.new_range(in_shape[a], "reduce") for a in axes}
            src_idxs = tuple(rngs.get(a, i) for a, i in enumerate(idxs))
            body = self.lower(u.src[0], src_idxs, gate)
            live = tuple(r for r in rngs.values() if r.op is Op.RANGE)
            if any(in_shape[a] == 0 for a in axes):
                ret = UOp.const(u.dtype, _identity(op, u.dtype))
            else:
                ret = UOp(Op.REDUCE, u.dtype, (body, *live), op) if live else body
        elif u.op in (Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD):
            ret = self.lower(u.src[0], idxs, gate)
        else:  # ALU, CAST, BITCAST: elementwise
            ret = UOp(u.op, u.dtype, tuple(self.lower(s, idxs, gate) for s in u.src), u.arg)
        self.memo[key] = ret
        return ret


def _zero(dt):
    return False if dtypes.is_bool(dt) else (0.0 if dtypes.is_float(dt) else 0)


def _identity(op: Op, dt) -> int | float | bool:
    if op is Op.ADD:
        return _zero(dt)
    if op is Op.MUL:
        return True if dtypes.is_bool(dt) else (1.0 if dtypes.is_float(dt) else 1)
    return dtypes.min(dt)  # MAX


def store_target(lw: _Lowerer, target: UOp, idxs: tuple[UOp, ...], shape: tuple[sint, ...]) -> tuple[UOp, UOp]:
    """(INDEX into the storage under `target`, value cast) for storing at output position `idxs`.

    `target` is a BUFFER or movements / equal-size bitcasts of one (prepare_rangeify has refused broadcast
    destinations): the index goes back through them, and a padded view stores only where it is not padding.
    """
    chain, u = [], target
    while u.op in GroupOp.Movement or u.op is Op.BITCAST:
        chain.append(u)
        u = u.src[0]
    gate = None
    for m in chain:
        if m.op is Op.BITCAST:
            continue
        idxs, valid = apply_movement_op(m.op, tuple(m.src[0].shape), m.arg, idxs)
        if valid is not None:
            gate = valid if gate is None else gate.alu(Op.AND, valid)
    param = lw.param(u, u.arg)
    return UOp(Op.INDEX, param.dtype, (param, idxs[0]) + ((gate,) if gate is not None else ())), u


def lower_kernel(value: UOp, out: UOp, realized: dict[UOp, UOp]) -> Kernel:
    """The kernel that computes `value` into `out` (a BUFFER, or a view of one for an assignment), reading the
    stored values in `realized`."""
    lw = _Lowerer(realized)
    shape = tuple(value.shape)
    if out.op is Op.BUFFER:
        lw.param(out, prod(shape))  # slot 0, typed by the value's (possibly symbolic) size
    rngs = tuple(lw.new_range(s, "loop") for s in shape)
    body = lw.lower(value, rngs, None, top=True)
    if out.op is Op.BUFFER:
        flat = UOp.const(dtypes.index, 0)
        stride: sint = 1
        for r, s in reversed(list(zip(rngs, shape, strict=True))):
            flat = flat + r * stride
            stride = stride * s
        index = UOp(Op.INDEX, lw.params[out].dtype, (lw.params[out], flat))
    else:
        index, base = store_target(lw, out, rngs, shape)
        if base.dtype != body.dtype:  # stored through an equal-size bitcast: store the bits
            body = UOp(Op.BITCAST, base.dtype, (body,))
    store = UOp(Op.STORE, dtypes.void, (index, body))
    live = tuple(r for r in rngs if r.op is Op.RANGE)
    ast = UOp(Op.SINK, dtypes.void, (UOp(Op.END, dtypes.void, (store, *live)) if live else store,)).simplify()
    # simplification can drop reads (a load under a gate that is never true): number the remaining slots 0..n-1
    used = sorted((u for u in ast.toposort() if u.op is Op.PARAM), key=lambda u: u.arg)
    if len(used) != len(lw.buffers):
        ast = ast.substitute({p: p.replace(arg=i) for i, p in enumerate(used)})
    return Kernel(ast, [lw.buffers[p.arg] for p in used])


def rangeify(outputs: list[tuple[UOp, UOp]], new_buffer) -> list[Kernel]:
    """Kernels computing each (value, destination) output, in dependency order. One value may go to several
    destinations (equal graphs are one node): each gets its own kernel.

    `new_buffer(value)` makes the BUFFER for an intermediate value that needs storage.
    """
    values = [v for v, _ in outputs]
    points = realize_points(values)
    targets: dict[UOp, list[UOp]] = {}
    for v, b in outputs:
        targets.setdefault(v, []).append(b)
    # other kernels read an output from its first new BUFFER; a value only assigned into a view is read from
    # nowhere else (it is recomputed where needed)
    realized: dict[UOp, UOp] = {}
    for v, b in outputs:
        if b.op is Op.BUFFER:
            realized.setdefault(v, b)
    order = UOp(Op.SINK, dtypes.void, tuple(values)).toposort()
    for u in order:
        if u in points and u not in realized and u not in targets:
            realized[u] = u if u.op in _STORAGE else new_buffer(u)
    kernels = []
    for u in order:  # sources before users: a kernel's inputs are computed by earlier kernels
        if u not in points or not resolve(prod(u.shape) != 0):
            continue
        if u in targets:
            kernels.extend(lower_kernel(u, t, realized) for t in targets[u])
        elif u.op not in _STORAGE:
            kernels.append(lower_kernel(u, realized[u], realized))
    return kernels
