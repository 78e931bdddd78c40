"""Pattern matching and graph rewriting.

`UPat` describes a node shape; `PatternMatcher` holds named rules (pattern, callable) and counts how often
each fired; `graph_rewrite` applies a matcher to a whole graph to a fixed point, memoised per node and without
recursion.
"""
from __future__ import annotations

import inspect
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tolk_core import config
from tolk_core.errors import TolkError
from tolk_core.ir.dtype import DType
from tolk_core.ir.ops import Op
from tolk_core.ir.uop import UOp

_ANY_ARG = object()


class UPat:
    """A pattern over UOps.

    op: an Op or tuple of Ops (None: any). dtype: a DType or tuple (a vector matches its scalar too).
    src: None (any sources), a tuple (exact order), a list (any permutation), or a single UPat (every
    source matches it). arg: compared with == when given (None means "any arg"). name: the capture
    name passed to the rule; a name used twice must bind the same node. allow_any_len: a tuple src
    matches a prefix of the sources.
    """
    __slots__ = ("op", "dtype", "arg", "name", "src", "src_kind", "allow_any_len", "alts")

    def __init__(self, op: Op | Sequence[Op] | frozenset | None = None, dtype: DType | Sequence[DType] | None = None,
                 src: UPat | tuple[UPat, ...] | list[UPat] | None = None, arg: Any = None, name: str | None = None,
                 allow_any_len: bool = False):
        self.op = None if op is None else (frozenset((op,)) if isinstance(op, Op) else frozenset(op))
        self.dtype = None if dtype is None else ((dtype,) if isinstance(dtype, DType) else tuple(dtype))
        self.arg = _ANY_ARG if arg is None else arg
        self.name, self.allow_any_len = name, allow_any_len
        self.alts: tuple[UPat, ...] | None = None
        self.src_kind: str
        self.src: tuple[UPat, ...]
        if src is None:
            self.src_kind, self.src = "any", ()
        elif isinstance(src, UPat):
            self.src_kind, self.src = "each", (src,)
        elif isinstance(src, list):
            self.src_kind, self.src = "perm", tuple(src)
        else:
            self.src_kind, self.src = "exact", tuple(src)

    @staticmethod
    def var(name: str | None = None, dtype: DType | Sequence[DType] | None = None) -> UPat:
        """Any node (optionally of `dtype`), captured as `name`."""
        return UPat(None, dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Sequence[DType] | None = None) -> UPat:
        """A CONST (optionally of `dtype`), captured as `name`."""
        return UPat(Op.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Sequence[DType] | None, value: Any) -> UPat:
        """A CONST whose value == `value`."""
        return UPat(Op.CONST, dtype, arg=value)

    @staticmethod
    def any(*pats: UPat) -> UPat:
        """Matches when any of `pats` matches (captures from the one that matched)."""
        p = UPat()
        p.alts = pats
        return p

    def __repr__(self) -> str:
        if self.alts is not None:
            return f"UPat.any({', '.join(map(repr, self.alts))})"
        ops = None if self.op is None else "|".join(sorted(o.name for o in self.op))
        parts = [f"op={ops}"] if ops else []
        if self.name:
            parts.append(f"name={self.name!r}")
        if self.arg is not _ANY_ARG:
            parts.append(f"arg={self.arg!r}")
        if self.src_kind != "any":
            s = ", ".join(map(repr, self.src))
            parts.append({"exact": f"src=({s})", "perm": f"src=[{s}]", "each": f"src={s}"}[self.src_kind])
        return f"UPat({', '.join(parts)})"

    def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        """Every way this pattern matches `u` extending the captures in `store` (not mutated)."""
        if self.alts is not None:
            return [r for p in self.alts for r in p.match(u, store)]
        if self.op is not None and u.op not in self.op:
            return []
        # args compare by value and type, except that int and float values compare numerically
        if self.arg is not _ANY_ARG and (self.arg != u.arg or type(self.arg) is not type(u.arg)) and \
                not (type(self.arg) in (int, float) and type(u.arg) in (int, float) and self.arg == u.arg):
            return []
        if self.dtype is not None and u.dtype not in self.dtype and u.dtype.scalar() not in self.dtype:
            return []
        if self.name is not None:
            prev = store.get(self.name)
            if prev is not None and prev is not u:
                return []
            store = {**store, self.name: u}
        kind = self.src_kind
        if kind == "any":
            return [store]
        n = len(u.src)
        if kind == "exact":  # the common case: one source order, usually a single store
            if n != len(self.src) and not (self.allow_any_len and n >= len(self.src)):
                return []
            stores = [store]
            for p, s in zip(self.src, u.src, strict=False):  # a prefix when allow_any_len
                stores = p.match(s, stores[0]) if len(stores) == 1 else [r for st in stores for r in p.match(s, st)]
                if not stores:
                    return stores
            return stores
        if kind == "each":
            alternatives: Any = ((self.src[0],) * n,)
        else:
            if n != len(self.src):
                return []
            alternatives = itertools.permutations(self.src)
        res: list[dict[str, UOp]] = []
        for alt in alternatives:
            stores = [store]
            for p, s in zip(alt, u.src, strict=True):
                stores = [r for st in stores for r in p.match(s, st)]
                if not stores:
                    break
            res.extend(stores)
        return res

    # operators build ALU patterns (commutative ones match either source order)
    def _bin(self, op: Op, x: Any, commutative: bool, reverse: bool = False) -> UPat:
        other = x if isinstance(x, UPat) else UPat.const(None, x)
        srcs = [other, self] if reverse else [self, other]
        return UPat(op, src=srcs if commutative else tuple(srcs))

    def __add__(self, x: Any) -> UPat:
        return self._bin(Op.ADD, x, True)

    def __radd__(self, x: Any) -> UPat:
        return self._bin(Op.ADD, x, True, True)

    def __mul__(self, x: Any) -> UPat:
        return self._bin(Op.MUL, x, True)

    def __rmul__(self, x: Any) -> UPat:
        return self._bin(Op.MUL, x, True, True)

    def __sub__(self, x: Any) -> UPat:
        return self._bin(Op.SUB, x, False)

    def __floordiv__(self, x: Any) -> UPat:
        return self._bin(Op.IDIV, x, False)

    def __mod__(self, x: Any) -> UPat:
        return self._bin(Op.MOD, x, False)

    def __lt__(self, x: Any) -> UPat:
        return self._bin(Op.CMPLT, x, False)

    def ne(self, x: Any) -> UPat:
        return self._bin(Op.CMPNE, x, True)

    def maximum(self, x: Any) -> UPat:
        return self._bin(Op.MAX, x, True)

    def where(self, a: Any, b: Any) -> UPat:
        return UPat(Op.WHERE, src=(self, a, b))


@dataclass(frozen=True)
class Rule:
    pat: UPat
    fn: Callable[..., UOp | None]
    name: str
    wants_ctx: bool


class PatternMatcher:
    """An ordered list of rules `(UPat, callable[, name])`. The callable receives the named captures as
    keyword arguments (and `ctx` when its signature has that parameter) and returns a replacement UOp or
    None for "no change". The first rule that returns a node different from the input wins.

    A rule's name is the third tuple entry, else the callable's `__name__` (a lambda's: its file and line).
    `fires` counts each win by rule name: a Counter of the matcher's own, or one that several matchers share
    when they are given the same (a pass family's tally, e.g. prepare's `rule_fires`). A matcher made with `+`
    shares its operands' Counter when they share one, and has its own otherwise."""

    def __init__(self, rules: Sequence[tuple | Rule], fires: Counter[str] | None = None):
        self.fires: Counter[str] = Counter() if fires is None else fires
        self.rules: list[Rule] = []
        for i, r in enumerate(rules):
            if isinstance(r, Rule):
                self.rules.append(r)
                continue
            pat, fn, *rest = r
            name = rest[0] if rest else getattr(fn, "__name__", "<rule>")
            if name == "<lambda>":
                code = fn.__code__
                name = f"rule{i}@{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
            self.rules.append(Rule(pat, fn, name, "ctx" in inspect.signature(fn).parameters))
        # rules indexed by the op they can match; rules on any op are appended to every list (order kept)
        self._by_op: dict[Op, list[Rule]] = {}
        rule_ops = [(r, self._ops(r.pat)) for r in self.rules]
        for op in Op:
            self._by_op[op] = [r for r, ops in rule_ops if ops is None or op in ops]

    @staticmethod
    def _ops(p: UPat) -> frozenset | None:
        if p.alts is not None:
            union: frozenset = frozenset()
            for a in p.alts:
                if (ops := PatternMatcher._ops(a)) is None:
                    return None  # one alternative matches any op, so the whole pattern does
                union |= ops
            return union
        return p.op

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules, self.fires if self.fires is other.fires else None)

    def rewrite(self, u: UOp, ctx: Any = None, fired: list[str] | None = None) -> UOp | None:
        """The first rule's replacement for `u`, or None when no rule changes it. Counts the firing rule in
        `fires`, and appends its name to `fired` when given."""
        for r in self._by_op[u.op]:
            for store in r.pat.match(u, {}):
                ret = r.fn(ctx=ctx, **store) if r.wants_ctx else r.fn(**store)
                if ret is not None and ret is not u:
                    self.fires[r.name] += 1
                    if fired is not None:
                        fired.append(r.name)
                    return ret
        return None


class RewriteStats:
    """Counters of the last and all graph_rewrite calls (tests read `visited`)."""
    __slots__ = ("visited", "rewrites", "calls")

    def __init__(self) -> None:
        self.visited = self.rewrites = self.calls = 0

    def reset(self) -> None:
        self.visited = self.rewrites = self.calls = 0


rewrite_stats = RewriteStats()
# Called as observer(pass name, names of the rules that fired, in order) after each graph_rewrite while any is
# registered; empty otherwise, and then no rule names are collected. Filled only while VIZ records
# (engine/viz.py), never at import.
rewrite_observers: list[Callable[[str, list[str]], None]] = []


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False,
                  name: str | None = None, on_rebuild: Callable[[UOp, UOp], None] | None = None) -> UOp:
    """Rewrite the graph under `sink` with `pm` to a fixed point and return the new root.

    bottom_up=False (default): a node's sources are rewritten first, then the node (rebuilt on its new
    sources) is matched; a replacement is itself fully rewritten. bottom_up=True: each node is matched
    and replaced to a fixed point before its sources are visited (tinygrad's naming).
    Each distinct node is processed once (memoised), and the walk uses an explicit stack.
    With DEBUG>=5 every rule that fires is printed. `on_rebuild(old, new)` is called for each node rebuilt on
    rewritten sources (the same op, dtype and argument), so side tables keyed by nodes can follow them.
    """
    debug = config.get("DEBUG") >= 5
    fired: list[str] | None = [] if debug or rewrite_observers else None
    replace: dict[UOp, UOp] = {}
    visited = rewrites = 0
    pm_rewrite = pm.rewrite

    def rw(u: UOp) -> UOp | None:
        # each node reaches here at most once per call (replace memoises), so no result cache is needed
        nonlocal rewrites
        r = pm_rewrite(u, ctx, fired)
        if r is not None:
            rewrites += 1
            if debug:
                assert fired is not None
                print(f"[{name or 'rewrite'}] {fired[-1]}: {u.op.name} -> {r.op.name}")
        return r

    # stack entries: (node, stage, working node). stage 0: first visit; 1: sources done; 2: link result.
    # A node started but not finished can only be met again through a cycle that the rules created.
    started: set[UOp] = set()
    stack: list[tuple[UOp, int, UOp]] = [(sink, 0, sink)]
    pop, push, get_done = stack.pop, stack.append, replace.__getitem__
    while stack:
        n, stage, new_n = pop()
        if n in replace:
            continue
        if stage == 0:
            if n in started:
                raise TolkError(f"graph_rewrite {name or ''}: rules cycle: {n.op.name} is rewritten into a graph "
                                f"containing itself (last rule: {fired[-1] if fired else '?'})")
            started.add(n)
            visited += 1
            if bottom_up:
                seen = {n}
                while (nxt := rw(new_n)) is not None:
                    if nxt in seen:
                        raise TolkError(f"graph_rewrite {name or ''}: rules cycle on {nxt.op.name}")
                    seen.add(nxt)
                    new_n = nxt
            push((n, 1, new_n))
            for s in reversed(new_n.src):
                if s not in replace:
                    push((s, 0, s))
        elif stage == 1:
            new_src = tuple(map(get_done, new_n.src))
            if new_src == new_n.src:
                if bottom_up or (nxt := rw(new_n)) is None:
                    replace[n] = new_n
                    continue
            else:
                nxt = UOp(new_n.op, new_n.dtype, new_src, new_n.arg)
                if on_rebuild is not None:
                    on_rebuild(new_n, nxt)
            push((n, 2, nxt))
            push((nxt, 0, nxt))
        else:
            replace[n] = replace[new_n]
    rewrite_stats.visited += visited
    rewrite_stats.rewrites += rewrites
    rewrite_stats.calls += 1
    if fired is not None:
        for observe in rewrite_observers:
            observe(name or "rewrite", fired)
    return replace[sink]
