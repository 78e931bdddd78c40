"""Movement: ops that rearrange a tensor's elements without computing new values: `reshape`, `permute`,
`expand`, `transpose`, `T`, `flip`, `pad`, `shrink`, `squeeze`, `unsqueeze`, `flatten`, `cat`, `stack`,
`repeat` / `tile` / `repeat_interleave`, `split`, `chunk`.

An op belongs here when every output element is an input element (or a constant pad value) chosen by index
arithmetic alone. Each builds the IR's movement UOps (RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP), validated by
`tolk_core.ir.shape.movement_shape`, which raises ShapeError naming the shapes. `cat` pads every input to the
full size and adds them (one fused kernel); `squeeze` of an axis whose size is not 1 leaves it, as torch does.

Also the shape arithmetic the other op modules share: `broadcast_shape` and `normalize_axis`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tolk_core.errors import ArgumentTypeError, ShapeError
from tolk_core.frontend import padding as padding_modes
from tolk_core.frontend.arguments import as_axis, as_size, check_devices
from tolk_core.ir.dtype import dtypes, least_upper_dtype
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.shape import movement_shape
from tolk_core.ir.uop import UOp, prod, sint, sym_eq

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Scalar, Tensor


def normalize_axis(axis: int, ndim: int) -> int:
    """`axis` (negative counts from the end) as an index in [0, ndim); a 0-d tensor has one axis, 0 or -1.
    Raises ShapeError when it is out of range, ArgumentTypeError when it is not an integer."""
    axis = as_axis(axis)
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShapeError(f"axis {axis} is out of range for a tensor of {ndim} dimension(s)")
    return axis % max(ndim, 1)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape `shapes` broadcast to, numpy's way: aligned on the right, a size-1 axis stretching to the
    other size. Raises ShapeError naming every shape when two sizes other than 1 differ."""
    if len(shapes) == 2 and (two := _broadcast_two(*shapes)) is not None:
        return two
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for sizes in zip(*padded, strict=True):
        non_one = {s for s in sizes if s != 1}
        if len(non_one) > 1:
            raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(non_one.pop() if non_one else 1)
    return tuple(out)


def _broadcast_two(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """`broadcast_shape` of two shapes (every elementwise op with a broadcast operand), a loop without the
    general path's sets; None when they do not broadcast (the general path raises, naming them)."""
    if len(a) != len(b):
        if len(a) < len(b):
            a = (1,) * (len(b) - len(a)) + tuple(a)
        else:
            b = (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b, strict=True):
        if x is y or y == 1:  # a symbolic size (a UOp) equals only itself
            out.append(x)
        elif x == 1:
            out.append(y)
        elif type(x) is int and x == y:
            out.append(x)
        else:
            return None
    return tuple(out)


def broadcast_uop(u: UOp, own: tuple[sint, ...], shape: tuple[sint, ...]) -> UOp:
    """Node `u`, of shape `own`, broadcast to `shape`, which `broadcast_shape` gave (so valid: no checks
    again): a RESHAPE adding leading axes of one where `own` has fewer, then an EXPAND where a size differs. The
    internal paths build on nodes, not Tensors, so that an intermediate costs no Tensor."""
    if len(own) < len(shape):
        own = (1,) * (len(shape) - len(own)) + own
        u = UOp.shaped(Op.RESHAPE, u.dtype, (u,), own, own)
    return u if own == shape else UOp.shaped(Op.EXPAND, u.dtype, (u,), shape, shape)


def _is_neg1(s: Any) -> bool:
    return isinstance(s, int) and s == -1


def _sint(x: Any) -> sint:
    """A size or offset: a Python int, or a symbolic expression of bound Variables (a float is an
    ArgumentTypeError, not truncated)."""
    return as_size(x, "a pad or shrink bound")


def _pairs(what: str, arg: Any, shape: tuple, allow_none: bool = False) -> tuple:
    """`arg` as a tuple holding one (start, end) pair per axis of `shape` (or None where `allow_none`), else
    ShapeError naming `what`, the shape and the argument."""
    arg = tuple(arg) if isinstance(arg, (tuple, list)) else arg
    if (not isinstance(arg, tuple) or len(arg) != len(shape) or
            any(not (p is None and allow_none) and not (isinstance(p, (tuple, list)) and len(p) == 2) for p in arg)):
        raise ShapeError(f"{what} needs one (start, end) pair per axis of {shape} ({len(shape)} in all), got {arg!r}")
    return arg


def _plain_sizes(shape: Any) -> bool:
    """Whether `shape` is a tuple of plain non-negative ints (no -1, no symbolic size, no bool)."""
    return type(shape) is tuple and all(type(s) is int and s >= 0 for s in shape)


def _plain_window(arg: tuple, shape: tuple) -> tuple[tuple[int, int], ...] | None:
    """`arg` (one (begin, end) pair or None per axis of `shape`) as pairs, when every size and bound is a plain
    int in range; else None (the general path checks and explains). A loop, not generators: shrink's fast path."""
    pairs = []
    for a, s in zip(arg, shape, strict=True):
        if type(s) is not int:
            return None
        if a is None:
            pairs.append((0, s))
            continue
        if type(a) is not tuple or len(a) != 2:
            return None
        b, e = a
        if type(b) is not int or type(e) is not int or not 0 <= b <= e <= s:
            return None
        pairs.append(a)
    return tuple(pairs)


def _plain_pads(padding: Any, shape: tuple[sint, ...]) -> bool:
    """Whether `padding` is one (before, after) tuple of non-negative plain ints per axis of a `shape` of plain
    ints."""
    return type(padding) is tuple and len(padding) == len(shape) and _plain_sizes(shape) and \
        all(type(p) is tuple and len(p) == 2 and _plain_sizes(p) for p in padding)


# (input shape, recipe) -> the movement ops a recipe applied to an input of that shape, as (op, arg, shape)
# from the input up: see `MovementMixin._chained`
_chains: dict[tuple, tuple[tuple[Op, Any, tuple[sint, ...]], ...]] = {}
_CHAINS_MAX = 4096


def _movement_chain(out: UOp, base: UOp) -> tuple[tuple[Op, Any, tuple[sint, ...]], ...] | None:
    """The movement ops from `base` up to `out`, as (op, arg, shape), when `out` is `base` under movement ops
    only (each node's one source the next one down); else None."""
    steps = []
    while out is not base:
        if out.op not in GroupOp.Movement or (shape := out.shape) is None:
            return None
        steps.append((out.op, out.arg, shape))
        out = out.src[0]
    return tuple(reversed(steps))


class MovementMixin:
    """Movement ops; mixed into `Tensor`."""

    __slots__ = ()

    def _chained(self: Tensor, recipe: tuple, build: Callable[[Tensor], Tensor]) -> Tensor:
        """`build(self)`, where `build` applies movement ops only, chosen by `self.shape` and `recipe` alone
        (sliding windows: a dozen reshapes, shrinks and permutes, each checked as a Tensor op). The ops it
        applied to an input of this shape are remembered, and later inputs of the same shape get the same
        nodes built directly: the graph is the same either way (tests/frontend/test_windows_chain.py)."""
        key = (self.shape, recipe)
        if (steps := _chains.get(key)) is None:
            out = build(self)
            if (found := _movement_chain(out.uop, self.uop)) is not None:
                if len(_chains) >= _CHAINS_MAX:
                    _chains.clear()
                _chains[key] = found
            return out
        u, dt = self.uop, self.uop.dtype
        for op, arg, shape in steps:
            u = UOp.shaped(op, dt, (u,), arg, shape)
        return self._wrap(u)

    def _mop(self: Tensor, op: Op, arg: Any) -> Tensor:
        shape = movement_shape(op, self.shape, arg)  # validates, raising ShapeError
        # the shape is known now: the node need not work it out again (UOp.shape)
        return self._wrap(UOp.shaped(op, self.uop.dtype, (self.uop,), arg, shape))

    def reshape(self: Tensor, *shape: Any) -> Tensor:
        own = self.shape
        new = shape[0] if len(shape) == 1 and type(shape[0]) is tuple else shape
        if _plain_sizes(new) and _plain_sizes(own):  # the common case, checked in a few comparisons
            if new == own:
                return self
            if math.prod(new) == math.prod(own):
                return self._wrap(UOp.shaped(Op.RESHAPE, self.uop.dtype, (self.uop,), new, new))
        shape = self._shape_arg(shape)
        if sum(map(_is_neg1, shape)) > 1:
            raise ShapeError(f"reshape to {shape}: only one dimension can be -1")
        if any(map(_is_neg1, shape)):
            known = prod(s for s in shape if not _is_neg1(s))
            numel = self.numel()
            if isinstance(known, UOp) or isinstance(numel, UOp):
                raise ShapeError(f"reshape of symbolic shape {self.shape} to {shape}: -1 needs concrete sizes")
            if known == 0 or numel % known:
                raise ShapeError(f"cannot reshape tensor of shape {self.shape} to {shape}")
            shape = tuple(numel // known if _is_neg1(s) else s for s in shape)
        if any(s < 0 for s in shape) or not sym_eq(prod(shape), self.numel()):
            raise ShapeError(f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) to {shape}")
        return self if shape == self.shape else self._mop(Op.RESHAPE, shape)

    def permute(self: Tensor, *order: Any) -> Tensor:
        own = self.shape
        plain = order[0] if len(order) == 1 and type(order[0]) is tuple else order
        if len(plain) == len(own) and all(type(a) is int for a in plain) and \
                sorted(plain) == list(range(len(own))):  # the common case: a permutation of the axes, plain ints
            if plain == tuple(range(len(own))):
                return self
            shape = tuple(own[a] for a in plain)
            return self._wrap(UOp.shaped(Op.PERMUTE, self.uop.dtype, (self.uop,), plain, shape))
        order = tuple(normalize_axis(a, self.ndim) for a in self._shape_arg(order, "permute order"))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute order {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self if order == tuple(range(self.ndim)) else self._mop(Op.PERMUTE, order)

    def expand(self: Tensor, *shape: Any) -> Tensor:
        shape = self._shape_arg(shape)
        if len(shape) < self.ndim:
            raise ShapeError(f"cannot expand shape {self.shape} to {shape}: fewer dimensions")
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape)
        new = tuple(o if s == -1 else s for s, o in zip(shape, x.shape, strict=True))
        for o, s in zip(x.shape, new, strict=True):
            if o != s and o != 1:
                raise ShapeError(f"cannot expand shape {self.shape} to {shape}")
        return x if new == x.shape else x._mop(Op.EXPAND, new)

    def _broadcast_to(self: Tensor, shape: tuple[int, ...]) -> Tensor:
        """This tensor broadcast to `shape`: leading axes of one added, then size-1 axes expanded. A shape this
        tensor does not broadcast to is a ShapeError naming both (callers catch it to name their own)."""
        own = self.shape
        if own == shape:
            return self
        ones = (1,) * (len(shape) - len(own)) + own if len(own) < len(shape) else own
        if ones != shape:
            movement_shape(Op.EXPAND, ones, shape)  # validates, raising ShapeError
        return self._wrap(broadcast_uop(self.uop, own, shape))

    def transpose(self: Tensor, d0: int = -2, d1: int = -1) -> Tensor:
        order = list(range(self.ndim))
        a, b = normalize_axis(d0, self.ndim), normalize_axis(d1, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self: Tensor) -> Tensor:
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    def flip(self: Tensor, axis: int | Sequence[int]) -> Tensor:
        axes = {normalize_axis(a, self.ndim) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))}
        return self._mop(Op.FLIP, tuple(i in axes for i in range(self.ndim))) if axes else self

    def pad(self: Tensor, padding: Sequence[Any], value: Scalar = 0, mode: str = "constant") -> Tensor:
        """Pad each axis by (before, after); `padding` has one pair per axis (torch's flat form also accepted:
        pairs from the last axis back). Negative pads crop. `mode`: "constant" (with `value`), or "reflect",
        "replicate", "circular", which copy the tensor's own elements (frontend/padding.py has their rules)."""
        if mode == "constant" and type(value) is int and value == 0 and _plain_pads(padding, self.shape):
            # the common case (zero pads of plain ints, one pair per axis), checked in a few comparisons
            if all(p == (0, 0) for p in padding):
                return self
            shape = tuple(s + b + a for s, (b, a) in zip(self.shape, padding, strict=True))
            return self._wrap(UOp.shaped(Op.PAD, self.uop.dtype, (self.uop,), tuple(padding), shape))
        padding_modes.check_mode(mode, value)
        padding = self._pad_pairs(padding)
        if any(b < 0 or a < 0 for b, a in padding):  # negative padding crops, before any mode pads
            x = self.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(padding, self.shape, strict=True)))
            return x.pad(tuple((max(b, 0), max(a, 0)) for b, a in padding), value, mode)
        if all(p == (0, 0) for p in padding):
            return self
        if mode != "constant":
            return padding_modes.pad_copying(self, padding, mode)
        out = self._mop(Op.PAD, padding)
        if value == 0:
            return out
        mask = type(self).full(self.shape, True, dtypes.bool, self.device)._mop(Op.PAD, padding)
        return mask.where(out, value)

    def _pad_pairs(self: Tensor, padding: Sequence[Any]) -> tuple[tuple[sint, sint], ...]:
        """`padding` as one (before, after) pair per axis, from pairs or torch's flat form."""
        padding = tuple(padding)
        if padding and not isinstance(padding[0], (tuple, list)):  # torch style: last axis first, flat pairs
            flat = padding
            if len(flat) % 2 or len(flat) > 2 * self.ndim:
                raise ShapeError(f"pad's flat form {flat} needs an even count of values, at most 2 per axis of "
                                 f"{self.shape}: (before, after) for the last axis first, then the one before")
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
            padding = tuple([(0, 0)] * (self.ndim - len(pairs)) + list(reversed(pairs)))
        padding = _pairs("pad", padding, self.shape)
        return tuple((_sint(b), _sint(a)) for b, a in padding)

    def shrink(self: Tensor, arg: Sequence[tuple[sint, sint] | None]) -> Tensor:
        own = self.shape
        if type(arg) is tuple and len(arg) == len(own) and (pairs := _plain_window(arg, own)) is not None:
            if pairs == tuple((0, s) for s in own):
                return self
            shape = tuple(e - b for b, e in pairs)
            return self._wrap(UOp.shaped(Op.SHRINK, self.uop.dtype, (self.uop,), pairs, shape))
        arg = tuple((0, s) if a is None else (_sint(a[0]), _sint(a[1]))
                    for a, s in zip(_pairs("shrink", arg, self.shape, allow_none=True), self.shape, strict=True))
        return self if all(a == (0, s) for a, s in zip(arg, self.shape, strict=True)) else self._mop(Op.SHRINK, arg)

    def _strided(self: Tensor, steps: list[int]) -> Tensor:
        """Every steps[a]-th element along each axis a, starting at the first."""
        x = self
        for axis, step in enumerate(steps):
            if step == 1 or x.shape[axis] == 0:
                continue
            n = math.ceil(x.shape[axis] / step)
            pad = [(0, 0)] * x.ndim
            pad[axis] = (0, n * step - x.shape[axis])
            x = x.pad(pad)
            x = x.reshape(x.shape[:axis] + (n, step) + x.shape[axis + 1:])
            x = x.shrink([(0, s) for s in x.shape[:axis + 1]] + [(0, 1)] + [(0, s) for s in x.shape[axis + 2:]])
            x = x.reshape(x.shape[:axis + 1] + x.shape[axis + 2:])
        return x

    def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
        """Drop size-1 axes: all of them, or those among `dim` (other sizes there are kept, as in torch)."""
        axes = self._axes(dim) if dim is not None else tuple(range(self.ndim))
        return self.reshape(tuple(s for a, s in enumerate(self.shape) if not (a in axes and s == 1)))

    def unsqueeze(self: Tensor, dim: int) -> Tensor:
        """A new size-1 axis at `dim` (-ndim-1 <= dim <= ndim)."""
        dim = as_axis(dim)
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise ShapeError(f"unsqueeze axis {dim} is out of range for a tensor of {self.ndim} dimension(s)")
        dim %= self.ndim + 1
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axes(start_dim)[0], self._axes(end_dim)[0]
        if s > e:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} in shape {self.shape}")
        return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def cat(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
        """Concatenate this tensor and `others` along `dim` (usable as `Tensor.cat(a, b, dim=...)`)."""
        ts = (self, *others)
        for t in ts:
            if t.ndim != self.ndim:
                raise ShapeError(f"cat needs tensors of one rank, got shapes {', '.join(str(t.shape) for t in ts)}")
        check_devices("cat", ts)
        if self.ndim == 0:
            raise ShapeError("cat of 0-d tensors: use stack")
        axis = self._axes(dim)[0]
        for t in ts:
            if any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=True)) if i != axis):
                raise ShapeError(f"cat along axis {axis}: shapes {', '.join(str(t.shape) for t in ts)} differ "
                                 "off that axis")
        dt = least_upper_dtype(*(t.dtype for t in ts))
        # joined pairwise, in rounds: a balanced tree of two-part joins, so each join covers only its own parts'
        # extent (a left fold padded every part to the whole result: a kernel per few parts, each over the whole
        # result, was quadratic in the number of parts)
        parts = [t.cast(dt) for t in ts]
        while len(parts) > 1:
            parts = [_join(parts[i], parts[i + 1], axis) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        return parts[0]

    def stack(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
        """Stack this tensor and `others` (all of one shape) along a new axis `dim`."""
        ts, dim = (self, *others), as_axis(dim)
        if any(t.shape != self.shape for t in ts):
            raise ShapeError(f"stack needs tensors of one shape, got {', '.join(str(t.shape) for t in ts)}")
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise ShapeError(f"stack axis {dim} is out of range for tensors of {self.ndim} dimension(s)")
        return ts[0].unsqueeze(dim).cat(*(t.unsqueeze(dim) for t in ts[1:]), dim=dim)

    def repeat(self: Tensor, *sizes: Any) -> Tensor:
        """torch's Tensor.repeat (ONNX's Tile): the whole tensor tiled sizes[a] times along axis a; `sizes` has
        at least one entry per axis, extra leading ones adding axes. Each axis becomes (copies, size) by an
        expand of a new axis, flattened: movement ops only."""
        reps = self._shape_arg(sizes, "repeat sizes")
        if len(reps) < self.ndim or any(r < 0 for r in reps):
            raise ShapeError(f"repeat sizes {reps} must be non-negative, at least one per axis of {self.shape}")
        x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        spread = x.reshape(tuple(v for s in x.shape for v in (1, s)))
        tiled = spread.expand(tuple(v for r, s in zip(reps, x.shape, strict=True) for v in (r, s)))
        return tiled.reshape(tuple(r * s for r, s in zip(reps, x.shape, strict=True)))

    def tile(self: Tensor, dims: int | Sequence[int]) -> Tensor:
        """torch.tile: `repeat`, with fewer `dims` than axes padded by leading 1s."""
        reps = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        return self.repeat((1,) * (self.ndim - len(reps)) + reps)

    def repeat_interleave(self: Tensor, repeats: int | Sequence[int], dim: int | None = None) -> Tensor:
        """torch.repeat_interleave: each element repeated `repeats` times in place along `dim` (None: of the
        flattened tensor). `repeats` an int (an expand of a new axis after `dim`, flattened) or host ints, one
        per element of the axis (a gather of the repeated positions); a Tensor of repeats would make the shape
        depend on data: ArgumentTypeError."""
        if dim is None:
            return self.flatten().repeat_interleave(repeats, 0)
        axis = normalize_axis(dim, self.ndim)
        if isinstance(repeats, int) and not isinstance(repeats, bool):
            if repeats < 0:
                raise ShapeError(f"repeat_interleave repeats must be non-negative, got {repeats}")
            x = self.unsqueeze(axis + 1)
            x = x.expand(x.shape[:axis + 1] + (repeats,) + x.shape[axis + 2:])
            return x.reshape(self.shape[:axis] + (self.shape[axis] * repeats,) + self.shape[axis + 1:])
        if not isinstance(repeats, (list, tuple)) or not all(isinstance(r, int) and r >= 0 for r in repeats):
            raise ArgumentTypeError(f"repeat_interleave repeats must be a non-negative int or a list of them (host "
                                    f"values: the result's length depends on them), got {type(repeats).__name__}")
        if len(repeats) != self.shape[axis]:
            raise ShapeError(f"repeat_interleave: {len(repeats)} repeats for axis {axis} of size "
                             f"{self.shape[axis]} in shape {self.shape}")
        positions = [i for i, r in enumerate(repeats) for _ in range(r)]
        return self[(slice(None),) * axis + (positions,)]

    def split(self: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """torch.split: pieces of `split_size_or_sections` elements along `dim` (an int: that size each, the last
        one smaller when it does not divide; a list: those sizes, which must sum to the axis length)."""
        own = self.shape
        axis = self._axis_of(dim)
        n = own[axis]
        if type(split_size_or_sections) is int and split_size_or_sections > 0 and _plain_sizes(own):
            # the common case (a GRU or LSTM cell chunks its gate projections every step): plain sizes
            step = split_size_or_sections
            return self._pieces(axis, [min(step, n - s) for s in range(0, n, step)] or [0])
        if isinstance(split_size_or_sections, int):
            if split_size_or_sections < 1 and n:
                raise ShapeError(f"split size must be positive, got {split_size_or_sections}")
            step = max(split_size_or_sections, 1)
            sizes = [min(step, n - s) for s in range(0, n, step)] or [0]
        else:
            sizes = list(split_size_or_sections)
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise ShapeError(f"split sections {sizes} must be non-negative and sum to the size {n} of axis "
                                 f"{axis} of {self.shape}")
        if _plain_sizes(own) and _plain_sizes(tuple(sizes)):  # the pieces' nodes built here: bounds checked above
            return self._pieces(axis, sizes)
        out, start = [], 0
        for s in sizes:
            out.append(self.shrink(tuple((start, start + s) if a == axis else None for a in range(self.ndim))))
            start += s
        return tuple(out)

    def _pieces(self: Tensor, axis: int, sizes: Sequence[int]) -> tuple[Tensor, ...]:
        """The consecutive pieces of `sizes` elements along `axis` (plain ints summing to that axis of a shape of
        plain ints): a GRU or LSTM cell splits its gate projections every step."""
        own, u = self.shape, self.uop
        before, after = tuple((0, d) for d in own[:axis]), tuple((0, d) for d in own[axis + 1:])
        out, start = [], 0
        for s in sizes:
            if s == own[axis]:  # the whole axis (the other pieces empty): the value itself, as shrink gives
                out.append(self)
                continue
            shape = own[:axis] + (s,) + own[axis + 1:]
            out.append(self._wrap(UOp.shaped(Op.SHRINK, u.dtype, (u,), before + ((start, start + s),) + after, shape)))
            start += s
        return tuple(out)

    def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """torch.chunk: at most `chunks` pieces along `dim`, each ceil(size / chunks) long but the last (so
        fewer pieces come back when the size does not fill them all)."""
        if chunks < 1:
            raise ShapeError(f"chunk needs a positive number of chunks, got {chunks}")
        n = self.shape[self._axis_of(dim)]
        return self.split(max(-(-n // chunks), 1), dim)

    def _axis_of(self: Tensor, dim: Any) -> int:
        """`dim` as an index in [0, ndim): a plain int in range directly, anything else checked by `_axes`."""
        nd = len(self.shape)
        return dim % nd if type(dim) is int and -nd <= dim < nd else self._axes(dim)[0]


def _join(a: Tensor, b: Tensor, axis: int) -> Tensor:
    """`a` then `b` along `axis` (one dtype, equal off that axis): each padded to the joint extent, then added
    (or-ed for bools), the padding being zeros."""
    before, after = [(0, 0)] * a.ndim, [(0, 0)] * a.ndim
    before[axis], after[axis] = (0, b.shape[axis]), (a.shape[axis], 0)
    pa, pb = a.pad(before), b.pad(after)
    return pa | pb if dtypes.is_bool(a.dtype) else pa + pb
