"""CPUQueue: a CPU device's in-order launch queue, run by a native thread of its own.

A submitted batch of single-threaded kernels (`CPUGraph.submit`: an eager realize's replay) is handed to the
queue and the caller goes on: Python builds the next graph while the kernels run on another core, as an OpenCL
or CUDA device's launches overlap the host's work. Everything else that touches the device's memory waits for
the queue first, so the device behaves as if each launch had run where it was asked for:

- copies in and out and host views of its memory (`CPUAllocator`), a kernel launched by itself
  (`CPUProgram`), a graph called rather than submitted (a JIT's replay, a timed one), and `synchronize` wait
  (`wait`);
- the buffers a queued batch reads and writes stay referenced until it finished (`push`'s `keep`): a Buffer the
  front end drops meanwhile keeps its memory, and a freed handle handed out again is only written in queue
  order (every write is a queued batch or waits for the queue);
- a batch copies its pointer and argument tables when it is queued: a later rebind of the same graph does not
  change what an earlier replay reads.

The worker is a pthread in C (no Python, so it never waits for the GIL); the queue holds at most CAPACITY
batches, a push beyond that waits for the oldest. Batches whose kernels start OpenMP teams are not queued: a
team started from the worker would share the cores with the Python thread (docs/performance.md, "Threads that
share a core"); nor are batches touching memory shared with numpy or torch (their writes and reads through
those arrays cannot be made to wait: docs/interop.md). Only the host's one CPU device queues (`queue_for`):
virtual devices (CPU_DEVICES > 1) read each other's memory directly, with no order between two queues.
CPU_ASYNC=0 turns the queue off. Before a fork and at exit the queues are drained (a child makes its own).
"""
from __future__ import annotations

import ctypes
import threading
from collections import deque
from typing import Any

from tolk_core import config
from tolk_cpu.helpers import HelperThreads

CAPACITY = 16
# how long the worker waiting for a batch, and a caller waiting for the worker, yield their cores before they
# sleep (a thread woken from sleep starts tens of microseconds late; see tolk_queue_run and tolk_queue_wait)
SPIN_SECONDS = 1e-3

QUEUE_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
typedef void (*tolk_driver)(void**, const int*, void**);
typedef struct { tolk_driver fn; void** b; const int* v; void** f; } tolk_item;
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t more, done;  /* a batch was pushed; a batch finished */
  tolk_item items[CAPACITY];
  long pushed, finished;      /* batches pushed and finished so far: the worker runs batch `finished` next */
  pthread_t thread;
} tolk_queue;

static double tolk_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* the worker: every batch in push order, one at a time. Out of work, it yields its core for up to SPIN
   seconds before it sleeps: an eager step pushes its next batch within a millisecond or so, and a sleeping
   thread would start it late */
static void* tolk_queue_run(void* arg) {
  tolk_queue* q = (tolk_queue*)arg;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    double until = tolk_now() + SPIN;
    while (q->finished == q->pushed && tolk_now() < until) {
      pthread_mutex_unlock(&q->mu);
      sched_yield();
      pthread_mutex_lock(&q->mu);
    }
    while (q->finished == q->pushed) pthread_cond_wait(&q->more, &q->mu);
    tolk_item it = q->items[q->finished % CAPACITY];
    pthread_mutex_unlock(&q->mu);
    it.fn(it.b, it.v, it.f);
    pthread_mutex_lock(&q->mu);
    q->finished++;
    pthread_cond_broadcast(&q->done);
  }
  return 0;
}

/* a new queue with its worker thread started; 0 where the thread could not be made */
void* tolk_queue_new(void) {
  tolk_queue* q = (tolk_queue*)calloc(1, sizeof(tolk_queue));
  if (!q) return 0;
  pthread_mutex_init(&q->mu, 0);
  pthread_cond_init(&q->more, 0);
  pthread_cond_init(&q->done, 0);
  if (pthread_create(&q->thread, 0, tolk_queue_run, q) != 0) { free(q); return 0; }
  pthread_detach(q->thread);
  return q;
}

/* queues fn(b, v, f) after every batch pushed before (waiting while CAPACITY are unfinished); returns its
   number (1, 2, ...) */
long tolk_queue_push(void* qp, void* fn, void** b, const int* v, void** f) {
  tolk_queue* q = (tolk_queue*)qp;
  pthread_mutex_lock(&q->mu);
  while (q->pushed - q->finished >= CAPACITY) pthread_cond_wait(&q->done, &q->mu);
  tolk_item it = { (tolk_driver)fn, b, v, f };
  q->items[q->pushed % CAPACITY] = it;
  long n = ++q->pushed;
  pthread_cond_signal(&q->more);
  pthread_mutex_unlock(&q->mu);
  return n;
}

/* blocks until batch n (and every one before it) finished; returns how many finished. The caller yields its
   core for up to SPIN seconds before it sleeps: a sleeping thread wakes tens of microseconds late, and most
   waits are for a batch of small kernels. (Running a batch here instead of the worker, when the worker has
   not started it, was slower: the kernels of one step then ran on two cores, their data moving between.) */
long tolk_queue_wait(void* qp, long n) {
  tolk_queue* q = (tolk_queue*)qp;
  pthread_mutex_lock(&q->mu);
  double until = tolk_now() + SPIN;
  while (q->finished < n && tolk_now() < until) {
    pthread_mutex_unlock(&q->mu);
    sched_yield();
    pthread_mutex_lock(&q->mu);
  }
  while (q->finished < n) pthread_cond_wait(&q->done, &q->mu);
  long done = q->finished;
  pthread_mutex_unlock(&q->mu);
  return done;
}

long tolk_queue_finished(void* qp) {
  tolk_queue* q = (tolk_queue*)qp;
  pthread_mutex_lock(&q->mu);
  long done = q->finished;
  pthread_mutex_unlock(&q->mu);
  return done;
}
""".replace("CAPACITY", str(CAPACITY)).replace("SPIN", repr(SPIN_SECONDS))


class CPUQueue:
    """One device's queue (module docstring): `push` a batch, `wait` for all of them."""

    def __init__(self, device: Any):
        lib = device.load(device.compiler.compile_cached(QUEUE_C))
        for name, res, args in (("tolk_queue_new", ctypes.c_void_p, []),
                                ("tolk_queue_push", ctypes.c_long, [ctypes.c_void_p] * 5),
                                ("tolk_queue_wait", ctypes.c_long, [ctypes.c_void_p, ctypes.c_long]),
                                ("tolk_queue_finished", ctypes.c_long, [ctypes.c_void_p])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self._push, self._wait, self._finished = lib.tolk_queue_push, lib.tolk_queue_wait, lib.tolk_queue_finished
        self._q = lib.tolk_queue_new()
        if not self._q:
            raise OSError("the CPU launch queue's thread could not be started")
        self._lock = threading.Lock()
        self._pending: deque[tuple[int, Any]] = deque()  # (batch number, what it must keep alive)
        self._last = 0
        self.alive = True  # False in a forked child, where its worker does not exist

    def orphan(self) -> None:
        """In a forked child (helpers.py): what the parent queued never runs here."""
        self._pending.clear()

    def push(self, fn: int, b: Any, v: Any, f: Any, keep: Any) -> None:
        """Queue the native call fn(b, v, f) (a graph driver: addresses of its pointer, argument and function
        tables, which must stay unchanged until it ran); `keep` is referenced until then."""
        with self._lock:
            n = self._push(self._q, fn, ctypes.addressof(b), ctypes.addressof(v), ctypes.addressof(f))
            self._pending.append((n, (b, v, f, keep)))
            self._last = n
            if len(self._pending) > 8:  # drop what the worker is done with (without waiting)
                self._release(self._finished(self._q))

    def _release(self, done: int) -> None:
        while self._pending and self._pending[0][0] <= done:
            self._pending.popleft()

    def wait(self) -> None:
        """Block until every queued batch finished (the GIL is released meanwhile)."""
        if not self._pending:
            return
        with self._lock:
            if self._pending:
                self._release(self._wait(self._q, self._last))

    @property
    def busy(self) -> bool:
        """Whether some batch may still be queued or running."""
        return bool(self._pending)


def queue_for(device: Any) -> CPUQueue | None:
    """A new queue for CPU device `device` (asked only with CPU_ASYNC=1), or None where it launches on the
    calling thread: one of several virtual devices (module docstring), or a queue that could not be made (its C
    did not compile, no thread: warned once, the launches then run as with CPU_ASYNC=0). All of them are
    drained before a fork (a forked child has no worker thread: it makes its own) and at exit (queued kernels
    may write memory the interpreter frees then)."""
    if config.get("CPU_DEVICES") > 1:
        return None
    return _queues.make(lambda: CPUQueue(device))


def drain() -> None:
    """Wait for every CPU queue of this process."""
    for q in list(_queues.made):
        q.wait()


_queues = HelperThreads("the CPU launch queue", "CPU kernels run on the calling thread (set CPU_ASYNC=0 to ask for "
                        "that)", drain)
