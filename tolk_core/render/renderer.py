"""The renderer contract: everything core's code generation and engine read from a device's renderer.

A renderer turns one linearized kernel (`tolk_core.codegen.linearize`) into source text in a device's dialect,
and tells the optimizer (`tolk_core.codegen.optimize`) what the device can do. Every renderer subclasses
`Renderer`: it declares each capability core reads, with a default that is always safe (a kernel rendered with
every default is correct on any device, only slower), so a dialect sets only what its device has. docs/plugins.md
§5 tables the capabilities and what a backend loses without each.

Two launch styles, chosen by `has_local`:

- loop style (False: CPU-like devices): the kernel loops over its outputs itself; the optimizer annotates the
  loops with a `LoopKind` (threads, SIMD, unrolling), which `loop_pragma` turns into a line before the loop;
  `vector_bytes` enables register blocking with vector lanes.
- work-item style (True: GPUs, OpenCL): one work item per output (or per tile, per row, per group reduction);
  `local_max`, `shared_bytes`, `max_lanes` and `cpu_threads` shape the launch.

The source cache (`tolk_core.engine.source_cache`) keys a kernel on every public plain-data attribute of the
renderer (class-level ones included), so any capability or dialect setting that changes the output is in the key.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from tolk_core import deprecations
from tolk_core.errors import DTypeError, IndexWidthError
from tolk_core.ir.dtype import DType, PtrDType, dtypes
from tolk_core.ir.ops import Op

if TYPE_CHECKING:
    from tolk_core.ir.uop import UOp
    from tolk_core.render.cstyle import KernelParam


class LoopKind(enum.StrEnum):
    """How the optimizer asks a loop-style renderer to run one loop (`Plan.loop_kinds`, `loop_pragma`).

    Members are strings equal to the annotations the optimizer used to produce (``LoopKind.SIMD == "simd"``),
    so a renderer comparing kinds with those strings, or looking them up in a dict keyed by them, keeps working.
    Handing core a plain string where it expects a kind (a `loop_kinds` value passed to `render_kernel`, the
    `kind` passed to `Renderer.loop_pragma`, a key of `loop_pragmas`) is deprecated: it is accepted with a
    DeprecationWarning naming the member to use for one minor release (through plugin API 1.1, the table in
    tolk_core/deprecations.py); later releases accept members only.
    """

    PLAIN = ""
    """No annotation: an ordinary sequential loop."""
    PARALLEL = "parallel"
    """An output loop worth splitting across threads (the kernel does at least `PARALLEL_MIN_WORK`)."""
    SIMD = "simd"
    """The innermost output loop of a kernel without reductions: iterations are independent, vectorize them."""
    PARALLEL_SIMD = "parallel simd"
    """Both: the only output loop, split across threads and vectorized."""
    PARALLEL_REDUCE = "parallel reduce"
    """The loop of one long scalar sum or product: threads fold partial results that meet at the end."""
    UNROLL = "unroll"
    """A reduction loop of constant trip count at most `UNROLL_MAX`: unroll it fully."""
    UNROLL4 = "unroll4"
    """The reduction loop of a kernel with vector accumulators: unroll it by 4."""

    @classmethod
    def of(cls, kind: str, stacklevel: int = 3) -> LoopKind:
        """`kind` as a member. A plain string that names a kind is converted with a DeprecationWarning naming the
        member (see the class docstring); one that names none raises ValueError. `stacklevel` is passed to
        `warnings.warn` (the default blames the caller of the function calling `of`)."""
        if isinstance(kind, LoopKind):
            return kind
        try:
            member = cls(kind)
        except ValueError:
            raise ValueError(f"unknown loop kind {kind!r}; the kinds are "
                             f"{', '.join(f'LoopKind.{m.name}' for m in cls)}") from None
        deprecations.warn("loop kind as a plain string", f"loop kind {kind!r} given as a plain string",
                          f"LoopKind.{member.name}", stacklevel=stacklevel + 1)
        return member


class Renderer(ABC):
    """Base of every renderer. Capabilities are class attributes (a dialect overrides them on its class, or on
    the instance in `__init__` when they depend on the opened device); each default is the safe choice, so a
    subclass that declares nothing renders correct, unoptimized kernels.

    Constructed as ``cls(device)``: `device` is the opened CompiledDevice, or None when core renders without one
    (``Device.renderer_for``, a plugin's CI without the hardware); a renderer must work with None.
    """

    # ---- what the renderer is
    device: str = ""
    """The device name the dialect targets ("CPU"). Names the target in errors when no device is open."""
    device_obj: object = None
    """The opened device this renderer was constructed with, or None (set by `__init__`; not a cache key)."""

    # ---- launch style and work-item limits (read by codegen.optimize)
    has_local: bool = False
    """True: work-item launches (one item per output, `SPECIAL` ids, a guard, launch sizes); False: the kernel
    loops over its outputs and its loops are annotated with `LoopKind`s."""
    local_max: int = 0
    """The largest work-group size the optimizer may choose. Must be at least 1 when `has_local` (group
    reductions and row groups are sized by it)."""
    shared_bytes: int = 0
    """Work-group shared memory (bytes) a kernel may declare (`DEFINE_LOCAL`). 0: no row groups; rows are
    recomputed where read and reductions are not shared by a group's items."""
    max_lanes: int = 0
    """The widest vector type (lanes) of a work-item dialect: contiguous accesses and reductions run over vectors
    (`dtype.count > 1`; the dialect renders `vector_type_name`). 0: scalar work items only."""
    cpu_threads: int = 0
    """Threads of a work-item device that runs each work group as a loop on one CPU thread (PoCL); 0 for real
    GPUs. Nonzero: groups are sized to give each thread several, row kernels run one item per row."""

    # ---- loop style (read by codegen.optimize and by the renderer's own loop_pragma)
    vector_bytes: int = 0
    """The widest vector register (bytes) of a loop-style device: kernels with reductions are register-blocked
    over vector lanes of this width (matmul, convolutions). 0: one scalar accumulator per output."""
    vector_registers: int = 32
    """How many such vector registers the device has: a register tile holds half of them as accumulators (the
    rest hold the loaded operands; codegen.optimize `MAX_ACCUMULATORS`)."""
    loop_pragmas: ClassVar[Mapping[LoopKind, str]] = MappingProxyType({})
    """The line the default `loop_pragma` emits before a loop of each kind (e.g. an OpenMP pragma); kinds not in
    it get none. Keys are `LoopKind` members (plain-string keys are converted with a DeprecationWarning)."""

    # ---- scheduling (read by the engine)
    local_arrays: bool = True
    """Whether kernels may declare kernel-local arrays (per-row values computed once per row and read by the
    row's outputs: a private array per loop iteration, or shared memory per work group). False: the scheduler
    stores such rows to memory in a kernel of their own."""

    # ---- dtypes (read by the renderer; `supports`/`check_dtype` are the interface)
    unsupported: Mapping[DType, str] = MappingProxyType({})
    """dtypes the device cannot compute at all, with the reason: rendering one raises DTypeError. `__init__` gives
    each instance its own copy (a dialect may fill it from the opened device)."""
    emulated: frozenset[DType] = frozenset()
    """dtypes stored in memory but computed in float32 registers, each value rounded back to its dtype."""
    vector_folds: frozenset[Op] = frozenset()
    """Ops a vector accumulator folds with one native vector operation; other folds go lane by lane."""
    index64: bool = False
    """Whether the dialect computes index values (offsets, loop counters, work-item ids) in 64-bit integers in a
    kernel whose indices pass the 32-bit range (buffers of more than 2^31 elements; see `index_width`). False:
    such a kernel raises IndexWidthError rather than rendering 32-bit indices that would wrap."""

    def __init__(self, device: object = None):
        self.device_obj = device
        self.unsupported = dict(type(self).unsupported)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        table = cls.__dict__.get("loop_pragmas")
        if table is not None and not all(isinstance(k, LoopKind) for k in table):
            # plain-string keys (the annotations before LoopKind): converted, each warned at the class statement
            # (stack: of, __init_subclass__, ABCMeta.__new__, the class statement; a loop, not a comprehension,
            # which is a frame of its own before Python 3.12)
            converted: dict[LoopKind, str] = {}
            for k, v in table.items():
                converted[LoopKind.of(k, stacklevel=4)] = v
            cls.loop_pragmas = converted

    # ---- dtype capability
    @property
    def target(self) -> str:
        """What the errors call this renderer's target: the device's name, or the dialect's without one."""
        name = getattr(self.device_obj, "name", None)
        return name if name else f"{self.device or type(self).__name__} (no device)"

    def supports(self, dt: DType) -> bool:
        """Whether kernels over `dt` can be rendered (and run) for this renderer's device."""
        return dt.scalar() not in self.unsupported

    @property
    def supported_dtypes(self) -> tuple[DType, ...]:
        """Every dtype `supports` accepts, in `dtypes.all` order."""
        return tuple(d for d in dtypes.all if self.supports(d))

    def check_dtype(self, dt: DType) -> None:
        """Raise DTypeError naming `dt` and the device when the device cannot compute `dt`."""
        dt = dt.base if isinstance(dt, PtrDType) else dt.scalar()
        if (why := self.unsupported.get(dt)) is not None:
            raise DTypeError(f"dtype {dt.name} is not supported on {self.target}: {why}")

    def index_width(self, lin: Sequence[UOp]) -> int:
        """The integer width (32 or 64) the index values of linearized kernel `lin` need: 64 when one of them may
        leave the int32 range (`index_extent`), else 32, so a kernel of int32 sizes keeps its 32-bit rendering.
        Raises IndexWidthError naming the index, the largest buffer and the device when the kernel needs 64 bits
        and the renderer has no `index64`."""
        extent = index_extent(lin)
        if extent is None:
            return 32
        if not self.index64:
            sizes = [u.dtype.size for u in lin if u.op is Op.PARAM and isinstance(u.dtype, PtrDType)]
            biggest = f" (its largest buffer has {max(sizes)} elements)" if sizes else ""
            raise IndexWidthError(
                f"a kernel computes index values up to {extent}, past the 32-bit range{biggest}, and {self.target} "
                "renders 32-bit indices only (its renderer has no index64): split the tensor into parts of fewer "
                "than 2^31 elements, or use a device with 64-bit indices (CPU, OPENCL, CUDA)")
        return 64

    # ---- rendering
    @abstractmethod
    def render_kernel(self, name: str, lin: list[UOp], params: Sequence[KernelParam],
                      loop_kinds: Mapping[UOp, LoopKind] | None = None) -> str:
        """One function named `name` computing the linearized kernel `lin` over `params` (buffers by slot, then
        integer variables); `loop_kinds` annotates loop-style loops (absent loops are `LoopKind.PLAIN`). Must be
        deterministic: identical kernels give identical text. Raises DTypeError for an unsupported dtype."""

    def render_module(self, functions: Sequence[str]) -> str:
        """One compilation unit holding every kernel of a schedule (compiled by one compiler call). Default: the
        functions one after another; a dialect adds its prelude (headers, helpers)."""
        return "\n\n".join(functions) + "\n"

    def loop_pragma(self, kind: LoopKind, folds: Sequence[tuple[Op, str, DType]]) -> str | None:
        """The line before a loop of `kind`, or None. `folds` are the (op, accumulator name, its dtype) triples an
        innermost loop folds into (empty for other loops), for reduction clauses. Default: `loop_pragmas[kind]`."""
        return self.loop_pragmas.get(LoopKind.of(kind))


INT32_RANGE = (-(2 ** 31), 2 ** 31 - 1)


def index_extent(lin: Sequence[UOp]) -> int | None:
    """The index value of largest magnitude outside the int32 range that linearized kernel `lin` may compute,
    by the bounds analysis of `UOp.vmin`/`vmax` over every index-typed node and operand (loop counters and their
    trip counts, work-item ids, index arithmetic, index constants); None when all of them fit in int32. A node
    the analysis cannot bound has its dtype's bounds, which are outside."""
    lo, hi = INT32_RANGE
    worst: int | None = None
    for u in {s for node in lin for s in (node, *node.src)}:
        if u.dtype.scalar() != dtypes.index:
            continue
        for v in (u.vmin, u.vmax):
            if not lo <= v <= hi and (worst is None or abs(v) > abs(worst)):
                worst = int(v)
    return worst
