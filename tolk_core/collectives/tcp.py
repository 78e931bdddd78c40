"""TCP: the reference collectives provider, shipped in core with no dependencies (docs/plugins.md, section 12).

Rank 0 is the hub: the others connect to it (TOLK_MASTER_ADDR:TOLK_MASTER_PORT) and each operation is one round:
every rank sends the hub a frame (what it calls, as text, and its data), the hub checks that all ranks called
the same thing, computes every rank's answer in rank order (so all ranks get bit-identical results) and sends
each its own. It is a star, not a ring: simple and correct first, about a socket round trip per operation.

Failures never hang: a bad input on a rank travels as an *abort* frame in place of its data, a mismatch is
found by the hub, a rank that exits closes its socket, and every wait has a deadline (the group's timeout).
In each case the hub sends an abort naming the rank at fault to every rank, and every rank raises
CollectiveError (CollectiveTimeoutError for a deadline); the group is then closed.

A frame is a header ``!BIQ`` (kind: 0 data, 1 abort, 2 hello; the text's length; the data's length), the UTF-8
text, then the data.
"""
from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from collections.abc import Callable

import numpy as np

from tolk_core.collectives.group import PersistentOp, ProcessGroup, as_bytes, describe, reduce_arrays
from tolk_core.errors import CollectiveError, CollectiveTimeoutError, ConfigError

_HEADER = struct.Struct("!BIQ")
DATA, ABORT, HELLO = 0, 1, 2
ENV = ("TOLK_RANK", "TOLK_WORLD_SIZE", "TOLK_MASTER_ADDR", "TOLK_MASTER_PORT")
DEFAULT_ADDR, DEFAULT_PORT = "127.0.0.1", 29517


Raw = bytearray | memoryview | bytes
"""A frame's data: received (bytearray, or the caller's memoryview), or an answer the hub made."""
Answer = Callable[[list[Raw]], list[memoryview | bytes]]


class _Gone(Exception):
    """The peer closed its socket."""


def _recv_exact(sock: socket.socket, n: int, deadline: float, into: memoryview | None = None) -> bytearray | memoryview:
    """`n` bytes from `sock`, read into `into` when it is given and n bytes long (a caller's array: no copy),
    else into a new bytearray."""
    buf: bytearray | memoryview = into if into is not None and len(into) == n else bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        sock.settimeout(max(deadline - time.monotonic(), 1e-3))
        k = sock.recv_into(view[got:], min(n - got, 1 << 22))
        if k == 0:
            raise _Gone()
        got += k
    return buf


def _send(sock: socket.socket, kind: int, text: str, data: memoryview | bytes = b"", deadline: float = 0.0) -> None:
    t = text.encode()
    sock.settimeout(max(deadline - time.monotonic(), 1e-3) if deadline else None)
    mv = data if len(data) else b""
    sock.sendall(_HEADER.pack(kind, len(t), len(mv)) + t + (bytes(mv) if len(mv) <= 4096 else b""))
    if len(mv) > 4096:
        sock.sendall(mv)


def _recv(sock: socket.socket, deadline: float, into: memoryview | None = None,
          ) -> tuple[int, str, bytearray | memoryview]:
    """One frame: (kind, text, data); the data lands in `into` when its length matches (see _recv_exact)."""
    kind, tlen, dlen = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    text = bytes(_recv_exact(sock, tlen, deadline)).decode() if tlen else ""
    return kind, text, (_recv_exact(sock, dlen, deadline, into) if dlen else bytearray())


def _env_int(name: str, default: int | None) -> int:
    v = os.environ.get(name)
    if v is None:
        if default is None:
            raise ConfigError(f"{name} is not set: launch the ranks with tolk_core.collectives.launch (or set "
                              f"{', '.join(ENV)})")
        return default
    try:
        return int(v)
    except ValueError:
        raise ConfigError(f"{name}={v!r} must be an integer") from None


class TcpGroup(ProcessGroup):
    """The reference ProcessGroup over TCP sockets (see the module docstring)."""

    name = "TCP"
    persistent = True

    def __init__(self, rank: int, size: int, timeout: float, socks: dict[int, socket.socket]):
        super().__init__(rank, size, timeout)
        self._socks = socks  # hub: rank -> socket; others: {0: socket to the hub}

    @classmethod
    def join(cls, timeout: float) -> TcpGroup:
        """Join the job described by TOLK_RANK, TOLK_WORLD_SIZE (unset: a group of one), TOLK_MASTER_ADDR (default
        127.0.0.1) and TOLK_MASTER_PORT (default 29517); rank 0 listens there, the others connect."""
        size = _env_int("TOLK_WORLD_SIZE", 1)
        rank = _env_int("TOLK_RANK", 0 if size == 1 else None)
        if not 0 <= rank < size:
            raise ConfigError(f"TOLK_RANK={rank} must be in 0..{size - 1} (TOLK_WORLD_SIZE={size})")
        addr = os.environ.get("TOLK_MASTER_ADDR", DEFAULT_ADDR)
        port = _env_int("TOLK_MASTER_PORT", DEFAULT_PORT)
        deadline = time.monotonic() + timeout
        if size == 1:
            return cls(0, 1, timeout, {})
        socks = _accept(addr, port, size, deadline) if rank == 0 else _connect(addr, port, rank, size, deadline)
        return cls(rank, size, timeout, socks)

    def close(self) -> None:
        for s in self._socks.values():
            with contextlib.suppress(OSError):
                s.close()
        self._socks = {}
        super().close()

    # ------------------------------------------------------------ one round

    def _fail(self, message: str, timed_out: bool = False) -> CollectiveError:
        """Tell every rank still connected (the hub) and close; the error this rank raises."""
        if self.rank == 0:
            for s in self._socks.values():
                with contextlib.suppress(OSError):
                    _send(s, ABORT, message, deadline=time.monotonic() + 1.0)
        self.close()
        return (CollectiveTimeoutError if timed_out else CollectiveError)(f"{self.name}: {message}")

    def _round(self, text: str, data: np.ndarray | None, kind: int = DATA, answer: Answer | None = None,
               into: memoryview | None = None) -> Raw:
        """Send (text, data) to the hub and return this rank's answer; the hub collects every rank's frame, checks
        the texts agree and sends each rank `answer(datas)[rank]`. A rank above 0 receives its answer into
        `into` when it is given and the answer's length (then returns it); the hub returns its own reply as
        `answer` made it (no copy: an answer that writes `into` itself returns it)."""
        deadline = time.monotonic() + self.timeout
        mv: memoryview | bytes = as_bytes(data) if data is not None and data.size else b""
        if self.rank != 0:
            hub = self._socks[0]
            try:
                _send(hub, kind, text, mv, deadline)
                got, msg, out = _recv(hub, deadline + 1.0, into)  # the hub times out first: its abort says who
            except _Gone:
                raise self._fail(self._hub_said("rank 0 closed the connection (it failed or exited)")) from None
            except TimeoutError:
                raise self._fail(f"no answer from rank 0 to {text} within {self.timeout:g}s "
                                 "(TOLK_COLLECTIVES_TIMEOUT)", True) from None
            except OSError as e:
                raise self._fail(self._hub_said(f"lost the connection to rank 0 ({e})")) from None
            if got == ABORT:
                self.close()
                raise CollectiveError(f"{self.name}: {msg}")
            return out
        datas: list[Raw] = [mv]  # its own data, read in place
        texts, problem = [text], "" if kind == DATA else text
        for r in range(1, self.size):
            try:
                k, t, d = _recv(self._socks[r], deadline)
            except _Gone:
                raise self._fail(f"rank {r} closed the connection during {text} (it failed or exited)") from None
            except TimeoutError:
                raise self._fail(f"rank {r} did not join {text} within {self.timeout:g}s "
                                 "(TOLK_COLLECTIVES_TIMEOUT)", True) from None
            except OSError as e:
                raise self._fail(f"lost the connection to rank {r} during {text} ({e})") from None
            if k == ABORT and not problem:
                problem = t
            texts.append(t)
            datas.append(d)
        if not problem and (odd := [r for r, t in enumerate(texts) if t != text]):
            problem = f"ranks disagree: rank 0 called {text} but rank {odd[0]} called {texts[odd[0]]}"
        if problem:
            raise self._fail(problem)
        replies = answer(datas) if answer is not None else [b""] * self.size
        for r in range(1, self.size):
            try:
                _send(self._socks[r], DATA, "", replies[r], deadline)
            except OSError as e:
                raise self._fail(f"lost the connection to rank {r} during {text} ({e})") from None
        return replies[0]

    def _hub_said(self, otherwise: str) -> str:
        """The abort the hub sent before closing (it names the rank at fault: a send to a closed hub fails before
        this rank reads it), else `otherwise`."""
        try:
            kind, text, _ = _recv(self._socks[0], time.monotonic() + 0.5)
        except (_Gone, OSError):
            return otherwise
        return text if kind == ABORT else otherwise

    def _abort(self, message: str) -> None:
        if self.closed:
            return
        with contextlib.suppress(CollectiveError):
            self._round(message, None, ABORT)
        self.close()

    # ------------------------------------------------------------ the operations

    def _arrays(self, datas: list[Raw], a: np.ndarray) -> list[np.ndarray]:
        return [np.frombuffer(d, dtype=a.dtype).reshape(a.shape) if a.size else np.empty(a.shape, a.dtype)
                for d in datas]

    def _result(self, raw: Raw, a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The answer's bytes as an array of `shape`: a view of a received bytearray or of an array the hub made
        (both this call's own), copied only when read-only (bytes)."""
        n = int(np.prod(shape))
        arr = (np.frombuffer(raw, dtype=a.dtype) if n else np.empty(0, a.dtype)).reshape(shape)
        return arr if arr.flags.writeable else arr.copy()

    def _allreduce(self, a: np.ndarray, op: str) -> np.ndarray:
        if self.size == 1:
            return a.copy()

        def answer(datas: list[Raw]) -> list[memoryview | bytes]:
            r = as_bytes(reduce_arrays(self._arrays(datas, a), op)) if a.size else b""
            return [r] * self.size
        return self._result(self._round(describe(f"allreduce_{op}", a), a, answer=answer), a, a.shape)

    def _allreduce_into(self, a: np.ndarray, op: str, out: np.ndarray) -> None:
        """The hub folds into `out`, the others receive into it: no array made, no copy of the result."""
        if self.size == 1 or not a.size:
            if out is not a:
                np.copyto(out, a)
            if self.size == 1:
                return
        dst = as_bytes(out) if a.size else None

        def answer(datas: list[Raw]) -> list[memoryview | bytes]:
            if dst is None:
                return [b""] * self.size
            reduce_arrays(self._arrays(datas, a), op, out)
            return [dst] * self.size
        raw = self._round(describe(f"allreduce_{op}", a), a, answer=answer, into=dst)
        if dst is not None and raw is not dst:  # (only an answer of a length this call did not expect)
            np.copyto(out, self._result(raw, a, a.shape))

    def _allgather(self, a: np.ndarray) -> np.ndarray:
        if self.size == 1:
            return a[None].copy()

        def answer(datas: list[Raw]) -> list[memoryview | bytes]:
            whole = b"".join(datas)
            return [whole] * self.size
        return self._result(self._round(describe("allgather", a), a, answer=answer), a, (self.size, *a.shape))

    def _broadcast(self, a: np.ndarray, root: int) -> np.ndarray:
        if self.size == 1:
            return a.copy()
        raw = self._round(describe("broadcast", a, f"root={root}"), a if self.rank == root else None,
                          answer=lambda datas: [bytes(datas[root])] * self.size)
        return self._result(raw, a, a.shape)

    def _reduce_scatter(self, a: np.ndarray, op: str) -> np.ndarray:
        k = a.shape[0] // self.size
        if self.size == 1:
            return a.copy()

        def answer(datas: list[Raw]) -> list[memoryview | bytes]:
            whole = reduce_arrays(self._arrays(datas, a), op)
            return [as_bytes(whole[r * k:(r + 1) * k].copy(order="C")) if whole.size else b""
                    for r in range(self.size)]
        return self._result(self._round(describe(f"reduce_scatter_{op}", a), a, answer=answer), a, (k, *a.shape[1:]))

    def _barrier(self) -> None:
        if self.size > 1:
            self._round("barrier()", None)

    def _allreduce_init(self, x: np.ndarray, op: str) -> PersistentOp:
        return _TcpPersistent(self, x, op)


class _TcpPersistent(PersistentOp):
    """A persistent allreduce over TCP: start() snapshots the bound input (so later writes to it wait for the
    next start), wait() runs the round into the same output array."""

    def __init__(self, group: TcpGroup, x: np.ndarray, op: str):
        self.group, self.x, self.op = group, x, op
        self.out = np.empty_like(x)
        self._snap: np.ndarray | None = None

    def start(self) -> None:
        if self._snap is not None:
            raise CollectiveError("persistent allreduce: start() called twice without wait()")
        self._snap = self.x.copy()

    def wait(self) -> np.ndarray:
        if self._snap is None:
            raise CollectiveError("persistent allreduce: wait() without start()")
        snap, self._snap = self._snap, None
        self.group.allreduce(snap, self.op, out=self.out)
        return self.out


def _accept(addr: str, port: int, size: int, deadline: float) -> dict[int, socket.socket]:
    """Rank 0: listen on addr:port and take one connection from each other rank (hello: rank and size)."""
    srv = socket.create_server((addr, port), reuse_port=False, backlog=size)
    socks: dict[int, socket.socket] = {}
    try:
        while len(socks) < size - 1:
            srv.settimeout(max(deadline - time.monotonic(), 1e-3))
            try:
                conn, _ = srv.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _, text, _ = _recv(conn, deadline)
            except TimeoutError:
                raise CollectiveTimeoutError(f"TCP: rank 0 waited past the timeout for ranks "
                                             f"{sorted(set(range(1, size)) - set(socks))} to connect to "
                                             f"{addr}:{port} (TOLK_COLLECTIVES_TIMEOUT)") from None
            r, n = (int(v) for v in text.split())
            if n != size or r in socks or not 0 < r < size:
                msg = f"rank {r} with TOLK_WORLD_SIZE={n} cannot join a group of {size} (ranks joined: {sorted(socks)})"
                _send(conn, ABORT, msg)
                raise CollectiveError(f"TCP: {msg}")
            socks[r] = conn
        for conn in socks.values():
            _send(conn, HELLO, "welcome", deadline=deadline)
    except BaseException:
        for conn in socks.values():
            conn.close()
        raise
    finally:
        srv.close()
    return socks


def _connect(addr: str, port: int, rank: int, size: int, deadline: float) -> dict[int, socket.socket]:
    """A rank above 0: connect to rank 0 (retrying until it listens), say hello, wait for the welcome."""
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=max(deadline - time.monotonic(), 1e-3))
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise CollectiveTimeoutError(f"TCP: rank {rank} could not reach rank 0 at {addr}:{port} before the "
                                             f"timeout ({e}); is rank 0 running? (TOLK_MASTER_ADDR/PORT)") from None
            time.sleep(0.02)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _send(sock, HELLO, f"{rank} {size}", deadline=deadline)
    try:
        kind, text, _ = _recv(sock, deadline)
    except (_Gone, TimeoutError):
        sock.close()
        raise CollectiveTimeoutError(f"TCP: rank {rank}: rank 0 at {addr}:{port} did not welcome it before the "
                                     "timeout") from None
    if kind == ABORT:
        sock.close()
        raise CollectiveError(f"TCP: {text}")
    return {0: sock}
