"""The CPU device's threads: a small pool in C that splits a kernel's outer loop, its workers spinning a while between
kernels so that the next one starts at once.

Python threads cost each threaded kernel ~100 µs on this kind of machine (a 2-core VM): waking a sleeping pool thread
took ~60 µs, and waking the caller once the pool thread finished ~50 µs more, since an idle virtual core halts and an
interrupt must bring it back. Here the caller posts the kernel to workers that poll for it (for SPIN_S after their last
one, then they sleep), runs the first share itself, and polls until every worker is done."""

from __future__ import annotations

import ctypes
import os
import tempfile

SPIN_S = 1e-3  # a worker polls this long after a kernel before it sleeps: the Python between two kernels is shorter

SOURCE = r"""
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void (*gg_range_fn)(void **args, long long start, long long end);
enum { GG_MAX_THREADS = 256 };

static pthread_mutex_t gg_lock = PTHREAD_MUTEX_INITIALIZER, gg_run_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gg_wake = PTHREAD_COND_INITIALIZER, gg_done = PTHREAD_COND_INITIALIZER;
static _Atomic unsigned long gg_job;  /* bumped once per kernel posted: workers wait for it to change */
static _Atomic int gg_pending;  /* workers that have not finished the kernel posted last */
static _Atomic long gg_spin_ns;
static int gg_workers, gg_atfork;
static long gg_cores;  /* online cores, read on the first threaded call */
static unsigned long gg_born[GG_MAX_THREADS];  /* the job count when each worker started: its first one is the next */
static gg_range_fn gg_fn;  /* the kernel posted, written before gg_job is bumped and read after */
static void **gg_args;
static long long gg_size;
static int gg_threads;

static long gg_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* One poll's wait. Most polls only tell the core that this is a spin loop (on x86 `pause`): a system call on every poll
   slowed the thread doing the work on the other core by a tenth (a 64 MiB row sum took 1.34 ms instead of 1.22 on a
   2-core VM). Every 64th poll gives the core to any other thread that wants it (the caller, or a worker, when the
   machine's other cores are busy and two of ours share one). */
static inline void gg_pause(int poll) {
  if (poll % 64 == 0) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
  else __builtin_ia32_pause();
#elif defined(__aarch64__)
  else __asm__ volatile("yield");
#endif
}

/* Poll until gg_job differs from `seen` for up to spin_ns, then sleep until it does; returns the new job count. */
static unsigned long gg_wait_job(unsigned long seen, long spin_ns) {
  long deadline = gg_now_ns() + spin_ns;
  unsigned long job;
  for (int i = 1; (job = atomic_load_explicit(&gg_job, memory_order_acquire)) == seen; i++) {
    if (i % 64 == 0 && gg_now_ns() > deadline) {
      pthread_mutex_lock(&gg_lock);
      while ((job = atomic_load_explicit(&gg_job, memory_order_acquire)) == seen) pthread_cond_wait(&gg_wake, &gg_lock);
      pthread_mutex_unlock(&gg_lock);
      break;
    }
    gg_pause(i);
  }
  return job;
}

/* The caller's side: poll until every worker finished for up to spin_ns, then sleep until they have. */
static void gg_wait_done(long spin_ns) {
  long deadline = gg_now_ns() + spin_ns;
  for (int i = 1; atomic_load_explicit(&gg_pending, memory_order_acquire) != 0; i++) {
    if (i % 64 == 0 && gg_now_ns() > deadline) {
      pthread_mutex_lock(&gg_lock);
      while (atomic_load_explicit(&gg_pending, memory_order_acquire) != 0) pthread_cond_wait(&gg_done, &gg_lock);
      pthread_mutex_unlock(&gg_lock);
      return;
    }
    gg_pause(i);
  }
}

/* floor(size * part / parts), without overflowing for a loop of up to 2**63 iterations */
static long long gg_bound(long long size, int part, int parts) {
  return size / parts * part + size % parts * part / parts;
}

static void *gg_worker(void *arg) {
  int me = (int)(long)arg;
  unsigned long seen = gg_born[me];
  for (;;) {
    seen = gg_wait_job(seen, atomic_load_explicit(&gg_spin_ns, memory_order_relaxed));
    if (me < gg_threads && gg_bound(gg_size, me, gg_threads) < gg_bound(gg_size, me + 1, gg_threads))
      gg_fn(gg_args, gg_bound(gg_size, me, gg_threads), gg_bound(gg_size, me + 1, gg_threads));
    if (atomic_fetch_sub_explicit(&gg_pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&gg_lock);
      pthread_cond_signal(&gg_done);
      pthread_mutex_unlock(&gg_lock);
    }
  }
  return 0;
}

/* A forked child has none of its parent's workers: it starts its own. */
static void gg_after_fork(void) {
  static const pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  static const pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  memcpy(&gg_lock, &mutex, sizeof mutex);
  memcpy(&gg_run_lock, &mutex, sizeof mutex);
  memcpy(&gg_wake, &cond, sizeof cond);
  memcpy(&gg_done, &cond, sizeof cond);
  gg_workers = 0;
  atomic_store(&gg_pending, 0);
}

/* Run fn(args, start, end) over [0, size) in `threads` contiguous shares, the first on the calling thread. A call
   made while another runs (from a second Python thread) runs its whole loop on its own thread. */
void gg_threads_run(gg_range_fn fn, void **args, long long size, int threads, long spin_ns) {
  if (threads > GG_MAX_THREADS) threads = GG_MAX_THREADS;
  if (threads > size) threads = size;
  if (threads < 2 || pthread_mutex_trylock(&gg_run_lock) != 0) {
    fn(args, 0, size);
    return;
  }
  if (!gg_atfork) gg_atfork = 1, pthread_atfork(0, 0, gg_after_fork);
  while (gg_workers < threads - 1) {
    pthread_t t;
    gg_born[gg_workers + 1] = atomic_load(&gg_job);
    if (pthread_create(&t, 0, gg_worker, (void *)(long)(gg_workers + 1)) != 0) break;
    pthread_detach(t);
    gg_workers++;
  }
  if (threads > gg_workers + 1) threads = gg_workers + 1;
  if (!gg_cores) gg_cores = sysconf(_SC_NPROCESSORS_ONLN);  /* once: each call reads a file (~17 us on a VM) */
  if (gg_workers + 1 > gg_cores) spin_ns = 0;  /* a polling thread would hold up a working one */
  gg_fn = fn, gg_args = args, gg_size = size, gg_threads = threads;
  atomic_store_explicit(&gg_spin_ns, spin_ns, memory_order_relaxed);
  atomic_store_explicit(&gg_pending, gg_workers, memory_order_relaxed);  /* every worker answers every job */
  pthread_mutex_lock(&gg_lock);
  atomic_fetch_add_explicit(&gg_job, 1, memory_order_release);
  pthread_cond_broadcast(&gg_wake);
  pthread_mutex_unlock(&gg_lock);
  fn(args, 0, gg_bound(size, 1, threads));
  gg_wait_done(spin_ns);
  pthread_mutex_unlock(&gg_run_lock);
}
"""


class CThreads:
    """The pool, compiled by the CPU device's compiler on first use (and cached on disk like a kernel)."""

    def __init__(self, compiler):
        with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
            f.write(compiler.compile_cached(SOURCE))
        self.lib = ctypes.CDLL(f.name)
        os.unlink(f.name)
        self.run_fn = self.lib.gg_threads_run
        self.run_fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_long]
        self.run_fn.restype = None

    def run(self, range_fn: int, args: ctypes.Array, size: int, threads: int) -> None:
        """range_fn(args, start, end) (a kernel's `_range` entry) over [0, size) in `threads` contiguous shares; the
        workers poll between kernels only while there is a core for each of them and the caller."""
        self.run_fn(range_fn, args, size, threads, int(SPIN_S * 1e9))
