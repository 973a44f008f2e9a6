/*
 * shmatari/sync.h -- atomics and waits on words in shared memory.
 *
 * Header-only, C11 or C++11, GCC or Clang (the __atomic builtins work on
 * plain integers in both languages, so the layout structs need no _Atomic).
 *
 * Protocol for a word `seq` that one process sleeps on and others bump:
 *   waiter:   spin a little while seq == expected; then store sleeping = 1
 *             (seq_cst), re-read seq (seq_cst) and only if it is still
 *             `expected` sleep in the kernel until it changes; sleeping = 0.
 *   notifier: bump seq (seq_cst), then read sleeping (seq_cst) and wake the
 *             word only if it is 1.
 * Both sides store then load with sequential consistency, so at least one
 * sees the other's store: the waiter never sleeps through a bump, and the
 * notifier makes no system call when nobody sleeps.
 *
 * Kernel waits: Linux futex (FUTEX_WAIT / FUTEX_WAKE, not the private
 * variants, since the word is shared between processes); macOS __ulock with
 * UL_COMPARE_AND_WAIT_SHARED; elsewhere a sleep that backs off from 50 us
 * to 1 ms (correct, but slower to wake).
 */
#ifndef SHMATARI_SYNC_H
#define SHMATARI_SYNC_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#define SHMATARI_WAIT_FUTEX 1
#elif defined(__APPLE__)
#define SHMATARI_WAIT_ULOCK 1
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <sched.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Results of shmatari_wait_change. */
#define SHMATARI_WAIT_CHANGED 0  /* the word no longer holds `expected` */
#define SHMATARI_WAIT_TIMEOUT 1  /* timeout_ns passed; it still does */
#define SHMATARI_WAIT_EINTR 2    /* a signal arrived; the caller decides */

static inline uint32_t shmatari_load_acquire(const uint32_t *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline uint64_t shmatari_load_acquire64(const uint64_t *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void shmatari_store_release(uint32_t *p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline void shmatari_store_release64(uint64_t *p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
/* Returns the value before the add. */
static inline uint32_t shmatari_fetch_add(uint32_t *p, uint32_t v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline uint64_t shmatari_fetch_add64(uint64_t *p, uint64_t v) {
  return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}
/* Compare-and-swap (seq_cst): stores `desired` if *p holds `expected`.
 * Returns the value *p held before, so the swap happened iff it equals
 * `expected`. */
static inline int32_t shmatari_cas_i32(int32_t *p, int32_t expected,
                                       int32_t desired) {
  __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
  return expected;
}

static inline uint32_t shmatari_cas_u32(uint32_t *p, uint32_t expected,
                                        uint32_t desired) {
  __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
  return expected;
}

static inline void shmatari_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#if defined(SHMATARI_WAIT_ULOCK)
/* libSystem's private but stable wait-on-address (used by libc++). */
extern int __ulock_wait(uint32_t operation, void *addr, uint64_t value,
                        uint32_t timeout_us);
extern int __ulock_wake(uint32_t operation, void *addr, uint64_t wake_value);
#define SHMATARI_UL_COMPARE_AND_WAIT_SHARED 3u
#define SHMATARI_ULF_WAKE_ALL 0x00000100u
#endif

/* Sleeps while *word == expected, at most timeout_ns (< 0: no limit).
 * Returns SHMATARI_WAIT_CHANGED, _TIMEOUT or _EINTR; may return CHANGED
 * spuriously, so callers re-check their condition. */
static inline int shmatari_kernel_wait(uint32_t *word, uint32_t expected,
                                       int64_t timeout_ns) {
#if defined(SHMATARI_WAIT_FUTEX)
  struct timespec ts, *tsp = NULL;
  if (timeout_ns >= 0) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000);
    ts.tv_nsec = (long)(timeout_ns % 1000000000);
    tsp = &ts;
  }
  long r = syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, NULL, 0);
  if (r == 0) return SHMATARI_WAIT_CHANGED;
  if (errno == ETIMEDOUT) return SHMATARI_WAIT_TIMEOUT;
  if (errno == EINTR) return SHMATARI_WAIT_EINTR;
  return SHMATARI_WAIT_CHANGED; /* EAGAIN: the word had already changed */
#elif defined(SHMATARI_WAIT_ULOCK)
  uint32_t us = 0; /* 0 means no limit */
  if (timeout_ns >= 0) {
    int64_t t = timeout_ns / 1000;
    us = t < 1 ? 1 : (t > 0xFFFFFFFF ? 0xFFFFFFFFu : (uint32_t)t);
  }
  int r = __ulock_wait(SHMATARI_UL_COMPARE_AND_WAIT_SHARED, word, expected, us);
  if (r >= 0) return SHMATARI_WAIT_CHANGED;
  if (errno == ETIMEDOUT) return SHMATARI_WAIT_TIMEOUT;
  if (errno == EINTR) return SHMATARI_WAIT_EINTR;
  return SHMATARI_WAIT_CHANGED;
#else
  /* Portable fallback: sleep in growing steps until the word changes. */
  int64_t slept = 0, step = 50000;
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == expected) {
    if (timeout_ns >= 0 && slept >= timeout_ns) return SHMATARI_WAIT_TIMEOUT;
    struct timespec ts = {0, (long)step};
    if (nanosleep(&ts, NULL) != 0 && errno == EINTR) return SHMATARI_WAIT_EINTR;
    slept += step;
    if (step < 1000000) step *= 2;
  }
  return SHMATARI_WAIT_CHANGED;
#endif
}

/* Wakes every process sleeping on word. */
static inline void shmatari_kernel_wake(uint32_t *word) {
#if defined(SHMATARI_WAIT_FUTEX)
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
#elif defined(SHMATARI_WAIT_ULOCK)
  __ulock_wake(SHMATARI_UL_COMPARE_AND_WAIT_SHARED | SHMATARI_ULF_WAKE_ALL,
               word, 0);
#else
  (void)word;
#endif
}

static inline int64_t shmatari_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin modes for shmatari_wait_change. */
#define SHMATARI_SPIN_PAUSE 0 /* busy-poll with the CPU's pause hint: for a
                                 waiter that has a core to itself */
#define SHMATARI_SPIN_YIELD 1 /* poll with sched_yield(): gives the core to any
                                 runnable process, for oversubscribed cores */

/* shmatari_wait_change, also watching a second word while it polls: if
 * watch is not NULL, *watch_ns becomes the time *watch was first seen to
 * differ from watch_seen (at the start, or while polling), or -1 if it was
 * not before the poll ended. The watch only reports; it never ends the
 * wait. (A worker watches main_seq, to tell its wait for the other workers
 * of a round from its wait for the client.) */
static inline int shmatari_wait_change_watching(
    uint32_t *word, uint32_t expected, uint32_t *sleeping, int64_t spin_ns,
    int spin_mode, int64_t timeout_ns, const uint32_t *watch,
    uint32_t watch_seen, int64_t *watch_ns) {
  const int64_t start = shmatari_now_ns();
  if (watch != NULL)
    *watch_ns =
        __atomic_load_n(watch, __ATOMIC_ACQUIRE) != watch_seen ? start : -1;
  if (spin_ns > 0) {
    const int64_t until = start + spin_ns;
    for (unsigned i = 1;; i++) {
      if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != expected)
        return SHMATARI_WAIT_CHANGED;
      if (watch != NULL && *watch_ns < 0 &&
          __atomic_load_n(watch, __ATOMIC_ACQUIRE) != watch_seen)
        *watch_ns = shmatari_now_ns();
      if (spin_mode == SHMATARI_SPIN_YIELD) {
        sched_yield();
      } else {
        shmatari_cpu_relax();
        if (i % 64) continue;
      }
      if (shmatari_now_ns() >= until) break;
    }
  }
  __atomic_store_n(sleeping, 1u, __ATOMIC_SEQ_CST);
  int r = SHMATARI_WAIT_CHANGED;
  if (__atomic_load_n(word, __ATOMIC_SEQ_CST) == expected)
    r = shmatari_kernel_wait(word, expected, timeout_ns);
  __atomic_store_n(sleeping, 0u, __ATOMIC_SEQ_CST);
  return r;
}

/* The waiter's side of the protocol above: returns once *word != expected
 * (SHMATARI_WAIT_CHANGED), or after timeout_ns of sleep (_TIMEOUT), or on a
 * signal (_EINTR). It polls for up to spin_ns first (0: sleep at once),
 * in spin_mode, then sleeps in the kernel. */
static inline int shmatari_wait_change(uint32_t *word, uint32_t expected,
                                       uint32_t *sleeping, int64_t spin_ns,
                                       int spin_mode, int64_t timeout_ns) {
  return shmatari_wait_change_watching(word, expected, sleeping, spin_ns,
                                       spin_mode, timeout_ns, NULL, 0, NULL);
}

/* The notifier's side: bump *word by one, wake the waiter if it sleeps. */
static inline void shmatari_notify(uint32_t *word, uint32_t *sleeping) {
  __atomic_fetch_add(word, 1u, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(sleeping, __ATOMIC_SEQ_CST)) shmatari_kernel_wake(word);
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_SYNC_H */
