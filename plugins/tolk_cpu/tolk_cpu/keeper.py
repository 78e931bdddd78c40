"""CoreKeeper: the cores of a CPU device's team kept awake for a moment after each parallel kernel.

Tolk's OpenMP threads sleep as soon as a parallel loop ends (``OMP_WAIT_POLICY=PASSIVE``: threads that spin hold
cores another process's threads need; docs/performance.md, "Threads that sleep"). With nothing else to run, the
core a sleeping worker is bound to (binding.py) then goes idle, and an idle virtual CPU is halted by its host: the
next kernel's worker there started 46-65 us after the kernel, where it starts after 4-6 us on a core some thread
keeps running (docs/performance.md, "Cores kept awake").

A keeper is one native thread per worker core, bound to that core, that yields it (``sched_yield``) from the start
of each parallel kernel until CPU_KEEP_AWAKE seconds after its end, then sleeps. The core stays awake, and a worker
woken on it runs at the keeper's next yield. A yielding thread still gets its fair share of a core against a
thread that has run more than it, so a keeper also reads its clock: a yield that came back more than GAP_SECONDS
later (a scheduler slice went to another thread) while no kernel of its device started, ended or ran means the
core has other work, and the keeper leaves it alone for BACKOFF_SECONDS, then looks again if the window is open.

Keepers are made with a device's binding (the device owns its cores), on its first parallel launch. Threads do
not survive a fork: a forked child drops its parent's and makes none (its kernels run on one thread, teams.py).
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any

from tolk_core import config
from tolk_cpu import teams
from tolk_cpu.helpers import HelperThreads

GAP_SECONDS = 500e-6  # a yield that came back later than this let another thread run a scheduler slice
BACKOFF_SECONDS = 50e-3  # how long a keeper that found its core wanted leaves it alone

KEEPER_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
  _Atomic long long until;   /* ns: keep the cores awake until then */
  _Atomic long long resume;  /* ns: a keeper that found its core wanted leaves it alone until then */
  _Atomic long running;      /* the device's parallel kernels running now */
  _Atomic long touches;      /* kernels started and ended so far */
  _Atomic int sleepers;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  long long window, gap, backoff;
} tolk_keeper;

typedef struct { tolk_keeper* k; int core; } tolk_keeper_arg;

static long long tolk_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* yields the core until the window closes, or until a yield came back late with no kernel of the device
   started, ended or running meanwhile: another thread ran here, so this core has work of its own (back off:
   look again after the back-off, if the window is still open) */
static void tolk_keep(tolk_keeper* k) {
  long long last = tolk_ns();
  long seen = atomic_load(&k->touches);
  for (;;) {
    sched_yield();
    long long t = tolk_ns();
    long now_seen = atomic_load(&k->touches);
    if (t - last > k->gap && now_seen == seen && atomic_load(&k->running) == 0) {
      atomic_store(&k->resume, t + k->backoff);
      return;
    }
    if (t >= atomic_load(&k->until)) return;
    last = t;
    seen = now_seen;
  }
}

static void* tolk_keeper_run(void* p) {
  tolk_keeper_arg a = *(tolk_keeper_arg*)p;
  free(p);
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(a.core, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
  pthread_setname_np(pthread_self(), "tolk-keeper");  /* what tools (and the tests) see in /proc */
  tolk_keeper* k = a.k;
  for (;;) {
    pthread_mutex_lock(&k->mu);
    atomic_fetch_add(&k->sleepers, 1);  /* before the check: a touch after it sees a sleeper and wakes it */
    for (;;) {
      long long t = tolk_ns(), until = atomic_load(&k->until), resume = atomic_load(&k->resume);
      if (t < until && t >= resume) break;
      if (t < until) {  /* backing off inside the window: look again when the back-off ends */
        struct timespec at = { resume / 1000000000LL, resume % 1000000000LL };
        pthread_cond_timedwait(&k->wake, &k->mu, &at);
      } else {
        pthread_cond_wait(&k->wake, &k->mu);
      }
    }
    atomic_fetch_sub(&k->sleepers, 1);
    pthread_mutex_unlock(&k->mu);
    tolk_keep(k);
  }
  return 0;
}

/* keepers for `cores[0..n)` (window, gap, backoff in seconds); 0 where one could not be started */
void* tolk_keeper_new(const int* cores, int n, double window, double gap, double backoff) {
  tolk_keeper* k = (tolk_keeper*)calloc(1, sizeof(tolk_keeper));
  if (!k) return 0;
  pthread_condattr_t attr;  /* timed waits on the clock tolk_ns reads */
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_mutex_init(&k->mu, 0);
  pthread_cond_init(&k->wake, &attr);
  k->window = (long long)(window * 1e9);
  k->gap = (long long)(gap * 1e9);
  k->backoff = (long long)(backoff * 1e9);
  for (int i = 0; i < n; i++) {
    tolk_keeper_arg* a = (tolk_keeper_arg*)malloc(sizeof(tolk_keeper_arg));
    pthread_t t;
    if (!a) return 0;
    a->k = k;
    a->core = cores[i];
    if (pthread_create(&t, 0, tolk_keeper_run, a) != 0) { free(a); return 0; }
    pthread_detach(t);
  }
  return k;
}

/* a parallel kernel of the device starts (running +1) or ended (-1): the cores are kept awake for the window
   from now (from the start too: a sleeping keeper wakes as late as the kernel's workers, and is up by the
   kernel's end) */
void tolk_keeper_touch(void* kp, int running) {
  tolk_keeper* k = (tolk_keeper*)kp;
  long long t = tolk_ns();
  atomic_store(&k->until, t + k->window);
  atomic_fetch_add(&k->touches, 1);
  atomic_fetch_add(&k->running, running);
  if (atomic_load(&k->sleepers) > 0 && t >= atomic_load(&k->resume)) {
    pthread_mutex_lock(&k->mu);
    pthread_cond_broadcast(&k->wake);
    pthread_mutex_unlock(&k->mu);
  }
}
"""


class CoreKeeper:
    """Keepers for `cores` (module docstring) of `device`: `begin` / `end` around each parallel launch."""

    def __init__(self, device: Any, cores: tuple[int, ...], window: float):
        lib = device.load(device.compiler.compile_cached(KEEPER_C))
        new = lib.tolk_keeper_new
        new.restype = ctypes.c_void_p
        new.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.c_double]
        handle = new((ctypes.c_int * len(cores))(*cores), len(cores), window, GAP_SECONDS, BACKOFF_SECONDS)
        if not handle:
            raise OSError("its threads could not be started")
        touch = lib.tolk_keeper_touch
        touch.restype, touch.argtypes = None, [ctypes.c_void_p, ctypes.c_int]
        # one native call before and one after each launch (~0.3 us each)
        self.begin = functools.partial(touch, handle, 1)
        self.end = functools.partial(touch, handle, -1)
        self.alive = True  # False in a forked child, where its threads do not exist

    def orphan(self) -> None:
        """In a forked child (helpers.py): nothing to let go of (the next launch makes new keepers)."""


_keepers = HelperThreads("the CPU device's core keepers", "its cores sleep between parallel kernels (set "
                         "CPU_KEEP_AWAKE=0 to ask for that)")


def keeper_for(device: Any, cores: tuple[int, ...]) -> CoreKeeper | None:
    """Keepers for a device's worker `cores`, or None: CPU_KEEP_AWAKE is 0, no worker cores, a forked child whose
    kernels run on one thread (teams.py), or they could not be made (warned once; kernels then run as with
    CPU_KEEP_AWAKE=0)."""
    window = config.get("CPU_KEEP_AWAKE")
    if not window or not cores or teams.forked():
        return None
    return _keepers.make(lambda: CoreKeeper(device, cores, window))
