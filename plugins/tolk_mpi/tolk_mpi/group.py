"""MpiGroup: the ProcessGroup over MPI.COMM_WORLD (a duplicate of it), through mpi4py.

Every operation first agrees: one nonblocking allgather of a fixed-size frame per rank (ok, a digest of what it
calls, and up to SMALL bytes of data), so that a rank with bad input (ok = 0, `_abort`) or a mismatched call
makes every rank raise CollectiveError naming the rank, before any data is used. The frame's size never
depends on the call, so ranks that disagree still meet in the same collective. An allreduce of at most SMALL
bytes rides in its own agreement (one round: each rank folds the gathered rows in rank order with numpy, so
every rank holds the same bits); a larger one, and the other operations, then move their data with a
nonblocking collective. Every request is polled with ``Test`` against the group's deadline, so a rank that
never comes makes the others raise CollectiveTimeoutError instead of blocking (MPI cannot cancel a collective:
the group is closed after it; a rank that exits ends the whole job under mpiexec); past a short spin the poll
yields its core, which lets a descheduled peer run on a loaded or oversubscribed host, where MPI's blocking
calls spin (measured in docs/plugins.md). The digest of each call signature (op, dtype, shape) is computed once
and remembered. Dtypes MPI has no reduction for (bool, float16, bfloat16) are gathered as bytes and reduced in
rank order with numpy; persistent allreduce uses MPI-4's Allreduce_init where the dtype allows (agreed once,
when it is bound).
"""
from __future__ import annotations

import os
import time
import zlib
from typing import Any

import numpy as np

from tolk_core.collectives import PersistentOp, ProcessGroup, reduce_arrays
from tolk_core.collectives.group import describe, dtype_name
from tolk_core.errors import CollectiveError, CollectiveTimeoutError

_HEADER = 24  # ok, digest, data bytes: three int64
FRAME = 3968
"""Bytes of one rank's agreement frame. It must stay under the eager limit of Open MPI's shared-memory
transport (4 KiB with its own fragment header): a frame of 4120 bytes went by rendezvous and made every
agreement twice as slow (measured in docs/performance.md, "Collectives"). A multiple of 8, so that every
row's data is aligned for any dtype."""
SMALL = FRAME - _HEADER
"""Bytes of data an agreement frame carries: an allreduce this small is done by its agreement alone."""
BOUND = 8
"""Call signatures whose large allreduce keeps a persistent request and its two buffers bound (see `_bound`)."""
NATIVE = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"})
"""Dtypes MPI reduces itself (mpi4py maps them to MPI datatypes); the others go through bytes."""


_PERSISTENT, _BLOCKING = 0, 1
"""The two ways of `MpiGroup._bound_into`, as rank 0's frame names them."""


class _IntoCall:
    """What one `out=` allreduce signature keeps between calls (`MpiGroup._bound_into`): its agreed text, the
    persistent request and the two arrays it is bound to (held, so their memory lives while MPI may touch
    it), and rank 0's choice of way. The first TRIALS + 1 calls of each way alternate (persistent first: the
    next calls reuse its binding), then every call takes the way whose median time was lower, the first call
    of each way left out (it binds, or first touches what MPI keeps per buffer). Both ways compute the same
    sums; only their speed differs. With five timed calls each, a way 10% slower over the run was picked in
    one run of seven at 2 ranks and 4 MiB (docs/performance.md, "Collectives"): eight now."""

    TRIALS = 8
    __slots__ = ("text", "req", "a", "out", "times", "way")

    def __init__(self, text: str) -> None:
        self.text = text
        self.req: Any = None
        self.a: np.ndarray | None = None
        self.out: np.ndarray | None = None
        self.times: tuple[list[float], list[float]] = ([], [])
        self.way: int | None = None

    def next_way(self) -> int:
        if self.way is not None:
            return self.way
        return _PERSISTENT if len(self.times[_PERSISTENT]) <= len(self.times[_BLOCKING]) else _BLOCKING

    def record(self, way: int, seconds: float) -> None:
        self.times[way].append(seconds)
        if min(len(t) for t in self.times) > self.TRIALS:
            med = [sorted(t[1:])[self.TRIALS // 2] for t in self.times]
            self.way = _BLOCKING if med[_BLOCKING] < med[_PERSISTENT] else _PERSISTENT

    def free(self) -> None:
        if self.req is not None:
            req, self.req, self.a, self.out = self.req, None, None, None
            req.Free()


def _u8(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


class MpiGroup(ProcessGroup):
    """One rank of the MPI job this process was launched into (mpiexec; a plain process is a group of one)."""

    name = "MPI"
    persistent = True
    spin = 1000

    def __init__(self, comm: Any, timeout: float):
        super().__init__(comm.Get_rank(), comm.Get_size(), timeout)
        from mpi4py import MPI
        self._mpi, self._comm = MPI, comm
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        self._mine = np.zeros(FRAME, np.uint8)  # the agreement's frames, reused by every operation
        self._every = np.zeros((self.size, FRAME), np.uint8)
        self._mine_head = self._mine[:_HEADER].view(np.int64)
        self._every_heads = self._every[:, :_HEADER]  # what `_agree` compares with this rank's header
        self._mine_heads = b""
        self._digests: dict[str, int] = {}
        # per small-allreduce signature: its text, typed views of this rank's frame and of every rank's
        self._small_calls: dict[tuple[np.dtype, tuple[int, ...], str], tuple[str, np.ndarray, list[np.ndarray]]] = {}
        self._can_bind = hasattr(comm, "Allreduce_init")
        self._bound_ops: dict[tuple[np.dtype, tuple[int, ...], str], tuple[Any, np.ndarray, np.ndarray]] = {}
        self._into: dict[tuple[np.dtype, tuple[int, ...], str], _IntoCall] = {}  # per out= signature
        # the agreement as an MPI-4 persistent allgather, bound once: each agreement is a Start (no buffer
        # parsing, no new request); an MPI without persistent collectives makes a new Iallgather each time
        self._agreement = comm.Allgather_init(self._mine, self._every) if hasattr(comm, "Allgather_init") else None

    @classmethod
    def join(cls, timeout: float) -> MpiGroup:
        """Initialize MPI (once per process) and duplicate COMM_WORLD."""
        from mpi4py import MPI
        return cls(MPI.COMM_WORLD.Dup(), timeout)

    def close(self) -> None:
        if not self.closed and self._comm is not None:
            comm, self._comm = self._comm, None
            for req in [self._agreement, *(b[0] for b in self._bound_ops.values()),
                        *(c.req for c in self._into.values())]:
                try:
                    if req is not None:
                        req.Free()
                except Exception:  # noqa: BLE001  # a request pending after a timeout cannot be freed: closed anyway
                    pass
            self._bound_ops.clear()
            self._into.clear()
            try:
                comm.Free()
            except Exception:  # noqa: BLE001  # freeing after a failed collective may itself fail: closed anyway
                pass
        super().close()

    # ------------------------------------------------------------ agreement and waiting

    def _wait(self, req: Any, what: str, detail: str = "") -> None:
        """Poll `req` to completion; past the deadline raise CollectiveTimeoutError naming `what` + `detail` (two
        strings, joined only then: most calls never time out) and close the group."""
        if req.Test():
            return
        deadline = time.monotonic() + self.timeout
        spins = 0
        while not req.Test():
            spins += 1
            if spins > self.spin:  # past a short spin, give the core away: oversubscribed ranks need it to progress
                os.sched_yield()
            if spins & 63 == 0 and time.monotonic() > deadline:
                self.closed = True
                raise CollectiveTimeoutError(f"MPI: rank {self.rank}: {what}{detail} did not complete within "
                                             f"{self.timeout:g}s (TOLK_COLLECTIVES_TIMEOUT); another rank never "
                                             "joined it. The group is closed")

    def _agree(self, text: str, ok: bool = True, nbytes: int = 0) -> None:
        """Raise CollectiveError on every rank unless every rank is ok and calls `text`. `nbytes`: how much data
        the caller put in this rank's frame (after the header; see `_small`), which every rank must agree on too."""
        digest = self._digests.get(text)
        if digest is None:
            if len(self._digests) > 4096:  # a program with ever new shapes: keep the memo bounded
                self._digests.clear()
            digest = self._digests[text] = zlib.crc32(text.encode())
        head = self._mine_head
        head[0], head[1], head[2] = 1 if ok else 0, digest, nbytes
        self._mine_heads = self._mine[:_HEADER].tobytes() * self.size
        if self._agreement is not None:
            self._agreement.Start()
            self._wait(self._agreement, "agreeing on ", text)
        else:
            self._wait(self._comm.Iallgather(self._mine, self._every), "agreeing on ", text)
        if ok and self._every_heads.tobytes() == self._mine_heads:
            return
        every = self._comm.allgather((ok, text))  # every rank is here: this cannot hang
        bad = next((r for r in range(self.size) if not every[r][0]), None)
        texts = [t for _, t in every]
        msg = (texts[bad] if bad is not None else
               f"ranks disagree: rank 0 called {texts[0]} but rank "
               f"{next(r for r in range(self.size) if texts[r] != texts[0])} called "
               f"{next(t for t in texts if t != texts[0])}")
        self.close()
        raise CollectiveError(f"MPI: {msg}")

    def _abort(self, message: str) -> None:
        if self.closed:
            return
        try:
            self._agree(message, ok=False)
        except CollectiveError:
            pass

    # ------------------------------------------------------------ the operations

    def _gathered(self, a: np.ndarray, what: str) -> np.ndarray:
        """Every rank's `a`, shape (size, *a.shape), moved as bytes (after an agreement)."""
        out = np.empty((self.size, *a.shape), a.dtype)
        if a.size:
            self._wait(self._comm.Iallgather(_u8(a), _u8(out)), what)
        return out

    def _allreduce(self, a: np.ndarray, op: str) -> np.ndarray:
        return self._reduce(a, op, None)

    def _allreduce_into(self, a: np.ndarray, op: str, out: np.ndarray) -> None:
        self._reduce(a, op, out)

    def _reduce(self, a: np.ndarray, op: str, out: np.ndarray | None) -> np.ndarray:
        """The allreduce of `a`, into `out` when given (a's shape and dtype, `a` itself or disjoint from it),
        else into a new array."""
        if a.nbytes <= SMALL:
            return self._small(a, op, out)
        native = dtype_name(a.dtype) in NATIVE
        if out is not None and native and self._can_bind:
            try:
                return self._bound_into(a, op, out)
            except NotImplementedError:  # an MPI before 4.0 (every rank links the same library)
                self._can_bind = False
        self._agree(describe(f"allreduce_{op}", a))
        if not native:
            return reduce_arrays(list(self._gathered(a, "allreduce")), op, out)
        if out is not None:  # the caller's buffers, as mpi4py's own call takes them: no copy, no fresh pages
            send = self._mpi.IN_PLACE if out is a else a
            self._wait(self._comm.Iallreduce(send, out, op=self._ops[op]), f"allreduce_{op}")
            return out
        if self._can_bind:
            try:
                return self._bound(a, op)
            except NotImplementedError:  # an MPI before 4.0 (every rank links the same library)
                self._can_bind = False
        out = np.empty_like(a)
        if a.size:
            self._wait(self._comm.Iallreduce(a, out, op=self._ops[op]), f"allreduce_{op}")
        return out

    def _small(self, a: np.ndarray, op: str, out: np.ndarray | None) -> np.ndarray:
        """An allreduce whose data rides in the agreement's frames: one round, then every rank folds the
        gathered rows in rank order (the same bits everywhere). The call's text and typed views of the frames
        are made once per signature: per call there is one copy in and the fold."""
        key = (a.dtype, a.shape, op)
        if (hit := self._small_calls.get(key)) is None:
            if len(self._small_calls) > 256:  # a program with ever new shapes: keep the memo bounded
                self._small_calls.clear()
            n = a.nbytes
            hit = self._small_calls[key] = (describe(f"allreduce_{op}", a),
                                            self._mine[_HEADER:_HEADER + n].view(a.dtype).reshape(a.shape),
                                            [self._every[r, _HEADER:_HEADER + n].view(a.dtype).reshape(a.shape)
                                             for r in range(self.size)])
        text, mine, rows = hit
        mine[...] = a
        self._agree(text, nbytes=a.nbytes)
        return reduce_arrays(rows, op, out)

    def _bound_into(self, a: np.ndarray, op: str, out: np.ndarray) -> np.ndarray:
        """A large allreduce of the caller's `a` into the caller's `out` (in place when `out` is `a`), by the
        faster of two ways for this call signature (`_IntoCall`): a blocking Allreduce, or a persistent request
        bound to those two arrays, kept while the caller passes the same ones (a training loop's gradient and
        its result buffer). A fresh nonblocking allreduce costs Open MPI a temporary buffer of the message's
        size per call, fresh pages to fault in (measured in docs/performance.md, "Collectives"); the request
        makes it once. Open MPI runs the two ways through different algorithms and neither wins at every size
        and rank count (same section), so rank 0 times both on the first calls and its frame names the way
        every rank takes. The blocking call cannot hang where the persistent one would time out: every rank
        has passed the agreement, so every rank is in it. Binding is collective, so whether to bind is agreed:
        each rank's frame says whether it holds a request bound to these arrays, and unless every rank does,
        every rank (re)binds, in the same order. The per-call Python is kept short: a large message has just
        evicted the interpreter's working set from the caches, and each line costs microseconds then."""
        key = (a.dtype, a.shape, op)
        call = self._into.get(key)
        if call is None:
            if len(self._into) >= 256:  # a program with ever new shapes: keep the memo bounded (alike on every rank)
                self._free_into()
            call = self._into[key] = _IntoCall(describe(f"allreduce_{op}", a))
        mine = self._mine
        mine[_HEADER] = 1 if call.a is a and call.out is out else 0  # frames carry no data here
        if self.rank == 0:
            mine[_HEADER + 1] = call.next_way()
        self._agree(call.text)
        send = self._mpi.IN_PLACE if out is a else a
        way = int(self._every[0, _HEADER + 1])
        t0 = time.perf_counter() if call.way is None else 0.0
        if way == _BLOCKING:
            self._comm.Allreduce(send, out, op=self._ops[op])
        else:
            if not self._every[:, _HEADER].all():  # timed with the call: a caller whose arrays move pays it
                self._bind_into(call, send, a, out, op)
            call.req.Start()
            self._wait(call.req, "allreduce_", op)
        if call.way is None and self.rank == 0:
            call.record(way, time.perf_counter() - t0)
        return out

    def _bind_into(self, call: _IntoCall, send: Any, a: np.ndarray, out: np.ndarray, op: str) -> None:
        """(Re)bind `call`'s persistent request to `send` and `out`; past BOUND bound requests, free them all
        first (every rank binds the same signatures in the same order, so they free alike)."""
        call.free()
        if sum(c.req is not None for c in self._into.values()) >= BOUND:
            for c in self._into.values():
                c.free()
        call.req, call.a, call.out = self._comm.Allreduce_init(send, out, op=self._ops[op]), a, out

    def _free_into(self) -> None:
        for c in self._into.values():
            c.free()
        self._into.clear()

    def _bound(self, a: np.ndarray, op: str) -> np.ndarray:
        """A large allreduce through a persistent request bound to two buffers of its signature, made on first
        use and kept (BOUND signatures; more frees them all). Open MPI moves data from buffers it has seen
        before much faster (measured 2x at 4 MiB, docs/plugins.md) than from a new array each call; the two
        copies in and out cost far less. Every rank agreed on the call first, so every rank binds and frees
        the same requests in the same order (binding is itself collective)."""
        key = (a.dtype, a.shape, op)
        if (hit := self._bound_ops.get(key)) is None:
            if len(self._bound_ops) >= BOUND:
                for req, _, _ in self._bound_ops.values():
                    req.Free()
                self._bound_ops.clear()
            send, recv = np.empty_like(a), np.empty_like(a)
            hit = self._bound_ops[key] = (self._comm.Allreduce_init(send, recv, op=self._ops[op]), send, recv)
        req, send, recv = hit
        np.copyto(send, a)
        req.Start()
        self._wait(req, "allreduce_", op)
        return recv.copy()

    def _allgather(self, a: np.ndarray) -> np.ndarray:
        self._agree(describe("allgather", a))
        return self._gathered(a, "allgather")

    def _broadcast(self, a: np.ndarray, root: int) -> np.ndarray:
        self._agree(describe("broadcast", a, f"root={root}"))
        out = a.copy() if self.rank == root else np.empty_like(a)
        if a.size:
            self._wait(self._comm.Ibcast(_u8(out), root=root), "broadcast")
        return out

    def _reduce_scatter(self, a: np.ndarray, op: str) -> np.ndarray:
        self._agree(describe(f"reduce_scatter_{op}", a))
        k = a.shape[0] // self.size
        if dtype_name(a.dtype) not in NATIVE:
            return reduce_arrays(list(self._gathered(a, "reduce_scatter")), op)[self.rank * k:(self.rank + 1) * k]
        out = np.empty((k, *a.shape[1:]), a.dtype)
        if a.size:
            self._wait(self._comm.Ireduce_scatter_block(a, out, op=self._ops[op]), f"reduce_scatter_{op}")
        return out

    def _barrier(self) -> None:
        self._agree("barrier()")  # the agreement is an allreduce: it completes once every rank has entered it

    def _allreduce_init(self, x: np.ndarray, op: str) -> PersistentOp:
        self._agree(describe(f"allreduce_init_{op}", x))
        return _MpiPersistent(self, x, op)


class _MpiPersistent(PersistentOp):
    """MPI-4 persistent allreduce (Allreduce_init, Start, Wait) bound to `x` and one output array; dtypes MPI
    cannot reduce, or an MPI without persistent collectives, run a plain allreduce at each wait()."""

    def __init__(self, group: MpiGroup, x: np.ndarray, op: str):
        self.group, self.x, self.op = group, x, op
        self.out = np.empty_like(x)
        self._req: Any = None
        self._started = False
        if dtype_name(x.dtype) in NATIVE and x.size and hasattr(group._comm, "Allreduce_init"):
            try:
                self._req = group._comm.Allreduce_init(x, self.out, op=group._ops[op])
            except NotImplementedError:
                self._req = None

    def start(self) -> None:
        if self._started:
            raise CollectiveError("persistent allreduce: start() called twice without wait()")
        self._started = True
        if self._req is not None:
            self._req.Start()

    def wait(self) -> np.ndarray:
        if not self._started:
            raise CollectiveError("persistent allreduce: wait() without start()")
        self._started = False
        if self._req is not None:
            self.group._wait(self._req, "persistent allreduce_", self.op)
        else:
            self.group.allreduce(self.x, self.op, out=self.out)
        return self.out

    def close(self) -> None:
        if self._req is not None:
            req, self._req = self._req, None
            try:
                req.Free()
            except Exception:  # noqa: BLE001  # after a closed group the request may be gone already
                pass
