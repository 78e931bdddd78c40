"""The one node type of the IR.

`UOp(op, dtype, src, arg)` is immutable and hash-consed: constructing a structurally equal node returns the
same object, so equality and hashing are identity (cheap). Interning is weak: the table holds weak
references and a node removes its own entry when it is freed, so dropped graphs free their memory.
`arg` must be hashable.

Derived facts (shape, device, vmin/vmax, toposort) are computed once per node and cached on it. They are
computed iteratively over the uncached part of the graph, so a 100k-deep chain does not recurse.

Tensor-level conventions (what `shape` and `device` read):
  * BUFFER: dtype is the element dtype, arg = size (sint), src = (UNIQUE(arg=id), DEVICE(arg=name));
    shape (size,). Build with `UOp.new_buffer`.
  * PARAM: arg = (slot, shape) at tensor level (shape from arg[1]); at kernel level arg = slot, dtype a
    pointer, no shape.
  * CONST, DEFINE_VAR, BIND: shape (); tensor consts are scalars reshaped/expanded by movement ops. A CONST
    may have a DEVICE source to place it.
  * Movement ops carry their argument: RESHAPE new shape, PERMUTE order, EXPAND new shape, PAD ((before,
    after), ...), SHRINK ((start, end), ...), FLIP (bool, ...) per axis.
  * REDUCE_AXIS arg = (Op, axes): the reduced axes are kept with size 1.
  * ALU, CAST: the shape of the sources, which must agree. Kernel-level nodes (RANGE, INDEX, ...) have
    shape None, and so does any ALU over them.
  * CALL(body, *args): the body's shape; an inline call's body reads PARAM (slot, shape) placeholders.
  * device: the arg of a DEVICE source, else the first device among the sources.
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Union

from tolk_core.errors import DTypeError, ShapeError, TolkError
from tolk_core.ir.dtype import DType, PtrDType, dtypes
from tolk_core.ir.ops import GroupOp, Op, exec_alu, python_alu, trunc_div, truncate

sint = Union[int, "UOp"]

# (op, dtype, src, arg) -> weakref to the node. src tuples hash by node identity.
_ucache: dict[tuple, weakref.ReferenceType] = {}
_unique_counter = [0]


def live_uops() -> int:
    """Number of entries in the interning table (for leak tests)."""
    return len(_ucache)


_CONST = Op.CONST


def _key(op: Op, dtype: DType, src: tuple, arg: Any) -> tuple:
    # -0.0 == 0.0 in Python; keep them distinct so 1/-0.0 stays -inf
    if type(arg) is float and arg == 0.0 and op is _CONST:
        return (op, dtype, src, arg, math.copysign(1.0, arg))
    return (op, dtype, src, arg)


class UOp:
    """An IR node. Never mutate the four fields; build a new node with `replace`."""
    __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "_topo", "_shape", "_device", "_vmin", "_vmax",
                 "_simple", "_key")
    op: Op
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    # facts cached on first use (`_fill`); unset until then, hence the AttributeError the properties catch
    _topo: tuple[UOp, ...]
    _shape: tuple[sint, ...] | None
    _device: str | None
    # bounds are ints for integer and bool dtypes, floats for floats: the interval arithmetic of `_range` relies
    # on the dtype, which a checker does not follow, so the slots are Any and `vmin`/`vmax` say int | float
    _vmin: Any
    _vmax: Any
    # the simplifier's result for this node; None where this node is its own (a simplified node)
    _simple: UOp | None
    _key: tuple  # the interning key it was made under (`__del__` removes its entry)

    def __new__(cls, op: Op, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        if type(src) is not tuple:
            src = tuple(src)
        key = (op, dtype, src, arg) if type(arg) is not float else _key(op, dtype, src, arg)
        ref = _ucache.get(key)
        if ref is not None and (u := ref()) is not None:
            return u
        self = object.__new__(cls)
        self.op, self.dtype, self.src, self.arg, self._key = op, dtype, src, arg, key
        _ucache[key] = weakref.ref(self)
        return self

    @staticmethod
    def shaped(op: Op, dtype: DType, src: tuple[UOp, ...], arg: Any, shape: tuple[sint, ...]) -> UOp:
        """`UOp(op, dtype, src, arg)` for a tensor-level node whose shape the caller has checked already:
        `shape` is recorded on a new node (so `UOp.shape` does not work it out again; a node interned before
        keeps its own). `src` must be a tuple. The front end's fast path for building its nodes."""
        key = (op, dtype, src, arg) if type(arg) is not float else _key(op, dtype, src, arg)
        ref = _ucache.get(key)
        if ref is not None and (u := ref()) is not None:
            return u
        self = object.__new__(UOp)
        self.op, self.dtype, self.src, self.arg, self._shape, self._key = op, dtype, src, arg, shape, key
        _ucache[key] = weakref.ref(self)
        return self

    def __del__(self) -> None:
        try:  # the interning key kept on the node: rebuilding the tuple cost as much as the lookup
            key = self._key
            ref = _ucache.get(key)
            if ref is not None and ref() in (None, self):
                del _ucache[key]
        except Exception:  # interpreter shutdown: module globals may already be gone
            pass

    def __reduce__(self):
        return UOp, (self.op, self.dtype, self.src, self.arg)

    def replace(self, **kw: Any) -> UOp:
        """This node with some of op/dtype/src/arg replaced (interned like any construction)."""
        return UOp(kw.pop("op", self.op), kw.pop("dtype", self.dtype), kw.pop("src", self.src), kw.pop("arg", self.arg))

    # ---------------------------------------------------------------- graph walks
    def toposort(self) -> list[UOp]:
        """Every node reachable from this one, sources before users, this node last. Deterministic:
        sources are visited in order. Cached on the node queried (not on its ancestors)."""
        try:
            return [*self._topo, self]
        except AttributeError:
            pass
        order: list[UOp] = []
        seen: set[UOp] = {self}
        # each open node with an iterator over its sources: resuming the iterator costs less per edge than
        # carrying an index in a rebuilt tuple (the walk is the eager realize's largest fixed cost per node)
        stack: list[tuple[UOp, Iterator[UOp]]] = [(self, iter(self.src))]
        while stack:
            u, srcs = stack[-1]
            for s in srcs:
                if s not in seen:
                    seen.add(s)
                    stack.append((s, iter(s.src)))
                    break
            else:
                stack.pop()
                order.append(u)
        order.pop()  # self: kept out of the cache to avoid a reference cycle through it
        self._topo = tuple(order)
        return [*order, self]

    def _fill(self, slot: str, compute) -> None:
        """Compute cached attribute `slot` for this node and every uncached ancestor, sources first,
        without recursion. `compute(u)` may read `slot` of u's sources."""
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            u, expanded = stack.pop()
            if hasattr(u, slot):
                continue
            if expanded:
                object.__setattr__(u, slot, compute(u))
                continue
            stack.append((u, True))
            stack.extend((s, False) for s in u.src if not hasattr(s, slot))

    def storage_base(self, through: frozenset[Op] = GroupOp.View) -> UOp:
        """The node this view reads: this node with every op in `through` stripped off (each is followed to its
        first source). `GroupOp.Movement`: through movements only (a BUFFER is then read whole, rearranged);
        `GroupOp.View` (the default): movements and BITCASTs; `GroupOp.ViewOfState`: AFTERs too (the storage
        itself, not one state of it)."""
        return self.view_chain(through)[1]

    def view_chain(self, through: frozenset[Op] = GroupOp.View) -> tuple[list[UOp], UOp]:
        """(the ops in `through` from this node down, outermost first, `storage_base(through)`): for walks that
        act on each view on the way down."""
        chain, u = [], self
        while u.op in through:
            chain.append(u)
            u = u.src[0]
        return chain, u

    def substitute(self, mapping: dict[UOp, UOp], on_rebuild: Callable[[UOp, UOp], None] | None = None) -> UOp:
        """This graph with every occurrence of a key of `mapping` replaced by its value (no rewriting of the
        replacements themselves). `on_rebuild(old, new)` is called for each node rebuilt on new sources."""
        memo: dict[UOp, UOp] = dict(mapping)
        if self in memo:
            return memo[self]
        for u in self.toposort():
            if u in memo:
                continue
            new_src = tuple(memo.get(s, s) for s in u.src)
            memo[u] = u if new_src == u.src else UOp(u.op, u.dtype, new_src, u.arg)
            if on_rebuild is not None and memo[u] is not u:
                on_rebuild(u, memo[u])
        return memo[self]

    def simplify(self) -> UOp:
        """This expression rewritten by the symbolic simplifier (`ir.symbolic.symbolic`). The simplifier is a
        pure function of the node, so the result is remembered on it (and the result marked as simplified):
        index expressions are simplified again at every movement they pass through, mostly unchanged."""
        try:
            hit = self._simple
            return self if hit is None else hit
        except AttributeError:
            pass
        from tolk_core.ir.pattern import graph_rewrite
        from tolk_core.ir.symbolic import symbolic
        out = graph_rewrite(self, symbolic, name="simplify")
        object.__setattr__(self, "_simple", None if out is self else out)
        if out is not self:
            object.__setattr__(out, "_simple", None)
        return out

    # ---------------------------------------------------------------- derived facts
    @property
    def shape(self) -> tuple[sint, ...] | None:
        """Tensor-level shape (see module docstring), None where a node has no shape."""
        try:
            return self._shape
        except AttributeError:
            self._fill("_shape", _compute_shape)
            return self._shape

    @property
    def device(self) -> str | None:
        try:
            return self._device
        except AttributeError:
            self._fill("_device", _compute_device)
            return self._device

    @property
    def vmin(self) -> int | float:
        """A lower bound of this expression's value (exact for constants and variables)."""
        try:
            return self._vmin
        except AttributeError:
            self._fill("_vmin", _fill_range)
            return self._vmin

    @property
    def vmax(self) -> int | float:
        """An upper bound of this expression's value."""
        try:
            return self._vmax
        except AttributeError:
            self._fill("_vmin", _fill_range)
            return self._vmax

    @property
    def tensor_shape(self) -> tuple[sint, ...]:
        """`shape` where the node must have one (a tensor-level node); ShapeError for a node without one."""
        if (shape := self.shape) is None:
            raise ShapeError(f"{self.op.name} has no shape")
        return shape

    @property
    def ptrdtype(self) -> PtrDType:
        """This node's dtype, a pointer (a PARAM's, an INDEX's, a kernel-local array's); DTypeError otherwise."""
        if not isinstance(self.dtype, PtrDType):
            raise DTypeError(f"{self.op.name} has dtype {self.dtype!r}, not a pointer")
        return self.dtype

    @property
    def size(self) -> sint:
        """Number of elements of the tensor-level shape (ShapeError for a node without one)."""
        return prod(self.tensor_shape)

    # ---------------------------------------------------------------- construction helpers
    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        """A scalar CONST of `dtype` holding `value` converted to that dtype (ints wrap, floats round)."""
        if isinstance(value, UOp):
            return value
        return UOp(Op.CONST, dtype, (), truncate(dtype.scalar(), value))

    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer `name` known to lie in [min_val, max_val]."""
        if min_val > max_val:
            raise TolkError(f"Variable {name!r}: min {min_val} > max {max_val}")
        return UOp(Op.DEFINE_VAR, dtype, (), (name, min_val, max_val))

    @staticmethod
    def new_buffer(device: str, size: sint, dtype: DType) -> UOp:
        """A fresh tensor-level BUFFER (a new UNIQUE identity every call)."""
        _unique_counter[0] += 1
        return UOp(Op.BUFFER, dtype, (UOp(Op.UNIQUE, dtypes.void, (), _unique_counter[0]),
                                      UOp(Op.DEVICE, dtypes.void, (), device)), size)

    def bind(self, val: int) -> UOp:
        """BIND(this variable, val); raises TolkError when val is outside the variable's bounds."""
        if self.op is not Op.DEFINE_VAR:
            raise TolkError(f"bind: only variables can be bound, not {self.op.name}")
        name, lo, hi = self.arg
        if not lo <= val <= hi:
            raise TolkError(f"bind: {name}={val} is outside its bounds [{lo}, {hi}]")
        return UOp(Op.BIND, self.dtype, (self, UOp.const(self.dtype, val)))

    def unbind(self) -> tuple[UOp, int]:
        """(variable, value) of a BIND."""
        if self.op is not Op.BIND:
            raise TolkError(f"unbind: expected BIND, got {self.op.name}")
        return self.src[0], self.src[1].arg

    @property
    def expr(self) -> str:
        """The name of a DEFINE_VAR (or of the variable of a BIND)."""
        return (self.src[0] if self.op is Op.BIND else self).arg[0]

    def _ufix(self, x: Any) -> UOp:
        return x if isinstance(x, UOp) else UOp.const(self.dtype.scalar() if self.dtype.kind != "b" or
                                                      isinstance(x, bool) else dtypes.from_py(x), x)

    def alu(self, op: Op, *srcs: Any) -> UOp:
        """ALU `op` over this node and `srcs` (Python scalars become CONSTs of this dtype). Folds when every
        source is a CONST. Comparisons give bool (with this node's lanes)."""
        s = (self, *(self._ufix(x) for x in srcs))
        if op in GroupOp.Comparison:
            dt = dtypes.bool.vec(self.dtype.count) if self.dtype.count > 1 else dtypes.bool
        elif op is Op.WHERE:
            dt = s[1].dtype
        else:
            dt = self.dtype
        if all(x.op is Op.CONST for x in s) and dt.count == 1:
            try:
                return UOp.const(dt, exec_alu(op, dt, tuple(x.arg for x in s)))
            except (ZeroDivisionError, ValueError, OverflowError):
                pass
        return UOp(op, dt, s)

    def cast(self, dt: DType) -> UOp:
        if self.dtype == dt:
            return self
        if self.op is Op.CONST:
            return UOp.const(dt, self.arg)
        return UOp(Op.CAST, dt, (self,))

    def bitcast(self, dt: DType) -> UOp:
        return self if self.dtype == dt else UOp(Op.BITCAST, dt, (self,))

    # arithmetic: builds ALU nodes; `//` and `%` are the IR's truncating IDIV and MOD
    def __add__(self, x: Any) -> UOp:
        if type(x) is int and x == 0:
            return self
        return self.alu(Op.ADD, x)

    def __radd__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.ADD, self) if not (type(x) is int and x == 0) else self

    def __sub__(self, x: Any) -> UOp:
        return self.alu(Op.SUB, x)

    def __rsub__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.SUB, self)

    def __mul__(self, x: Any) -> UOp:
        if type(x) is int and x == 1:
            return self
        return self.alu(Op.MUL, x)

    def __rmul__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.MUL, self) if not (type(x) is int and x == 1) else self

    def __floordiv__(self, x: Any) -> UOp:
        if type(x) is int and x == 1:
            return self
        return self.alu(Op.IDIV, x)

    def __rfloordiv__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.IDIV, self)

    def __mod__(self, x: Any) -> UOp:
        return self.alu(Op.MOD, x)

    def __rmod__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.MOD, self)

    def __truediv__(self, x: Any) -> UOp:
        return self.alu(Op.FDIV, x)

    def __rtruediv__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.FDIV, self)

    def __neg__(self) -> UOp:
        return self.alu(Op.NEG)

    def __lt__(self, x: Any) -> UOp:
        return self.alu(Op.CMPLT, x)

    def __gt__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.CMPLT, self)

    def __le__(self, x: Any) -> UOp:
        return (self > x).logical_not()

    def __ge__(self, x: Any) -> UOp:
        return (self < x).logical_not()

    def __and__(self, x: Any) -> UOp:
        return self.alu(Op.AND, x)

    def __rand__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.AND, self)

    def __or__(self, x: Any) -> UOp:
        return self.alu(Op.OR, x)

    def __ror__(self, x: Any) -> UOp:
        return self._ufix(x).alu(Op.OR, self)

    def __xor__(self, x: Any) -> UOp:
        return self.alu(Op.XOR, x)

    def __lshift__(self, x: Any) -> UOp:
        return self.alu(Op.SHL, x)

    def __rshift__(self, x: Any) -> UOp:
        return self.alu(Op.SHR, x)

    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def ne(self, x: Any) -> UOp:
        return self.alu(Op.CMPNE, x)

    def eq(self, x: Any) -> UOp:
        return self.alu(Op.CMPEQ, x)

    def maximum(self, x: Any) -> UOp:
        return self.alu(Op.MAX, x)

    def minimum(self, x: Any) -> UOp:
        """min(self, x), expressed as -max(-self, -x) (no MIN op in the IR)."""
        return -((-self).maximum(-self._ufix(x)))

    def where(self, a: Any, b: Any) -> UOp:
        """`a` where this bool is true, else `b`."""
        if not isinstance(a, UOp) and isinstance(b, UOp):
            a = b._ufix(a)
        if isinstance(a, UOp) and not isinstance(b, UOp):
            b = a._ufix(b)
        return self.alu(Op.WHERE, a, b)

    def logical_not(self) -> UOp:
        return self.alu(Op.CMPNE, True)

    def logical_and(self, x: Any) -> UOp:
        return self.alu(Op.AND, x)

    def logical_or(self, x: Any) -> UOp:
        return self.alu(Op.OR, x)

    def __bool__(self) -> bool:
        """Bool UOps decide by range analysis (and raise when undecidable); other nodes are truthy."""
        if self.dtype.kind != "b":
            return True
        if self.vmin == self.vmax:
            return bool(self.vmin)
        raise TolkError(f"cannot decide the truth of symbolic {self.render()} (it may be either)")

    # ---------------------------------------------------------------- evaluation and printing
    def eval(self, values: dict[str, int] | None = None) -> Any:
        """The value of this expression with variables (by name) set from `values`; bound variables
        use their bound value unless overridden. IR semantics (truncating division, dtype wrap)."""
        values = values or {}
        memo: dict[UOp, Any] = {}
        for u in self.toposort():
            if u.op is Op.CONST:
                memo[u] = u.arg
            elif u.op is Op.DEFINE_VAR:
                if u.arg[0] not in values:
                    raise TolkError(f"eval: no value for variable {u.arg[0]!r}")
                memo[u] = values[u.arg[0]]
            elif u.op is Op.BIND:
                memo[u] = values.get(u.src[0].arg[0], memo[u.src[1]])
            elif u.op in python_alu:
                memo[u] = exec_alu(u.op, u.dtype, tuple(memo[s] for s in u.src))
            elif u.op is Op.CAST:
                memo[u] = truncate(u.dtype.scalar(), memo[u.src[0]])
            elif u.op in (Op.RANGE, Op.SPECIAL) and (name := render_leaf(u)) in values:
                memo[u] = values[name]
            else:
                raise TolkError(f"eval: cannot evaluate {u.op.name}")
        return memo[self]

    def render(self) -> str:
        """The expression as C-like text, e.g. "((i*4)+j)" (IDIV prints as //, MOD as %)."""
        return render(self)

    def __str__(self) -> str:
        if self.op in _RENDERABLE or self.op in GroupOp.ALU:
            return self.render()
        return repr(self)

    def __repr__(self) -> str:
        return listing(self)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


_RENDERABLE = frozenset({Op.CONST, Op.DEFINE_VAR, Op.BIND, Op.RANGE, Op.SPECIAL, Op.CAST})


def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
    """A bounded symbolic integer: `Variable("n", 1, 1024)`; str() of it is its name."""
    return UOp.variable(name, min_val, max_val, dtype)


# ---------------------------------------------------------------- sint helpers
def prod(xs: Iterable[sint]) -> sint:
    r: sint = 1
    for x in xs:
        r = x * r if isinstance(x, UOp) else r * x
    return r


def ssimplify(x: sint) -> sint:
    """Simplify a symbolic int; a result that is a constant comes back as a Python int."""
    if not isinstance(x, UOp):
        return x
    x = x.simplify()
    return x.arg if x.op is Op.CONST else x


def resolve(x: Any, default: bool = True) -> bool:
    """The truth of a Python bool or a bool UOp, `default` when range analysis cannot decide."""
    if not isinstance(x, UOp):
        return bool(x)
    if x.vmin == x.vmax:
        return bool(x.vmin)
    return default


def _sfold(xs: tuple[sint, ...], py: Callable[..., int], method: str) -> sint:
    """The max or min (`py` on ints, the UOp method `method` once a symbolic size is involved) of sizes `xs`."""
    if all(not isinstance(x, UOp) for x in xs):
        return py(xs)
    r = xs[0]
    for x in xs[1:]:
        if isinstance(r, UOp):
            r = getattr(r, method)(x)
        elif isinstance(x, UOp):
            r = getattr(x._ufix(r), method)(x)
        else:
            r = py(r, x)
    return ssimplify(r)


def smax(*xs: sint) -> sint:
    """The largest of sizes `xs` (symbolic when one is)."""
    return _sfold(xs, max, "maximum")


def smin(*xs: sint) -> sint:
    """The smallest of sizes `xs` (symbolic when one is)."""
    return _sfold(xs, min, "minimum")


def sym_eq(a: sint, b: sint) -> bool:
    """True when two sints are provably equal (structurally after simplification)."""
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        return a == b
    if a is b:
        return True
    return ssimplify(a - b if isinstance(a, UOp) else -(b - a)) == 0


# ---------------------------------------------------------------- derived-fact rules
def _compute_shape(u: UOp) -> tuple | None:
    op = u.op
    if op in GroupOp.ALU or op in (Op.CAST, Op.CONTIGUOUS, Op.DETACH, Op.CONTIGUOUS_BACKWARD, Op.COPY, Op.ASSIGN,
                                   Op.AFTER, Op.BITCAST):
        srcs = u.src if op in GroupOp.ALU else u.src[:1]
        shapes = [s._shape for s in srcs if s._shape is not None]
        if not shapes or len(shapes) < len(srcs):  # no sources, or one without a shape
            return None
        first = shapes[0]
        for s in shapes[1:]:
            if s != first and (len(s) != len(first) or not all(sym_eq(x, y) for x, y in zip(s, first, strict=True))):
                raise ShapeError(f"{op.name} sources have different shapes {_shape_str(first)} and {_shape_str(s)}")
        if op is Op.BITCAST and first and u.dtype.itemsize != u.src[0].dtype.itemsize:
            return (*first[:-1], first[-1] * u.src[0].dtype.itemsize // u.dtype.itemsize)
        return first
    if op in GroupOp.Movement:
        from tolk_core.ir.shape import movement_shape
        ins = u.src[0]._shape
        return None if ins is None else movement_shape(op, ins, u.arg)
    if op in (Op.CONST, Op.DEFINE_VAR, Op.BIND):
        return ()
    if op in (Op.BUFFER, Op.IOTA):
        return (u.arg,)
    if op is Op.PARAM:
        return tuple(u.arg[1]) if isinstance(u.arg, tuple) else None
    if op is Op.CALL:  # a tensor-level call has its body's shape (a kernel CALL's SINK has none), a composite
        # its function's (ir/calls.py)
        out_shape = getattr(u.arg, "out_shape", None)
        return out_shape(u.src) if out_shape is not None else u.src[0]._shape
    if op is Op.MULTI:  # the whole value: shard 0's shape, its sharded axis as long as the shards together
        ins, axis = u.src[0]._shape, u.arg[1]
        if ins is None or axis is None:
            return ins
        return tuple(u.arg[2][-1][1] if i == axis else s for i, s in enumerate(ins))
    if op is Op.ALLREDUCE:
        return u.src[0]._shape
    if op is Op.REDUCE_AXIS:
        ins = u.src[0]._shape
        if ins is None:
            return None
        axes = u.arg[1]
        if any(not 0 <= a < len(ins) for a in axes):
            raise ShapeError(f"REDUCE_AXIS axes {axes} out of range for shape {ins}")
        return tuple(1 if i in axes else s for i, s in enumerate(ins))
    return None


def _shape_str(shape: tuple) -> str:
    return "(" + ", ".join(str(x) for x in shape) + ("," if len(shape) == 1 else "") + ")"


def _compute_device(u: UOp) -> Any:
    if u.op is Op.DEVICE:
        return u.arg
    if u.op is Op.MULTI:  # arg (devices, axis, bounds): the devices, a tuple
        return u.arg[0]
    if u.op is Op.ALLREDUCE:  # arg (op, devices, i): the fold on device i
        return u.arg[1][u.arg[2]]
    for s in u.src:
        if s.op is Op.DEVICE:
            return s.arg
    for s in u.src:
        if s._device is not None:
            return s._device
    return None


def _set_range(u: UOp, lo: Any, hi: Any) -> None:
    object.__setattr__(u, "_vmax", hi)
    return lo


def _fill_range(u: UOp) -> Any:
    """Store u._vmax and return u._vmin (called by _fill with sources' ranges available)."""
    lo, hi = _range(u)
    if u.dtype.kind == "b":
        lo, hi = bool(lo), bool(hi)
    return _set_range(u, lo, hi)


def _dt_range(dt: DType) -> tuple[Any, Any]:
    if isinstance(dt, PtrDType) or dt.kind == "v":
        return (-math.inf, math.inf)
    return dtypes.min(dt), dtypes.max(dt)


# ---- bounds: each node's (vmin, vmax) from its sources' bounds (interval arithmetic; integer division
# truncates). A leaf or CAST has a rule of its own (`_NODE_BOUNDS`); a scalar ALU op one of `_ALU_BOUNDS`, which
# returns None where it cannot bound the result (then the dtype's bounds hold).
Bounds = tuple[Any, Any]


def _const_bounds(u: UOp, dlo: Any, dhi: Any) -> Bounds:
    # a nan bounds nothing: as an interval end it would make every comparison decide False
    return (dlo, dhi) if isinstance(u.arg, float) and math.isnan(u.arg) else (u.arg, u.arg)


def _cast_bounds(u: UOp, dlo: Any, dhi: Any) -> Bounds:
    s, kind = u.src[0], u.dtype.kind
    if kind in ("i", "u", "b") and s.dtype.kind in ("i", "u", "b") and dlo <= s._vmin and s._vmax <= dhi:
        return s._vmin, s._vmax
    if kind == "f" and s.dtype.kind != "f":
        return s._vmin, s._vmax
    return dlo, dhi


_NODE_BOUNDS: dict[Op, Callable[[UOp, Any, Any], Bounds]] = {
    Op.CONST: _const_bounds,
    Op.DEFINE_VAR: lambda u, dlo, dhi: (u.arg[1], u.arg[2]),
    Op.BIND: lambda u, dlo, dhi: (u.src[0]._vmin, u.src[0]._vmax),
    Op.RANGE: lambda u, dlo, dhi: (0, max(0, u.src[0]._vmax - 1)),
    Op.SPECIAL: lambda u, dlo, dhi: (0, max(0, u.src[0]._vmax - 1)),
    Op.CAST: _cast_bounds,
    # a vector's bounds hold for every lane: the hull of its lanes' (a lane index vector of codegen.upcast)
    Op.VECTORIZE: lambda u, dlo, dhi: (min(s._vmin for s in u.src), max(s._vmax for s in u.src)),
}


def _mul_bounds(a: Bounds, b: Bounds, u: UOp, isint: bool) -> Bounds | None:
    if not (isint or all(math.isfinite(v) for v in (*a, *b))):
        return None
    c = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(c), max(c)


def _idiv_bounds(a: Bounds, b: Bounds, u: UOp, isint: bool) -> Bounds | None:
    if not isint or not (b[0] > 0 or b[1] < 0):
        return None
    c = [trunc_div(x, y) for x in a for y in b]
    return min(c), max(c)


def _mod_bounds(a: Bounds, b: Bounds, u: UOp, isint: bool) -> Bounds | None:
    if not isint:
        return None
    (a_lo, a_hi), (b_lo, b_hi) = a, b
    m = max(abs(b_lo), abs(b_hi)) - 1
    if a_lo >= 0:
        if b_lo == b_hi and b_lo != 0 and a_lo // abs(b_lo) == a_hi // abs(b_lo):
            return a_lo % abs(b_lo), a_hi % abs(b_lo)
        return 0, min(a_hi, m)
    if a_hi <= 0:
        return max(a_lo, -m), 0
    return max(a_lo, -m), min(a_hi, m)


def _equality_bounds(equal: int) -> Callable[[Bounds, Bounds, UOp, bool], Bounds]:
    """CMPEQ (`equal` 1) or CMPNE (`equal` 0): decided when the intervals are apart or one and the same point."""
    def bounds(a: Bounds, b: Bounds, u: UOp, isint: bool) -> Bounds:
        if a[1] < b[0] or b[1] < a[0]:
            return 1 - equal, 1 - equal
        if a[0] == a[1] == b[0] == b[1]:
            return equal, equal
        return 0, 1
    return bounds


def _where_bounds(a: Bounds, b: Bounds, u: UOp, isint: bool) -> Bounds:
    c_lo, c_hi = u.src[2]._vmin, u.src[2]._vmax
    if a[0] == a[1]:
        return b if a[0] else (c_lo, c_hi)
    return min(b[0], c_lo), max(b[1], c_hi)


def _logic_bounds(op: Op) -> Callable[[Bounds, Bounds, UOp, bool], Bounds | None]:
    """AND, OR, XOR: of bools, decided by constant operands (or one that forces AND/OR); AND of integers with
    a non-negative operand, within [0, that operand's max]."""
    def bounds(a: Bounds, b: Bounds, u: UOp, isint: bool) -> Bounds | None:
        if u.dtype.kind == "b":
            if a[0] == a[1] and b[0] == b[1]:
                v = python_alu[op](bool(a[0]), bool(b[0]))
                return v, v
            if op is Op.AND and (a[1] == 0 or b[1] == 0):
                return 0, 0
            if op is Op.OR and (a[0] == 1 or b[0] == 1):
                return 1, 1
            return 0, 1
        if op is Op.AND and isint and (a[0] >= 0 or b[0] >= 0):
            return 0, min(x[1] for x in (a, b) if x[0] >= 0)
        return None
    return bounds


def _shift_bounds(op: Op) -> Callable[[Bounds, Bounds, UOp, bool], Bounds | None]:
    """SHL, SHR of integers by one non-negative amount."""
    def bounds(a: Bounds, b: Bounds, u: UOp, isint: bool) -> Bounds | None:
        if not (isint and b[0] == b[1] and b[0] >= 0):
            return None
        return (a[0] << b[0], a[1] << b[0]) if op is Op.SHL else (a[0] >> b[0], a[1] >> b[0])
    return bounds


_ALU_BOUNDS: dict[Op, Callable[[Bounds, Bounds, UOp, bool], Bounds | None]] = {
    Op.ADD: lambda a, b, u, isint: (a[0] + b[0], a[1] + b[1]),
    Op.SUB: lambda a, b, u, isint: (a[0] - b[1], a[1] - b[0]),
    Op.NEG: lambda a, b, u, isint: (-a[1], -a[0]) if u.dtype.kind != "b" else None,
    Op.MUL: _mul_bounds,
    Op.MAX: lambda a, b, u, isint: (max(a[0], b[0]), max(a[1], b[1])),
    Op.IDIV: _idiv_bounds,
    Op.MOD: _mod_bounds,
    Op.CMPLT: lambda a, b, u, isint: (int(a[1] < b[0]), int(a[0] < b[1])),
    Op.CMPNE: _equality_bounds(0),
    Op.CMPEQ: _equality_bounds(1),
    Op.WHERE: _where_bounds,
    **{op: _logic_bounds(op) for op in (Op.AND, Op.OR, Op.XOR)},
    **{op: _shift_bounds(op) for op in (Op.SHL, Op.SHR)},
}


def _range(u: UOp) -> Bounds:
    """Bounds of u from the bounds of its sources; the dtype's bounds where no rule bounds it tighter."""
    dt = u.dtype
    dlo, dhi = _dt_range(dt)
    if (node := _NODE_BOUNDS.get(u.op)) is not None:
        return node(u, dlo, dhi)
    # index vectors (lane indices) are bounded lane-wise: every rule holds for each lane of their hulls
    if u.op not in GroupOp.ALU or (dt.count != 1 and dt.scalar() != dtypes.index) or \
            (alu := _ALU_BOUNDS.get(u.op)) is None:
        return dlo, dhi
    a = (u.src[0]._vmin, u.src[0]._vmax)
    # a unary op (NEG) has no second operand: its rule reads `a` only
    b: Bounds = (u.src[1]._vmin, u.src[1]._vmax) if len(u.src) >= 2 else (None, None)
    isint = dt.kind in ("i", "u")
    if (r := alu(a, b, u, isint)) is None:
        return dlo, dhi
    lo, hi = r
    # a result outside the dtype would wrap: fall back to the dtype's bounds (index is treated as unbounded)
    if isint and dt != dtypes.index and (lo < dlo or hi > dhi):
        return dlo, dhi
    return lo, hi


# ---------------------------------------------------------------- printing
_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.FDIV: "/", Op.IDIV: "//", Op.MOD: "%", Op.CMPLT: "<",
          Op.CMPNE: "!=", Op.CMPEQ: "==", Op.AND: "&", Op.OR: "|", Op.XOR: "^", Op.SHL: "<<", Op.SHR: ">>"}


def render_leaf(u: UOp) -> str:
    if u.op is Op.DEFINE_VAR:
        return u.arg[0]
    if u.op is Op.BIND:
        return u.src[0].arg[0]
    if u.op is Op.RANGE:
        # arg is an axis number or (axis number, AxisType): the number names the loop variable
        return f"ridx{u.arg if not isinstance(u.arg, tuple) else '_'.join(str(a) for a in u.arg if type(a) is int)}"
    if u.op is Op.SPECIAL:
        return str(u.arg)
    if u.op is Op.CONST:
        v = u.arg
        if isinstance(v, bool):
            return "true" if v else "false"
        return repr(v) if isinstance(v, float) else str(v)
    return f"<{u.op.name}>"


def _is_neg1(u: UOp) -> bool:
    return u.op is Op.CONST and u.arg == -1


def _negated(u: UOp, out: dict[UOp, str]) -> str | None:
    """Text of -u when u is visibly a negation (NEG x, x*-1 or a constant), else None."""
    if u.op is Op.NEG:
        return out[u.src[0]]
    if u.op is Op.MUL and _is_neg1(u.src[1]):
        return out[u.src[0]]
    if u.op is Op.CONST and type(u.arg) is int:
        return str(-u.arg)
    return None


def _min_text(m: UOp, out: dict[UOp, str]) -> str | None:
    """min(a,b) for the negation of m = MAX(-a, -b)."""
    if m.op is Op.MAX and (a := _negated(m.src[0], out)) is not None and (b := _negated(m.src[1], out)) is not None:
        return f"min({a},{b})"
    return None


def render(root: UOp) -> str:
    """C-like text of an index/ALU expression, iteratively (deep chains are fine)."""
    out: dict[UOp, str] = {}
    for u in root.toposort():
        op, s = u.op, u.src
        if op in _INFIX:
            a, b = out[s[0]], out[s[1]]
            if op is Op.MUL and _is_neg1(s[1]) and (m := _min_text(s[0], out)) is not None:
                r = m
            elif op is Op.ADD and s[1].op is Op.MUL and _is_neg1(s[1].src[1]):
                r = f"({a}-{out[s[1].src[0]]})"
            elif op in (Op.ADD, Op.SUB) and s[1].op is Op.CONST and type(s[1].arg) is int and s[1].arg < 0:
                r = f"({a}{'-' if op is Op.ADD else '+'}{-s[1].arg})"
            elif op is Op.CMPNE and s[1].op is Op.CONST and s[1].arg is True:
                r = f"(!{a})"
            else:
                r = f"({a}{_INFIX[op]}{b})"
        elif op is Op.NEG:
            r = m if (m := _min_text(s[0], out)) is not None else f"(-{out[s[0]]})"
        elif op is Op.MAX:
            r = f"max({out[s[0]]},{out[s[1]]})"
        elif op is Op.WHERE:
            r = f"({out[s[0]]}?{out[s[1]]}:{out[s[2]]})"
        elif op is Op.CAST:
            r = f"(({u.dtype.name}){out[s[0]]})"
        elif op in GroupOp.ALU:
            r = f"{op.name.lower()}({','.join(out[x] for x in s)})"
        else:
            r = render_leaf(u)
        out[u] = r
    return out[root]


def listing(root: UOp) -> str:
    """One node per line, sources first; every node is named once (%n) and referenced by name."""
    names: dict[UOp, str] = {}
    lines = []
    for u in root.toposort():
        names[u] = n = f"%{len(names)}"
        src = ", ".join(names[s] for s in u.src)
        arg = "" if u.arg is None else f" {u.arg!r}"
        lines.append(f"{n} = {u.op.name} {u.dtype!r}{arg}" + (f" ({src})" if src else ""))
    if len(lines) > 1:
        return "\n".join(lines)
    return f"UOp({root.op.name} {root.dtype!r}{'' if root.arg is None else ' ' + repr(root.arg)})"
