/*
 * shmatari/shmatari.h -- attach to a running shmatari env pool from C or C++.
 *
 * Header-only, C11 or C++11, POSIX (Linux, macOS). No Python is needed on
 * the client side: `shmatari serve GAME --name NAME` runs the emulators, and
 * this header maps the pool's shared-memory segment and drives it through
 * its words, with the same protocol (and the same functions) as shmatari's
 * own Python client. The layout is in shmatari/layout.h, the waits in
 * shmatari/sync.h; docs/layout.md describes both field by field.
 *
 * Build: C:   cc -std=gnu11 -I csrc/include my_trainer.c
 *             (with -std=c11, include this header before any other, so
 *             that it can ask for the POSIX declarations it uses)
 *        C++: g++ -std=c++17 -I csrc/include my_trainer.cpp
 * On glibc older than 2.34 and on other systems, shm_open may need -lrt.
 *
 * Use:
 *   shmatari_client c;
 *   if (shmatari_attach(&c, "demo", 10 * SHMATARI_SECOND) != SHMATARI_OK) {
 *     fprintf(stderr, "%s\n", c.error);  // the code's meaning, and what to do
 *     return 1;
 *   }
 *   shmatari_reset(&c);                   // every env; results come as a batch
 *   shmatari_batch b;
 *   while (shmatari_wait(&c, &b, SHMATARI_SECOND) == SHMATARI_OK) {
 *     // b.obs, b.reward, b.terminated, ... stay valid until the next wait
 *     shmatari_send(&c, actions, b.env_id, b.size);  // the batch's envs again
 *   }
 *   shmatari_detach(&c);
 *
 * Rules (MUST / SHOULD / MAY as in RFC 2119):
 *   - One client at a time. shmatari_attach claims the pool by writing its
 *     pid into client_pid with a compare-and-swap; it fails with
 *     SHMATARI_ERR_BUSY, naming the holder's pid, while another live
 *     process holds it. A claim left by a dead process is taken over.
 *   - On attach, the client makes the pool consistent (shmatari_recover):
 *     it waits until every command a previous client posted has been
 *     answered, then drops every result nobody took. A new client SHOULD
 *     reset the envs before stepping them (the Python client does).
 *   - A client MUST NOT post to an env whose result it has not received
 *     (shmatari_send refuses, SHMATARI_ERR_STATE).
 *   - Every wait has a timeout and checks, at least every 100 ms, that the
 *     server and its workers are alive: a dead server gives
 *     SHMATARI_ERR_SERVER_DEAD within the wait's timeout, never a hang.
 *     Liveness is judged by process id (the server's with its start time,
 *     shmatari_owner_alive), so client and server MUST share a PID
 *     namespace (and /dev/shm).
 *   - A shmatari_client is used by one thread at a time.
 */
#ifndef SHMATARI_H
#define SHMATARI_H

#if !defined(__cplusplus) && !defined(_DEFAULT_SOURCE) && !defined(_GNU_SOURCE)
#define _DEFAULT_SOURCE 1 /* kill, mmap, syscall under -std=c11 (glibc) */
#endif

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shmatari/layout.h"
#include "shmatari/sync.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: 0 on success, negative on failure. */
enum shmatari_status {
  SHMATARI_OK = 0,
  SHMATARI_ERR_NOT_FOUND = -1,    /* no segment of that name */
  SHMATARI_ERR_NOT_SHMATARI = -2, /* not a shmatari segment (magic, size,
                                     geometry) */
  SHMATARI_ERR_ABI = -3,          /* a layout ABI major version other than
                                     SHMATARI_ABI_MAJOR */
  SHMATARI_ERR_BUSY = -4,         /* another live process is the client */
  SHMATARI_ERR_TIMEOUT = -5,      /* the timeout passed */
  SHMATARI_ERR_SERVER_DEAD = -6,  /* the owner (server) process is gone */
  SHMATARI_ERR_WORKER = -7,       /* a worker failed or died */
  SHMATARI_ERR_CLOSED = -8,       /* the server is closing the pool */
  SHMATARI_ERR_INTERRUPTED = -9,  /* a signal arrived; call again to go on */
  SHMATARI_ERR_INVALID = -10,     /* a bad argument */
  SHMATARI_ERR_STATE = -11,       /* a call out of order */
  SHMATARI_ERR_SYSTEM = -12       /* open, mmap or malloc failed (see errno) */
};

#define SHMATARI_SECOND INT64_C(1000000000) /* nanoseconds */
/* Longest sleep between two liveness checks in a wait. */
#define SHMATARI_POLL_NS (SHMATARI_SECOND / 10)
/* Segment names are SHMATARI_NAME_PREFIX + the pool's name. */
#define SHMATARI_NAME_PREFIX "shmatari_"
#define SHMATARI_NAME_MAX 64 /* bytes, with the prefix and the NUL */
#define SHMATARI_MESSAGE_BYTES 512

static inline const char *shmatari_strerror(int code) {
  switch (code) {
    case SHMATARI_OK: return "ok";
    case SHMATARI_ERR_NOT_FOUND: return "no such pool";
    case SHMATARI_ERR_NOT_SHMATARI: return "not a shmatari segment";
    case SHMATARI_ERR_ABI: return "layout ABI mismatch";
    case SHMATARI_ERR_BUSY: return "another client is attached";
    case SHMATARI_ERR_TIMEOUT: return "timed out";
    case SHMATARI_ERR_SERVER_DEAD: return "the server died";
    case SHMATARI_ERR_WORKER: return "a worker failed";
    case SHMATARI_ERR_CLOSED: return "the pool is closing";
    case SHMATARI_ERR_INTERRUPTED: return "interrupted by a signal";
    case SHMATARI_ERR_INVALID: return "invalid argument";
    case SHMATARI_ERR_STATE: return "call out of order";
    case SHMATARI_ERR_SYSTEM: return "system error";
    default: return "unknown status";
  }
}

/* Writes a message to msg (if not NULL) and returns code. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline int shmatari_fail(char *msg, size_t len, int code,
                                const char *fmt, ...) {
  if (msg != NULL && len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Reads /proc/<pid>/stat (Linux): 1 if process pid runs, with *start set
 * to when it started (field 22, clock ticks since boot); 0 if it is a
 * zombie; -1 if the file cannot be read or parsed (gone, or no /proc). */
static inline int shmatari_proc_stat(int32_t pid, uint64_t *start) {
#if defined(__linux__)
  char path[32], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the name may hold spaces */
  if (p == NULL || p[1] != ' ') return -1;
  p += 2; /* field 3, the state */
  if (*p == 'Z' || *p == 'X') return 0;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (p == NULL) return -1;
    p++;
  }
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  if (end == p) return -1;
  *start = (uint64_t)v;
  return 1;
#else
  (void)pid;
  (void)start;
  return -1;
#endif
}

/* When process pid started, in clock ticks since boot (Linux: field 22 of
 * /proc/<pid>/stat, as Python's shmatari reads it too); 0 if it is gone, a
 * zombie, or unknown (no /proc). With the pid, it names one process even
 * after the pid is reused. */
static inline uint64_t shmatari_process_start(int32_t pid) {
  uint64_t start = 0;
  if (pid <= 0 || shmatari_proc_stat(pid, &start) != 1) return 0;
  return start;
}

/* The one liveness rule, for C clients and shmatari's Python alike: process
 * (pid, start) is alive if pid exists, is not a zombie, and, when start is
 * not 0, started at `start` (shmatari_process_start), so that a process that
 * took over a dead one's pid is not taken for it. A process that exists but
 * belongs to another user counts as alive. */
static inline int shmatari_process_alive(int32_t pid, uint64_t start) {
  if (pid <= 0) return 0;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
#if defined(__linux__)
  {
    uint64_t now = 0;
    int r = shmatari_proc_stat(pid, &now);
    if (r == 0) return 0;
    if (start != 0 && (r < 0 || now != start)) return 0;
  }
#endif
  return 1;
}

/* 1 if process pid exists and is not a zombie, else 0 (the rule above,
 * without a start time: for workers and clients, which the header names by
 * pid alone). */
static inline int shmatari_pid_alive(int32_t pid) {
  return shmatari_process_alive(pid, 0);
}

/* 1 if the pool's owner lives: (owner_pid, owner_start) by the rule of
 * shmatari_process_alive. A pool of ABI 1.0 or 1.1 has no owner_start (a
 * reserved word), and is judged by owner_pid alone. */
static inline int shmatari_owner_alive(const shmatari_header *h) {
  uint64_t start = h->abi_minor >= 2 ? h->owner_start : 0;
  return shmatari_process_alive(h->owner_pid, start);
}

/* ------------------------------------------------------------------------
 * The protocol, on a mapped header. shmatari's Python client calls these
 * same functions (through its extension module).
 */

/* Checks that `size` bytes at `base` hold a shmatari segment this header can
 * read: the magic, the ABI major version, and a geometry whose regions all
 * lie inside total_bytes <= size. Returns SHMATARI_OK, _ERR_NOT_SHMATARI or
 * _ERR_ABI (with a message). */
static inline int shmatari_check_header(const void *base, uint64_t size,
                                        char *msg, size_t len) {
  static const uint8_t field_bytes[SHMATARI_FIELD_COUNT] = SHMATARI_FIELD_BYTES;
  const shmatari_header *h = (const shmatari_header *)base;
  if (size < SHMATARI_HEADER_BYTES)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "segment of %llu bytes is smaller than the %u-byte "
                         "header", (unsigned long long)size,
                         SHMATARI_HEADER_BYTES);
  if (h->magic != SHMATARI_MAGIC)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: magic %#llx, expected %#llx",
                         (unsigned long long)h->magic,
                         (unsigned long long)SHMATARI_MAGIC);
  if (h->abi_major != SHMATARI_ABI_MAJOR)
    return shmatari_fail(msg, len, SHMATARI_ERR_ABI,
                         "segment has layout ABI %u.%u; this client reads ABI "
                         "%u.x: build the client against the server's "
                         "shmatari/layout.h", h->abi_major, h->abi_minor,
                         SHMATARI_ABI_MAJOR);
  if (size < h->total_bytes)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "segment of %llu bytes is smaller than its header's "
                         "total_bytes %llu", (unsigned long long)size,
                         (unsigned long long)h->total_bytes);
  int ok = h->header_bytes == SHMATARI_HEADER_BYTES && h->num_envs >= 1 &&
           h->num_workers >= 1 && h->num_workers <= h->num_envs &&
           h->batch_size >= 1 && h->batch_size <= h->num_envs &&
           h->ring_depth >= shmatari_min_ring_depth(h->num_envs, h->batch_size) &&
           h->num_actions <= SHMATARI_MAX_ACTIONS &&
           h->field_count >= SHMATARI_FIELD_COUNT &&
           h->field_count <= SHMATARI_MAX_FIELDS &&
           h->obs_frame_bytes ==
               (uint64_t)h->img_height * h->img_width * h->channels &&
           h->obs_env_bytes == h->obs_frame_bytes * h->stack_num &&
           h->env_ctrl_offset >= SHMATARI_HEADER_BYTES &&
           h->env_ctrl_offset + (uint64_t)h->num_envs * sizeof(shmatari_env_ctrl)
               <= h->total_bytes &&
           h->worker_ctrl_offset + (uint64_t)h->num_workers *
               sizeof(shmatari_worker_ctrl) <= h->total_bytes &&
           h->errors_offset + (uint64_t)h->num_workers * SHMATARI_ERROR_BYTES
               <= h->total_bytes &&
           h->slots_offset + (uint64_t)h->ring_depth * h->slot_bytes
               <= h->total_bytes &&
           h->slot_obs_offset + h->obs_env_bytes * h->batch_size <= h->slot_bytes &&
           (h->slot_final_offset == 0 ||
            h->slot_final_offset + h->slot_obs_offset +
                    h->obs_env_bytes * h->batch_size <= h->slot_bytes);
  for (unsigned f = 0; ok && f < SHMATARI_FIELD_COUNT; f++)
    ok = h->slot_field_offset[f] >= SHMATARI_SLOT_HEADER_BYTES &&
         h->slot_field_offset[f] + (uint64_t)field_bytes[f] * h->batch_size
             <= h->slot_bytes;
  if (!ok)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its header's geometry is "
                         "inconsistent (num_envs %u, batch_size %u, ring_depth "
                         "%u, total_bytes %llu)", h->num_envs, h->batch_size,
                         h->ring_depth, (unsigned long long)h->total_bytes);
  return SHMATARI_OK;
}

/* Fills env_worker[e] with the worker that owns env e (num_envs entries),
 * from the worker records. Returns SHMATARI_OK, or _ERR_NOT_SHMATARI if the
 * groups do not cover every env exactly once. */
static inline int shmatari_env_workers(const shmatari_header *h,
                                       uint32_t *env_worker, char *msg,
                                       size_t len) {
  uint32_t next = 0;
  for (uint32_t w = 0; w < h->num_workers; w++) {
    const shmatari_worker_ctrl *wc = shmatari_worker(h, w);
    if (wc->env_begin != next || wc->env_end <= wc->env_begin ||
        wc->env_end > h->num_envs)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                           "worker %u owns envs [%u, %u), expected to start "
                           "at %u", w, wc->env_begin, wc->env_end, next);
    for (uint32_t e = wc->env_begin; e < wc->env_end; e++) env_worker[e] = w;
    next = wc->env_end;
  }
  if (next != h->num_envs)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "the workers own envs [0, %u) of %u", next,
                         h->num_envs);
  return SHMATARI_OK;
}

/* SHMATARI_OK while the owner (server) process lives
 * (shmatari_owner_alive), else _ERR_SERVER_DEAD. */
static inline int shmatari_owner_check(const shmatari_header *h, char *msg,
                                       size_t len) {
  if (shmatari_owner_alive(h)) return SHMATARI_OK;
  return shmatari_fail(msg, len, SHMATARI_ERR_SERVER_DEAD,
                       "the server (pid %d) that owns the pool is gone",
                       (int)h->owner_pid);
}

/* Is the pool still able to answer? Returns SHMATARI_OK, or _ERR_WORKER (a
 * worker reported failure, or, with check_pids, its process is gone),
 * _ERR_CLOSED (pool_state is CLOSING) or, with check_pids, _ERR_SERVER_DEAD
 * (the owner's process is gone). check_pids costs a system call or two per
 * process; waits do it once per SHMATARI_POLL_NS of sleep. */
static inline int shmatari_pool_check(const shmatari_header *h, int check_pids,
                                      char *msg, size_t len) {
  shmatari_header *hw = (shmatari_header *)h;
  if (shmatari_load_acquire(&hw->failed_workers) != 0) {
    for (uint32_t w = 0; w < h->num_workers; w++) {
      shmatari_worker_ctrl *wc = shmatari_worker(h, w);
      if (shmatari_load_acquire(&wc->state) == SHMATARI_WORKER_FAILED) {
        const char *text = shmatari_error_text(h, w);
        return shmatari_fail(msg, len, SHMATARI_ERR_WORKER,
                             "worker %u (pid %d, envs %u..%u) failed: %.*s", w,
                             (int)wc->pid, wc->env_begin, wc->env_end - 1,
                             (int)strnlen(text, SHMATARI_ERROR_BYTES), text);
      }
    }
    return shmatari_fail(msg, len, SHMATARI_ERR_WORKER, "a worker failed");
  }
  if (shmatari_load_acquire(&hw->pool_state) == SHMATARI_POOL_CLOSING)
    return shmatari_fail(msg, len, SHMATARI_ERR_CLOSED,
                         "the server (pid %d) is closing the pool",
                         (int)h->owner_pid);
  if (!check_pids) return SHMATARI_OK;
  int r = shmatari_owner_check(h, msg, len);
  if (r != SHMATARI_OK) return r;
  for (uint32_t w = 0; w < h->num_workers; w++) {
    shmatari_worker_ctrl *wc = shmatari_worker(h, w);
    uint32_t state = shmatari_load_acquire(&wc->state);
    if (state != SHMATARI_WORKER_EXITED && wc->pid > 0 &&
        !shmatari_pid_alive(wc->pid))
      return shmatari_fail(msg, len, SHMATARI_ERR_WORKER,
                           "worker %u (pid %d, envs %u..%u) died", w,
                           (int)wc->pid, wc->env_begin, wc->env_end - 1);
  }
  return SHMATARI_OK;
}

/* Sleeps on main_seq (seen: its value read before checking the condition)
 * for at most slice_ns and at most until deadline_ns (< 0: none), after
 * polling it for spin_ns in spin_mode (see shmatari_wait_change). Returns
 * SHMATARI_OK when woken or after a quiet slice in which the pool stayed
 * alive, _ERR_TIMEOUT once the deadline has passed, _ERR_INTERRUPTED on a
 * signal, or what shmatari_pool_check found. */
static inline int shmatari_sleep_main(shmatari_header *h, uint32_t seen,
                                      int64_t spin_ns, int spin_mode,
                                      int64_t deadline_ns, int64_t slice_ns,
                                      char *msg, size_t len) {
  if (deadline_ns >= 0) {
    int64_t left = deadline_ns - shmatari_now_ns();
    if (left <= 0) return SHMATARI_ERR_TIMEOUT;
    if (left < slice_ns) slice_ns = left;
  }
  int r = shmatari_wait_change(&h->main_seq, seen, &h->main_sleeping, spin_ns,
                               spin_mode, slice_ns);
  if (r == SHMATARI_WAIT_EINTR)
    return shmatari_fail(msg, len, SHMATARI_ERR_INTERRUPTED,
                         "interrupted by a signal");
  if (r == SHMATARI_WAIT_TIMEOUT) return shmatari_pool_check(h, 1, msg, len);
  return SHMATARI_OK;
}

static inline int64_t shmatari_deadline(int64_t timeout_ns) {
  return timeout_ns < 0 ? -1 : shmatari_now_ns() + timeout_ns;
}

/* Waits until the pool is RUNNING (its workers are ready). */
static inline int shmatari_wait_running(shmatari_header *h, int64_t timeout_ns,
                                        char *msg, size_t len) {
  int64_t deadline = shmatari_deadline(timeout_ns);
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq);
    uint32_t state = shmatari_load_acquire(&h->pool_state);
    if (state == SHMATARI_POOL_RUNNING) return SHMATARI_OK;
    int r = shmatari_pool_check(h, 0, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(h, seen, 0, SHMATARI_SPIN_PAUSE, deadline,
                              SHMATARI_POLL_NS, msg, len);
    if (r == SHMATARI_ERR_TIMEOUT)
      return shmatari_fail(msg, len, r, "the pool was still starting after "
                           "%.1f s", (double)timeout_ns / SHMATARI_SECOND);
    if (r != SHMATARI_OK) return r;
  }
}

/* Claims the pool for process pid: client_pid 0 -> pid, or a dead holder's
 * pid -> pid. Returns SHMATARI_OK, or _ERR_BUSY with the live holder's pid
 * in *holder (pid itself when this process already holds it). */
static inline int shmatari_claim(shmatari_header *h, int32_t pid,
                                 int32_t *holder, char *msg, size_t len) {
  int32_t expected = 0;
  for (;;) {
    int32_t cur = shmatari_cas_i32(&h->client_pid, expected, pid);
    if (cur == expected) return SHMATARI_OK;
    if (cur == pid || shmatari_pid_alive(cur)) {
      if (holder != NULL) *holder = cur;
      return shmatari_fail(msg, len, SHMATARI_ERR_BUSY,
                           "the pool already has a client: pid %d%s; one "
                           "client at a time (detach it, or end it, first)",
                           (int)cur, cur == pid ? " (this process)" : "");
    }
    expected = cur; /* its holder is dead: take it over */
  }
}

/* Gives the pool up, if pid holds it. */
static inline void shmatari_unclaim(shmatari_header *h, int32_t pid) {
  shmatari_cas_i32(&h->client_pid, pid, 0);
}

/* Makes the pool consistent for a new client (the caller holds the claim):
 *  1. waits until every env has answered its last command (ack_seq ==
 *     req_seq), waking every worker first in case a client died between
 *     posting and waking;
 *  2. drops every result not taken: with T the number of batches begun
 *     (asynchronous pools: ceil(alloc_pos / batch_size); synchronous pools:
 *     the largest `results` of any env), it sets alloc_pos = T * batch_size
 *     (asynchronous) or every env's `results` = T (synchronous), clears every
 *     slot's done_count and rows (shmatari_clear_rows) and sets
 *     consumed_batches = T.
 * No worker touches these words while no command is in flight, which step 1
 * guarantees. Returns SHMATARI_OK, _ERR_TIMEOUT, or a liveness error. */
static inline int shmatari_recover(shmatari_header *h, int64_t timeout_ns,
                                   char *msg, size_t len) {
  int64_t deadline = shmatari_deadline(timeout_ns);
  for (uint32_t w = 0; w < h->num_workers; w++) {
    shmatari_worker_ctrl *wc = shmatari_worker(h, w);
    shmatari_notify(&wc->wake_seq, &wc->sleeping);
  }
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq), busy = h->num_envs;
    for (uint32_t e = 0; e < h->num_envs && busy == h->num_envs; e++) {
      shmatari_env_ctrl *ec = shmatari_env(h, e);
      if (shmatari_load_acquire(&ec->req_seq) !=
          shmatari_load_acquire(&ec->ack_seq))
        busy = e;
    }
    if (busy == h->num_envs) break;
    /* Workers bump main_seq only when a slot fills, so sleep in short
     * slices: this runs once per attach, while a dead client's last
     * commands finish. */
    int r = shmatari_pool_check(h, 0, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(h, seen, 0, SHMATARI_SPIN_PAUSE, deadline,
                              SHMATARI_SECOND / 100, msg, len);
    if (r == SHMATARI_ERR_TIMEOUT)
      return shmatari_fail(msg, len, r, "env %u was still running a command "
                           "of the previous client after %.1f s", busy,
                           (double)timeout_ns / SHMATARI_SECOND);
    if (r != SHMATARI_OK && r != SHMATARI_ERR_INTERRUPTED) return r;
  }
  uint64_t batches = h->consumed_batches;
  if (h->batch_size == h->num_envs) {
    for (uint32_t e = 0; e < h->num_envs; e++)
      if (shmatari_env(h, e)->results > batches)
        batches = shmatari_env(h, e)->results;
    for (uint32_t e = 0; e < h->num_envs; e++)
      shmatari_env(h, e)->results = batches;
  } else {
    uint64_t pos = shmatari_load_acquire64(&h->alloc_pos);
    uint64_t begun = (pos + h->batch_size - 1) / h->batch_size;
    if (begun > batches) batches = begun;
    shmatari_store_release64(&h->alloc_pos, batches * h->batch_size);
  }
  for (uint64_t s = 0; s < h->ring_depth; s++) {
    shmatari_clear_rows(h, s);
    shmatari_store_release(
        &((shmatari_slot_header *)shmatari_slot(h, s))->done_count, 0);
  }
  shmatari_store_release64(&h->consumed_batches, batches);
  return SHMATARI_OK;
}

/* Everything attaching does once the segment is mapped: checks the header,
 * waits (up to timeout_ns) for the pool to run, claims it for pid and
 * recovers it. On failure the claim is not kept. */
static inline int shmatari_open_pool(shmatari_header *h, uint64_t size,
                                     int32_t pid, int64_t timeout_ns,
                                     int32_t *holder, char *msg, size_t len) {
  int64_t deadline = shmatari_deadline(timeout_ns);
  int r = shmatari_check_header(h, size, msg, len);
  if (r == SHMATARI_OK) r = shmatari_wait_running(h, timeout_ns, msg, len);
  if (r == SHMATARI_OK) r = shmatari_claim(h, pid, holder, msg, len);
  if (r != SHMATARI_OK) return r;
  int64_t left = deadline < 0 ? -1 : deadline - shmatari_now_ns();
  r = shmatari_recover(h, left < 0 && deadline >= 0 ? 0 : left, msg, len);
  if (r != SHMATARI_OK) shmatari_unclaim(h, pid);
  return r;
}

/* Posts command `cmd` (enum shmatari_cmd) to n envs and wakes the workers
 * that own them: for each env, cmd and action first, then req_seq + 1
 * (release); then each touched worker's wake_seq (shmatari_notify).
 * env_ids: n env indices, or NULL for envs 0..n-1; actions: n action indices
 * (STEP), or NULL for 0. The caller has checked that every env is in range,
 * listed once, and has no command in flight. env_worker: from
 * shmatari_env_workers; touched: num_workers bytes of zeros (left zero). */
static inline void shmatari_post(shmatari_header *h, const uint32_t *env_worker,
                                 uint8_t *touched, const uint32_t *env_ids,
                                 uint32_t n, const int32_t *actions,
                                 uint32_t cmd) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t e = env_ids != NULL ? env_ids[i] : i;
    shmatari_env_ctrl *ec = shmatari_env(h, e);
    ec->cmd = cmd;
    ec->action = actions != NULL ? actions[i] : 0;
    shmatari_store_release(&ec->req_seq, ec->req_seq + 1);
    touched[env_worker[e]] = 1;
  }
  for (uint32_t w = 0; w < h->num_workers; w++) {
    if (touched[w]) {
      shmatari_worker_ctrl *wc = shmatari_worker(h, w);
      shmatari_notify(&wc->wake_seq, &wc->sleeping);
      touched[w] = 0;
    }
  }
}

/* Waits until batch `batch` (a count of batches consumed) is full, polling
 * for spin_ns in spin_mode before sleeping (shmatari_wait_change). Returns SHMATARI_OK, _ERR_TIMEOUT
 * after timeout_ns (< 0: no limit), _ERR_INTERRUPTED on a signal, or a
 * liveness error: the pool's words are checked at every wake-up, and the
 * processes' ids after each SHMATARI_POLL_NS of sleep and once
 * *next_check_ns (a monotonic time, advanced here; the caller keeps it
 * between calls, starting at 0) has passed, so that a client kept busy by
 * the other workers still learns that one died (its envs would never answer
 * again), or that workers outlive their server. */
static inline int shmatari_wait_batch(shmatari_header *h, uint64_t batch,
                                      int64_t spin_ns, int spin_mode,
                                      int64_t timeout_ns,
                                      int64_t *next_check_ns, char *msg,
                                      size_t len) {
  shmatari_slot_header *slot = (shmatari_slot_header *)shmatari_slot(h, batch);
  int64_t now = shmatari_now_ns(), deadline = -1;
  if (timeout_ns >= 0) deadline = now + timeout_ns;
  if (now >= *next_check_ns) {
    *next_check_ns = now + SHMATARI_POLL_NS;
    int r = shmatari_pool_check(h, 1, msg, len);
    if (r != SHMATARI_OK) return r;
  }
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq);
    if (shmatari_load_acquire(&slot->done_count) >= h->batch_size)
      return SHMATARI_OK;
    int r = shmatari_pool_check(h, 0, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(h, seen, spin_ns, spin_mode, deadline,
                              SHMATARI_POLL_NS, msg, len);
    if (r == SHMATARI_ERR_TIMEOUT) {
      if (shmatari_load_acquire(&slot->done_count) >= h->batch_size)
        return SHMATARI_OK;
      return shmatari_fail(msg, len, r, "no batch within %.3f s",
                           (double)timeout_ns / SHMATARI_SECOND);
    }
    if (r != SHMATARI_OK) return r;
  }
}

/* Marks batch `batch` consumed: its slot may be written again, and its
 * rows are empty (shmatari_clear_rows). */
static inline void shmatari_consume_batch(shmatari_header *h, uint64_t batch) {
  shmatari_clear_rows(h, batch);
  shmatari_store_release(
      &((shmatari_slot_header *)shmatari_slot(h, batch))->done_count, 0);
  shmatari_store_release64(&h->consumed_batches, batch + 1);
}

/* ------------------------------------------------------------------------
 * The client: attach by name, post, wait, detach.
 */

/* One batch of results, pointing into the segment. Valid until the next
 * shmatari_wait or shmatari_detach. Element i of every array belongs to env
 * env_id[i]; in a synchronous pool (batch_size == num_envs) env_id[i] == i. */
typedef struct shmatari_batch {
  uint64_t index;           /* batches consumed before this one */
  uint32_t size;            /* results: batch_size */
  const uint8_t *obs;       /* size x obs_stride bytes; result i's observation
                               at obs + i * obs_stride, laid out [stack_num]
                               [img_height][img_width][channels] uint8,
                               oldest frame first */
  uint64_t obs_stride;      /* bytes: obs_env_bytes */
  const int32_t *env_id;    /* size elements */
  const float *reward;      /* size elements (clipped if reward_clip) */
  const uint8_t *terminated;/* size elements, 0/1 */
  const uint8_t *truncated; /* size elements, 0/1 */
  const void *field[SHMATARI_FIELD_COUNT]; /* every field by enum
                               shmatari_field, size elements each, of
                               SHMATARI_FIELD_BYTES / SHMATARI_FIELD_TYPES */
  /* Same-step pools (autoreset_mode SHMATARI_AUTORESET_SAME_STEP), else
   * NULL: the final records, laid out as obs and field above. Row i's are
   * valid only when its flags hold SHMATARI_FLAG_FINAL: the result of the
   * step that ended the episode, whose row holds the reset that followed. */
  const uint8_t *final_obs;
  const void *final_field[SHMATARI_FIELD_COUNT];
} shmatari_batch;

typedef struct shmatari_client {
  shmatari_header *hdr; /* the mapped segment (read-only for the caller);
                           NULL when not attached */
  uint64_t map_bytes;   /* bytes mapped */
  int32_t pid;          /* this process: the claim's holder */
  int64_t spin_ns;      /* how long a wait polls before it sleeps (0); worth
                           tens of microseconds with a core to spare */
  int spin_mode;        /* SHMATARI_SPIN_PAUSE (default) or _YIELD */
  int64_t next_check_ns; /* when a wait next checks the server's pid */
  uint64_t taken;       /* batches consumed (the next batch's index) */
  int holding;          /* 1 while the last batch returned is not consumed */
  uint32_t pending;     /* envs with a command whose result was not returned */
  uint8_t *env_pending; /* per env: 1 while pending */
  uint32_t *env_worker; /* per env: the worker that owns it */
  uint8_t *touched;     /* scratch: one byte per worker */
  char segment[SHMATARI_NAME_MAX]; /* the segment's name */
  char error[SHMATARI_MESSAGE_BYTES]; /* the last failure, in words */
} shmatari_client;

/* The segment name of pool `name`: name itself if it already starts with
 * SHMATARI_NAME_PREFIX (as `shmatari_<pid>_<hex>` names do), else the prefix
 * + name. Returns SHMATARI_OK, or _ERR_INVALID for an empty name, a '/', or
 * a name too long. */
static inline int shmatari_segment_name(const char *name, char *out,
                                        size_t out_len, char *msg,
                                        size_t len) {
  size_t plen = strlen(SHMATARI_NAME_PREFIX);
  int prefixed = strncmp(name, SHMATARI_NAME_PREFIX, plen) == 0;
  size_t n = strlen(name) + (prefixed ? 0 : plen);
  if (name[0] == 0 || strchr(name, '/') != NULL || n + 1 > out_len)
    return shmatari_fail(msg, len, SHMATARI_ERR_INVALID,
                         "invalid pool name '%s': expected 1..%zu characters "
                         "without '/'", name, out_len - 1 - plen);
  size_t at = prefixed ? 0 : plen;
  memcpy(out, SHMATARI_NAME_PREFIX, at);
  memcpy(out + at, name, n - at + 1); /* with the NUL */
  return SHMATARI_OK;
}

/* Releases what shmatari_attach acquired. Safe on a detached client. The
 * commands in flight stay in the pool; the next client's attach recovers
 * them. */
static inline void shmatari_detach(shmatari_client *c) {
  if (c->hdr != NULL) {
    shmatari_unclaim(c->hdr, c->pid);
    munmap((void *)c->hdr, c->map_bytes);
  }
  free(c->env_pending);
  free(c->env_worker);
  free(c->touched);
  c->hdr = NULL;
  c->env_pending = NULL;
  c->env_worker = NULL;
  c->touched = NULL;
  c->pending = 0;
  c->holding = 0;
}

/* Attaches to pool `name` ("demo" for `shmatari serve ... --name demo`, or a
 * full segment name). Maps the segment, checks the magic and the ABI major
 * version, waits up to timeout_ns (< 0: no limit) for the pool to run,
 * claims it (one client at a time) and recovers it from any previous client.
 * Returns SHMATARI_OK, or a status with its explanation in c->error (on
 * SHMATARI_ERR_BUSY it names the current client's pid). c needs no
 * initialisation; on failure it is left detached. */
static inline int shmatari_attach(shmatari_client *c, const char *name,
                                  int64_t timeout_ns) {
  memset(c, 0, sizeof *c);
  c->pid = (int32_t)getpid();
  char *msg = c->error;
  size_t len = sizeof c->error;
  int r = shmatari_segment_name(name, c->segment, sizeof c->segment, msg, len);
  if (r != SHMATARI_OK) return r;
  /* A server that is still starting has no segment yet, or one whose header
   * is still zero: look again every 20 ms until timeout_ns has passed. */
  const int64_t deadline = shmatari_now_ns() + (timeout_ns > 0 ? timeout_ns : 0);
  const struct timespec retry = {0, 20000000};
#if defined(__linux__)
  char path[SHMATARI_NAME_MAX + 16];
  snprintf(path, sizeof path, "/dev/shm/%s", c->segment);
#define SHMATARI_OPEN_SEGMENT() open(path, O_RDWR | O_CLOEXEC)
#else
  char path[SHMATARI_NAME_MAX + 2];
  snprintf(path, sizeof path, "/%s", c->segment);
#define SHMATARI_OPEN_SEGMENT() shm_open(path, O_RDWR, 0)
#endif
again:;
  int fd = SHMATARI_OPEN_SEGMENT();
  while (fd < 0 && errno == ENOENT && shmatari_now_ns() < deadline) {
    nanosleep(&retry, NULL);
    fd = SHMATARI_OPEN_SEGMENT();
  }
#undef SHMATARI_OPEN_SEGMENT
  if (fd < 0) {
    if (errno == ENOENT)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_FOUND,
                           "no shmatari pool named '%s' (%s does not exist): "
                           "start one with `shmatari serve GAME --name %s`",
                           name, path, name);
    return shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM, "cannot open %s: %s",
                         path, strerror(errno));
  }
  struct stat st;
  void *base = MAP_FAILED;
  int err = 0;
  if (fstat(fd, &st) != 0) {
    err = errno;
    st.st_size = 0;
  } else if (st.st_size >= (off_t)SHMATARI_HEADER_BYTES) {
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, 0);
    err = errno;
  }
  close(fd);
  if (base == MAP_FAILED) {
    if (err == 0)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                           "%s holds %lld bytes, less than a shmatari header",
                           path, (long long)st.st_size);
    return shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM, "cannot map %s: %s",
                         path, strerror(err));
  }
  if (((shmatari_header *)base)->magic == 0 && shmatari_now_ns() < deadline) {
    munmap(base, (size_t)st.st_size); /* the header is still being written */
    nanosleep(&retry, NULL);
    goto again;
  }
  c->hdr = (shmatari_header *)base;
  c->map_bytes = (uint64_t)st.st_size;
  int32_t holder = 0;
  r = shmatari_open_pool(c->hdr, c->map_bytes, c->pid, timeout_ns, &holder,
                         msg, len);
  if (r != SHMATARI_OK) {
    munmap(base, c->map_bytes); /* the claim was not kept */
    c->hdr = NULL;
    return r;
  }
  uint32_t n = c->hdr->num_envs;
  c->env_pending = (uint8_t *)calloc(n, 1);
  c->env_worker = (uint32_t *)calloc(n, sizeof(uint32_t));
  c->touched = (uint8_t *)calloc(c->hdr->num_workers, 1);
  if (c->env_pending == NULL || c->env_worker == NULL || c->touched == NULL)
    r = shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM, "out of memory");
  else
    r = shmatari_env_workers(c->hdr, c->env_worker, msg, len);
  if (r != SHMATARI_OK) {
    shmatari_detach(c);
    return r;
  }
  c->taken = shmatari_load_acquire64(&c->hdr->consumed_batches);
  c->error[0] = 0;
  return SHMATARI_OK;
}

/* Observation shape of one env: writes (stack_num, img_height, img_width)
 * and, for RGB, 3 to shape; returns the number of dimensions (3 or 4). */
static inline int shmatari_obs_shape(const shmatari_client *c,
                                     uint32_t shape[4]) {
  const shmatari_header *h = c->hdr;
  shape[0] = h->stack_num;
  shape[1] = h->img_height;
  shape[2] = h->img_width;
  shape[3] = h->channels;
  return h->channels == 1 ? 3 : 4;
}

/* Posts cmd to n envs after checking them: every env in range, listed
 * once, with no command pending; every action in 0..num_actions-1. */
static inline int shmatari_post_checked(shmatari_client *c, uint32_t cmd,
                                        const int32_t *actions,
                                        const int32_t *env_ids, uint32_t n) {
  char *msg = c->error;
  size_t len = sizeof c->error;
  if (c->hdr == NULL)
    return shmatari_fail(msg, len, SHMATARI_ERR_STATE, "not attached");
  const shmatari_header *h = c->hdr;
  if (env_ids == NULL && n != h->num_envs)
    return shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%u commands for %u "
                         "envs: pass env_ids to address fewer", n, h->num_envs);
  int r = SHMATARI_OK;
  uint32_t i;
  for (i = 0; i < n && r == SHMATARI_OK; i++) {
    int64_t e = env_ids != NULL ? env_ids[i] : (int64_t)i;
    if (e < 0 || e >= (int64_t)h->num_envs)
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "env id %lld at "
                        "position %u is out of range 0..%u", (long long)e, i,
                        h->num_envs - 1);
    else if (c->env_pending[e])
      r = shmatari_fail(msg, len, SHMATARI_ERR_STATE, "env %lld %s", (long long)e,
                        c->env_pending[e] == 2
                            ? "is listed twice"
                            : "is still running: wait for its result first");
    else if (actions != NULL &&
             (actions[i] < 0 || (uint32_t)actions[i] >= h->num_actions))
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "action %d at position "
                        "%u is out of range 0..%u", actions[i], i,
                        h->num_actions - 1);
    else
      c->env_pending[e] = 2; /* listed; made 1 below, or undone */
  }
  for (uint32_t j = 0; j < i; j++) {
    int64_t e = env_ids != NULL ? env_ids[j] : (int64_t)j;
    if (e >= 0 && e < (int64_t)h->num_envs && c->env_pending[e] == 2)
      c->env_pending[e] = r == SHMATARI_OK ? 1 : 0;
  }
  if (r != SHMATARI_OK) return r;
  shmatari_post(c->hdr, c->env_worker, c->touched, (const uint32_t *)env_ids, n,
                actions, cmd);
  c->pending += n;
  return SHMATARI_OK;
}

/* Steps n envs: actions[i] (0..num_actions-1) for env env_ids[i], or for env
 * i when env_ids is NULL (then n MUST be num_envs). Envs whose episode
 * ended reset instead (next-step autoreset). */
static inline int shmatari_send(shmatari_client *c, const int32_t *actions,
                                const int32_t *env_ids, uint32_t n) {
  if (actions == NULL)
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                         "actions is NULL");
  return shmatari_post_checked(c, SHMATARI_CMD_STEP, actions, env_ids, n);
}

/* Resets every env (each keeps its random stream); the first observations
 * come back through shmatari_wait. */
static inline int shmatari_reset(shmatari_client *c) {
  return shmatari_post_checked(c, SHMATARI_CMD_RESET, NULL, NULL,
                               c->hdr != NULL ? c->hdr->num_envs : 0);
}

/* Consumes the batch the last call returned, then waits up to timeout_ns
 * (< 0: no limit) for the next one and points *out at it. Its envs may be
 * sent commands again at once. Returns SHMATARI_OK, _ERR_STATE when fewer
 * than batch_size envs are running, _ERR_TIMEOUT, _ERR_INTERRUPTED (call
 * again to go on waiting), or _ERR_SERVER_DEAD / _ERR_WORKER / _ERR_CLOSED,
 * each within timeout_ns plus at most SHMATARI_POLL_NS. */
static inline int shmatari_wait(shmatari_client *c, shmatari_batch *out,
                                int64_t timeout_ns) {
  char *msg = c->error;
  size_t len = sizeof c->error;
  if (c->hdr == NULL)
    return shmatari_fail(msg, len, SHMATARI_ERR_STATE, "not attached");
  shmatari_header *h = c->hdr;
  if (c->holding) {
    shmatari_consume_batch(h, c->taken);
    c->taken++;
    c->holding = 0;
  }
  if (c->pending < h->batch_size)
    return shmatari_fail(msg, len, SHMATARI_ERR_STATE, "a batch needs %u "
                         "running envs, %u are: send or reset first",
                         h->batch_size, c->pending);
  int r = shmatari_wait_batch(h, c->taken, c->spin_ns, c->spin_mode,
                              timeout_ns, &c->next_check_ns, msg, len);
  if (r != SHMATARI_OK) return r;
  const char *slot = shmatari_slot(h, c->taken);
  out->index = c->taken;
  out->size = h->batch_size;
  out->obs = (const uint8_t *)(slot + h->slot_obs_offset);
  out->obs_stride = h->obs_env_bytes;
  const char *fin = h->slot_final_offset ? slot + h->slot_final_offset : NULL;
  out->final_obs = fin ? (const uint8_t *)(fin + h->slot_obs_offset) : NULL;
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++) {
    out->field[f] = slot + h->slot_field_offset[f];
    out->final_field[f] = fin ? fin + h->slot_field_offset[f] : NULL;
  }
  out->env_id = (const int32_t *)out->field[SHMATARI_FIELD_ENV_ID];
  out->reward = (const float *)out->field[SHMATARI_FIELD_REWARD];
  out->terminated = (const uint8_t *)out->field[SHMATARI_FIELD_TERMINATED];
  out->truncated = (const uint8_t *)out->field[SHMATARI_FIELD_TRUNCATED];
  for (uint32_t i = 0; i < out->size; i++) {
    int32_t e = out->env_id[i];
    if (e >= 0 && (uint32_t)e < h->num_envs && c->env_pending[e]) {
      c->env_pending[e] = 0;
      c->pending--;
    }
  }
  c->holding = 1;
  return SHMATARI_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_H */
