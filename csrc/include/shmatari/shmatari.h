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
 *     answered, then drops every result nobody took. A new client MUST
 *     reset every env before stepping them (shmatari_send refuses until
 *     then).
 *   - The client is a state machine (enum shmatari_client_state; Python's
 *     client wraps these same functions): a call out of order changes
 *     nothing and returns SHMATARI_ERR_STATE, and c->error names the state
 *     and the call that leaves it. A client MUST NOT post to an env whose
 *     result it has not received (shmatari_send refuses); shmatari_reset
 *     is the way back from every state but a broken pool (it drops what is
 *     in flight first).
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
  SHMATARI_ERR_SYSTEM = -12,      /* open, mmap or malloc failed (see errno) */
  SHMATARI_ERR_UNTRUSTED = -13    /* the segment is not this user's own
                                     regular, fully allocated file (owner,
                                     mode, symlink, sparse): refused */
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
    case SHMATARI_ERR_UNTRUSTED: return "segment not trusted";
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
 * read, and copies its geometry into *g (g->hdr = base). It reads the header
 * once, into a private copy, and trusts none of its sizes or offsets: it
 * checks the magic and the ABI major version, bounds the primary parameters
 * (num_envs, num_workers, batch_size, ring_depth, stack_num, img_height,
 * img_width, channels, frame_skip, autoreset_mode; SHMATARI_MAX_*),
 * recomputes the layout from them (shmatari_layout_compute_msg, overflow
 * checked) and requires every stored size and offset to equal the computed
 * one, and total_bytes to equal `size`. (A pool of a higher minor version
 * may have larger slots and more bytes after them; see docs/layout.md.)
 * Returns SHMATARI_OK, _ERR_NOT_SHMATARI or _ERR_ABI (with a message). */
static inline int shmatari_geom_load(void *base, uint64_t size,
                                     shmatari_geom *g, char *msg, size_t len) {
  shmatari_header h, want;
  if (size < SHMATARI_HEADER_BYTES)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "segment of %llu bytes is smaller than the %u-byte "
                         "header", (unsigned long long)size,
                         SHMATARI_HEADER_BYTES);
  memcpy(&h, base, sizeof h); /* nothing below reads the segment again */
  if (h.magic != SHMATARI_MAGIC)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: magic %#llx, expected %#llx",
                         (unsigned long long)h.magic,
                         (unsigned long long)SHMATARI_MAGIC);
  if (h.abi_major != SHMATARI_ABI_MAJOR)
    return shmatari_fail(msg, len, SHMATARI_ERR_ABI,
                         "segment has layout ABI %u.%u; this client reads ABI "
                         "%u.x: build the client against the server's "
                         "shmatari/layout.h", h.abi_major, h.abi_minor,
                         SHMATARI_ABI_MAJOR);
  if (size != h.total_bytes)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: it holds %llu bytes, %s "
                         "than its header's total_bytes %llu",
                         (unsigned long long)size,
                         size < h.total_bytes ? "smaller" : "larger",
                         (unsigned long long)h.total_bytes);
  memset(&want, 0, sizeof want);
  want.num_envs = h.num_envs;
  want.num_workers = h.num_workers;
  want.batch_size = h.batch_size;
  want.ring_depth = h.ring_depth;
  want.stack_num = h.stack_num;
  want.img_height = h.img_height;
  want.img_width = h.img_width;
  want.channels = h.channels;
  want.frame_skip = h.frame_skip;
  /* A word that a minor version added is a reserved word in a pool of a
   * lower minor, which a client MUST NOT read (docs/layout.md,
   * "Versioning"): there it counts as 0. (1.1) autoreset_mode and
   * slot_final_offset; */
  const int minor11 = h.abi_minor >= 1, minor12 = h.abi_minor >= 2;
  want.autoreset_mode = minor11 ? h.autoreset_mode : 0;
  /* (1.2) obs_layout, the screen and the render area: a pool of 1.0 or 1.1
   * is channels last and has no render area, whatever those words hold. */
  want.obs_layout = minor12 ? h.obs_layout : 0;
  want.screen_height = minor12 ? h.screen_height : 0;
  want.screen_width = minor12 ? h.screen_width : 0;
  char why[400];
  if (shmatari_layout_compute_msg(&want, why, sizeof why) != SHMATARI_LAYOUT_OK)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its header's %s", why);
  const char *bad = NULL;
  unsigned long long got = 0, expected = 0;
#define SHMATARI_EXPECT(name, a, b)                       \
  if (bad == NULL && (uint64_t)(a) != (uint64_t)(b)) {    \
    bad = name;                                           \
    got = (unsigned long long)(a);                        \
    expected = (unsigned long long)(b);                   \
  }
  SHMATARI_EXPECT("header_bytes", h.header_bytes, want.header_bytes)
  SHMATARI_EXPECT("obs_frame_bytes", h.obs_frame_bytes, want.obs_frame_bytes)
  SHMATARI_EXPECT("obs_env_bytes", h.obs_env_bytes, want.obs_env_bytes)
  SHMATARI_EXPECT("env_ctrl_offset", h.env_ctrl_offset, want.env_ctrl_offset)
  SHMATARI_EXPECT("worker_ctrl_offset", h.worker_ctrl_offset,
                  want.worker_ctrl_offset)
  SHMATARI_EXPECT("errors_offset", h.errors_offset, want.errors_offset)
  SHMATARI_EXPECT("slots_offset", h.slots_offset, want.slots_offset)
  SHMATARI_EXPECT("slot_obs_offset", h.slot_obs_offset, want.slot_obs_offset)
  if (minor11)
    SHMATARI_EXPECT("slot_final_offset", h.slot_final_offset,
                    want.slot_final_offset)
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++)
    SHMATARI_EXPECT("slot_field_offset", h.slot_field_offset[f],
                    want.slot_field_offset[f])
  if (h.abi_minor <= SHMATARI_ABI_MINOR) {
    SHMATARI_EXPECT("slot_bytes", h.slot_bytes, want.slot_bytes)
    SHMATARI_EXPECT("field_count", h.field_count, want.field_count)
  }
  if (minor12 && h.abi_minor <= SHMATARI_ABI_MINOR) {
    SHMATARI_EXPECT("render_offset", h.render_offset, want.render_offset)
    SHMATARI_EXPECT("render_env_bytes", h.render_env_bytes,
                    want.render_env_bytes)
  }
#undef SHMATARI_EXPECT
  if (bad != NULL)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its header's %s is %llu, but "
                         "its geometry (num_envs %u, batch_size %u, ring_depth "
                         "%u) gives %llu", bad, got, h.num_envs, h.batch_size,
                         h.ring_depth, expected);
  /* A higher minor version may enlarge slots (new arrays after the ones
   * above) and add fields: the slots must still fit in the segment. */
  uint64_t ring_bytes, end;
  if (h.field_count < SHMATARI_FIELD_COUNT || h.field_count > SHMATARI_MAX_FIELDS ||
      h.slot_bytes < want.slot_bytes || h.slot_bytes % SHMATARI_ALIGN != 0 ||
      shmatari_mul_u64(h.ring_depth, h.slot_bytes, &ring_bytes) ||
      shmatari_add_u64(want.slots_offset, ring_bytes, &end) ||
      end > h.total_bytes)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: ABI %u.%u with field_count "
                         "%u and slot_bytes %llu does not fit its %llu bytes",
                         h.abi_major, h.abi_minor, h.field_count,
                         (unsigned long long)h.slot_bytes,
                         (unsigned long long)h.total_bytes);
  /* (1.2) The render area, when there is one, lies after the slots, and a
   * higher minor version may only have moved it further. */
  uint64_t render_bytes, render_end;
  if (want.screen_height != 0 &&
      (h.render_offset < end || h.render_offset % SHMATARI_ALIGN != 0 ||
       h.render_env_bytes < want.render_env_bytes ||
       h.render_env_bytes % SHMATARI_ALIGN != 0 ||
       shmatari_mul_u64(h.num_envs, h.render_env_bytes, &render_bytes) ||
       shmatari_add_u64(h.render_offset, render_bytes, &render_end) ||
       render_end > h.total_bytes))
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: its render area (offset "
                         "%llu, %llu bytes per env) does not fit its %llu "
                         "bytes after the slots",
                         (unsigned long long)h.render_offset,
                         (unsigned long long)h.render_env_bytes,
                         (unsigned long long)h.total_bytes);
  if (h.num_actions > SHMATARI_MAX_ACTIONS)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "not a shmatari segment: num_actions %u is more than "
                         "%u", h.num_actions, SHMATARI_MAX_ACTIONS);
  want.slot_bytes = h.slot_bytes;
  want.total_bytes = h.total_bytes;
  if (want.screen_height != 0) { /* checked above */
    want.render_offset = h.render_offset;
    want.render_env_bytes = h.render_env_bytes;
  }
  shmatari_geom_set(g, base, &want);
  return SHMATARI_OK;
}

/* shmatari_geom_load without keeping the geometry: SHMATARI_OK,
 * _ERR_NOT_SHMATARI or _ERR_ABI (with a message). */
static inline int shmatari_check_header(const void *base, uint64_t size,
                                        char *msg, size_t len) {
  shmatari_geom g;
  return shmatari_geom_load((void *)base, size, &g, msg, len);
}

/* Fills env_worker[e] with the worker that owns env e (num_envs entries),
 * from the worker records. Returns SHMATARI_OK, or _ERR_NOT_SHMATARI if the
 * groups do not cover every env exactly once. */
static inline int shmatari_env_workers(const shmatari_geom *g,
                                       uint32_t *env_worker, char *msg,
                                       size_t len) {
  uint32_t next = 0;
  for (uint32_t w = 0; w < g->num_workers; w++) {
    const shmatari_worker_ctrl *wc = shmatari_worker(g, w);
    /* Read once: the segment may change under us. */
    uint32_t begin = *(const volatile uint32_t *)&wc->env_begin;
    uint32_t end = *(const volatile uint32_t *)&wc->env_end;
    if (begin != next || end <= begin || end > g->num_envs)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                           "worker %u owns envs [%u, %u), expected to start "
                           "at %u", w, begin, end, next);
    for (uint32_t e = begin; e < end; e++) env_worker[e] = w;
    next = end;
  }
  if (next != g->num_envs)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "the workers own envs [0, %u) of %u", next,
                         g->num_envs);
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
static inline int shmatari_pool_check(const shmatari_geom *g, int check_pids,
                                      char *msg, size_t len) {
  const shmatari_header *h = g->hdr;
  shmatari_header *hw = g->hdr;
  if (shmatari_load_acquire(&hw->failed_workers) != 0) {
    for (uint32_t w = 0; w < g->num_workers; w++) {
      shmatari_worker_ctrl *wc = shmatari_worker(g, w);
      if (shmatari_load_acquire(&wc->state) == SHMATARI_WORKER_FAILED) {
        const char *text = shmatari_error_text(g, w);
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
  for (uint32_t w = 0; w < g->num_workers; w++) {
    shmatari_worker_ctrl *wc = shmatari_worker(g, w);
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
static inline int shmatari_sleep_main(const shmatari_geom *g, uint32_t seen,
                                      int64_t spin_ns, int spin_mode,
                                      int64_t deadline_ns, int64_t slice_ns,
                                      char *msg, size_t len) {
  shmatari_header *h = g->hdr;
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
  if (r == SHMATARI_WAIT_TIMEOUT) return shmatari_pool_check(g, 1, msg, len);
  return SHMATARI_OK;
}

static inline int64_t shmatari_deadline(int64_t timeout_ns) {
  return timeout_ns < 0 ? -1 : shmatari_now_ns() + timeout_ns;
}

/* Waits until the pool is RUNNING (its workers are ready). */
static inline int shmatari_wait_running(const shmatari_geom *g,
                                        int64_t timeout_ns, char *msg,
                                        size_t len) {
  shmatari_header *h = g->hdr;
  int64_t deadline = shmatari_deadline(timeout_ns);
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq);
    uint32_t state = shmatari_load_acquire(&h->pool_state);
    if (state == SHMATARI_POOL_RUNNING) return SHMATARI_OK;
    int r = shmatari_pool_check(g, 0, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(g, seen, 0, SHMATARI_SPIN_PAUSE, deadline,
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

/* ------------------------------------------------------------------------
 * Recovery. A worker publishes each result in this order (_publish in the
 * worker loop, src/shmatari/_core_worker.pxi), and both recoveries below
 * rely on it:
 *   1. the row's fields and observation (and, same-step, its final record);
 *   2. the env's `results` count (release);
 *   3. the row's env_id (release): from here on the row is complete;
 *   4. the slot's done_count (fetch-add), waking the client when it fills;
 *   5. the env's ack_seq (release), by the caller: the command is answered.
 * So once an env's ack_seq equals its req_seq, steps 1-4 of its result are
 * visible: a new client (a dead client's successor, or a reset that drops
 * what is in flight) drains, then drops what was not taken
 * (shmatari_recover). And a worker that died between two steps leaves each
 * row it began either complete (env_id set; the done_count bump or the
 * ack_seq may be lost) or a hole (reserved in an asynchronous pool, env_id
 * still -1): what its replacement must answer (shmatari_recover_workers).
 */

/* Makes the ring consistent after the workers owning the envs with
 * dead_env[e] != 0 (num_envs bytes) died, and says what their replacements
 * must publish first. The caller MUST call it once every other worker is
 * idle (no command of theirs in flight) and before the replacements start;
 * the client MUST NOT post meanwhile (the owner calls it from inside the
 * client's wait).
 *  - Every slot not yet taken gets done_count = its complete rows (a lost
 *    bump is restored).
 *  - A dead env with a command in flight whose row is complete gets its
 *    ack_seq (and, synchronous pools, its `results`): it was answered.
 *  - plan[e] (num_envs entries), for a dead env with a command in flight and
 *    no row: the position its replacement writes (>= 0: a hole, reserved in
 *    an asynchronous pool; -1: the usual position, with a synchronous pool's
 *    `results` wound back to this round); -2 for every other env.
 * Returns SHMATARI_OK, or _ERR_NOT_SHMATARI (with a message) when holes
 * remain that no dead env explains: a bug, or a segment written by something
 * else. */
static inline int shmatari_recover_workers(const shmatari_geom *g,
                                           const uint8_t *dead_env,
                                           int64_t *plan, char *msg,
                                           size_t len) {
  shmatari_header *h = g->hdr;
  const uint64_t B = g->batch_size, N = g->num_envs;
  const uint64_t consumed = shmatari_load_acquire64(&h->consumed_batches);
  const int ordered = B == N;
  const uint64_t begin = consumed * B;
  uint64_t end = ordered ? begin + N : shmatari_load_acquire64(&h->alloc_pos);
  /* Read from the segment: bounded to the ring, so that a bad counter cannot
   * make the scans below run on. */
  if (end < begin || end - begin > (uint64_t)g->ring_depth * B)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "result positions %llu..%llu do not fit the ring of "
                         "%u slots", (unsigned long long)begin,
                         (unsigned long long)end, g->ring_depth);
  const int64_t answered = -3; /* scratch: a dead env with a complete row */
  for (uint64_t e = 0; e < N; e++) plan[e] = -2;
  for (uint64_t b = consumed; b * B < end; b++) {
    uint32_t complete = 0;
    for (uint64_t p = b * B > begin ? b * B : begin; p < (b + 1) * B && p < end;
         p++) {
      int32_t env = (int32_t)shmatari_load_acquire(
          (uint32_t *)shmatari_row_env_id(g, p));
      if (env < 0) continue;
      complete++;
      if ((uint64_t)env < N && dead_env[env]) plan[env] = answered;
    }
    shmatari_store_release(
        &((shmatari_slot_header *)shmatari_slot(g, b))->done_count, complete);
  }
  uint64_t hole = begin; /* the next position to look for a hole at */
  for (uint64_t e = 0; e < N; e++) {
    if (!dead_env[e]) continue;
    shmatari_env_ctrl *ec = shmatari_env(g, (uint32_t)e);
    uint32_t req = shmatari_load_acquire(&ec->req_seq);
    int was_answered = plan[e] == answered;
    plan[e] = -2;
    if (req == ec->ack_seq) continue; /* no command in flight */
    if (was_answered) {
      if (ordered) shmatari_store_release64(&ec->results, consumed + 1);
      shmatari_store_release(&ec->ack_seq, req);
    } else if (ordered) {
      /* Result r of env e has position r * num_envs + e: the replacement
       * rewrites this round's row. */
      shmatari_store_release64(&ec->results, consumed);
      plan[e] = -1;
    } else {
      while (hole < end && *shmatari_row_env_id(g, hole) >= 0) hole++;
      plan[e] = hole < end ? (int64_t)hole++ : -1;
    }
  }
  while (!ordered && hole < end && *shmatari_row_env_id(g, hole) >= 0) hole++;
  if (!ordered && hole < end)
    return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                         "result position %llu was reserved but never written, "
                         "and no dead worker's env had a command in flight",
                         (unsigned long long)hole);
  return SHMATARI_OK;
}

/* Waits until every env has answered its last command (ack_seq ==
 * req_seq), waking every worker first in case a client died between posting
 * and waking. With `interruptible`, a signal ends the wait with
 * _ERR_INTERRUPTED (nothing changed; call again); else the wait goes on.
 * Returns SHMATARI_OK, _ERR_TIMEOUT (after timeout_ns; < 0: no limit), or a
 * liveness error. */
static inline int shmatari_drain(const shmatari_geom *g, int64_t timeout_ns,
                                 int interruptible, char *msg, size_t len) {
  shmatari_header *h = g->hdr;
  int64_t deadline = shmatari_deadline(timeout_ns);
  for (uint32_t w = 0; w < g->num_workers; w++) {
    shmatari_worker_ctrl *wc = shmatari_worker(g, w);
    shmatari_notify(&wc->wake_seq, &wc->sleeping);
  }
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq), busy = g->num_envs;
    for (uint32_t e = 0; e < g->num_envs && busy == g->num_envs; e++) {
      shmatari_env_ctrl *ec = shmatari_env(g, e);
      if (shmatari_load_acquire(&ec->req_seq) !=
          shmatari_load_acquire(&ec->ack_seq))
        busy = e;
    }
    if (busy == g->num_envs) return SHMATARI_OK;
    /* Workers bump main_seq only when a slot fills, so sleep in short
     * slices: this runs once per attach or drain, while the last commands
     * finish. */
    int r = shmatari_pool_check(g, 0, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(g, seen, 0, SHMATARI_SPIN_PAUSE, deadline,
                              SHMATARI_SECOND / 100, msg, len);
    if (r == SHMATARI_ERR_TIMEOUT)
      return shmatari_fail(msg, len, r, "env %u was still running a command "
                           "after %.1f s", busy,
                           (double)timeout_ns / SHMATARI_SECOND);
    if (r == SHMATARI_ERR_INTERRUPTED && !interruptible) continue;
    if (r != SHMATARI_OK) return r;
  }
}

/* Drops every result not taken, once no command is in flight
 * (shmatari_drain): with T the number of batches begun (asynchronous pools:
 * ceil(alloc_pos / batch_size); synchronous pools: the largest `results` of
 * any env), it sets alloc_pos = T * batch_size (asynchronous) or every env's
 * `results` = T (synchronous), clears every slot's done_count and rows
 * (shmatari_clear_rows) and sets consumed_batches = T. No worker touches
 * these words while no command is in flight. */
static inline void shmatari_drop_results(const shmatari_geom *g) {
  shmatari_header *h = g->hdr;
  uint64_t batches = shmatari_load_acquire64(&h->consumed_batches);
  if (g->batch_size == g->num_envs) {
    for (uint32_t e = 0; e < g->num_envs; e++)
      if (shmatari_env(g, e)->results > batches)
        batches = shmatari_env(g, e)->results;
    for (uint32_t e = 0; e < g->num_envs; e++)
      shmatari_env(g, e)->results = batches;
  } else {
    uint64_t pos = shmatari_load_acquire64(&h->alloc_pos);
    uint64_t begun = (pos + g->batch_size - 1) / g->batch_size;
    if (begun > batches) batches = begun;
    shmatari_store_release64(&h->alloc_pos, batches * g->batch_size);
  }
  for (uint64_t s = 0; s < g->ring_depth; s++) {
    shmatari_clear_rows(g, s);
    shmatari_store_release(
        &((shmatari_slot_header *)shmatari_slot(g, s))->done_count, 0);
  }
  shmatari_store_release64(&h->consumed_batches, batches);
}

/* Makes the pool consistent for a new client (the caller holds the claim):
 * waits until every command in flight is answered (shmatari_drain), then
 * drops every result not taken (shmatari_drop_results). Returns
 * SHMATARI_OK, _ERR_TIMEOUT, or a liveness error. */
static inline int shmatari_recover(const shmatari_geom *g, int64_t timeout_ns,
                                   char *msg, size_t len) {
  int r = shmatari_drain(g, timeout_ns, 0, msg, len);
  if (r != SHMATARI_OK) {
    if (r == SHMATARI_ERR_TIMEOUT)
      return shmatari_fail(msg, len, r, "a command of the previous client was "
                           "still running after %.1f s",
                           (double)timeout_ns / SHMATARI_SECOND);
    return r;
  }
  shmatari_drop_results(g);
  return SHMATARI_OK;
}

/* Everything attaching does once the segment is mapped and its header
 * checked (shmatari_geom_load, which gave g):
 * waits (up to timeout_ns) for the pool to run, claims it for pid and
 * recovers it. On failure the claim is not kept. */
static inline int shmatari_open_pool(const shmatari_geom *g, int32_t pid,
                                     int64_t timeout_ns, int32_t *holder,
                                     char *msg, size_t len) {
  shmatari_header *h = g->hdr;
  int64_t deadline = shmatari_deadline(timeout_ns);
  int r = shmatari_wait_running(g, timeout_ns, msg, len);
  if (r == SHMATARI_OK) r = shmatari_claim(h, pid, holder, msg, len);
  if (r != SHMATARI_OK) return r;
  int64_t left = deadline < 0 ? -1 : deadline - shmatari_now_ns();
  r = shmatari_recover(g, left < 0 && deadline >= 0 ? 0 : left, msg, len);
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
static inline void shmatari_post(const shmatari_geom *g,
                                 const uint32_t *env_worker,
                                 uint8_t *touched, const uint32_t *env_ids,
                                 uint32_t n, const int32_t *actions,
                                 uint32_t cmd) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t e = env_ids != NULL ? env_ids[i] : i;
    shmatari_env_ctrl *ec = shmatari_env(g, e);
    ec->cmd = cmd;
    ec->action = actions != NULL ? actions[i] : 0;
    shmatari_store_release(&ec->req_seq, ec->req_seq + 1);
    touched[env_worker[e]] = 1;
  }
  for (uint32_t w = 0; w < g->num_workers; w++) {
    if (touched[w]) {
      shmatari_worker_ctrl *wc = shmatari_worker(g, w);
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
static inline int shmatari_wait_batch(const shmatari_geom *g, uint64_t batch,
                                      int64_t spin_ns, int spin_mode,
                                      int64_t timeout_ns,
                                      int64_t *next_check_ns, char *msg,
                                      size_t len) {
  shmatari_header *h = g->hdr;
  shmatari_slot_header *slot = (shmatari_slot_header *)shmatari_slot(g, batch);
  int64_t now = shmatari_now_ns(), deadline = -1;
  if (timeout_ns >= 0) deadline = now + timeout_ns;
  if (now >= *next_check_ns) {
    *next_check_ns = now + SHMATARI_POLL_NS;
    int r = shmatari_pool_check(g, 1, msg, len);
    if (r != SHMATARI_OK) return r;
  }
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq);
    if (shmatari_load_acquire(&slot->done_count) >= g->batch_size)
      return SHMATARI_OK;
    int r = shmatari_pool_check(g, 0, msg, len);
    if (r == SHMATARI_OK)
      r = shmatari_sleep_main(g, seen, spin_ns, spin_mode, deadline,
                              SHMATARI_POLL_NS, msg, len);
    if (r == SHMATARI_ERR_TIMEOUT) {
      if (shmatari_load_acquire(&slot->done_count) >= g->batch_size)
        return SHMATARI_OK;
      return shmatari_fail(msg, len, r, "no batch within %.3f s",
                           (double)timeout_ns / SHMATARI_SECOND);
    }
    if (r != SHMATARI_OK) return r;
  }
}

/* Marks batch `batch` consumed: its slot may be written again, and its
 * rows are empty (shmatari_clear_rows). */
static inline void shmatari_consume_batch(const shmatari_geom *g,
                                          uint64_t batch) {
  shmatari_header *h = g->hdr;
  shmatari_clear_rows(g, batch);
  shmatari_store_release(
      &((shmatari_slot_header *)shmatari_slot(g, batch))->done_count, 0);
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
                               at obs + i * obs_stride, uint8, oldest frame
                               first, laid out as the pool's obs_layout says
                               (c.geom.obs_layout; shmatari_obs_shape) */
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

/* The client's state, as Gymnasium's AsyncState: which calls it accepts
 * and which call leaves it. Every refused call (SHMATARI_ERR_STATE) names the
 * state in c->error and the call that leaves it (shmatari_state_text). */
enum shmatari_client_state {
  SHMATARI_CLIENT_DETACHED = 0,    /* no pool: shmatari_attach leaves it */
  SHMATARI_CLIENT_NEEDS_RESET = 1, /* attached, not reset yet: only a reset
                                      of every env leaves it */
  SHMATARI_CLIENT_IDLE = 2,        /* no env running: send or reset */
  SHMATARI_CLIENT_PARTIAL = 3,     /* 1..batch_size-1 envs running: send to
                                      more envs; a reset of every env drops
                                      the commands in flight */
  SHMATARI_CLIENT_WAITING = 4,     /* batch_size or more envs running: wait
                                      takes a batch; send to the envs not
                                      running; a reset of every env drops the
                                      commands in flight */
  SHMATARI_CLIENT_BROKEN = 5       /* a worker failed, or the server died or
                                      is closing: only detach */
};

/* Per-env bits of shmatari_client.env_flags. */
#define SHMATARI_ENV_RUNNING 1u /* a command posted, its result not returned */
#define SHMATARI_ENV_ENDED 2u   /* autoreset_mode DISABLED: its last step ended
                                   the episode; only a reset restarts it */
#define SHMATARI_ENV_LISTED 4u  /* scratch: listed in the call being checked */

/* The calls, as refusals name them (shmatari_client.names). */
enum shmatari_call {
  SHMATARI_CALL_SEND, SHMATARI_CALL_WAIT, SHMATARI_CALL_RESET,
  SHMATARI_CALL_RESET_MASKED, SHMATARI_CALL_STEP, SHMATARI_CALL_DETACH,
  SHMATARI_CALL_ATTACH, SHMATARI_CALL_COUNT
};
static const char *const shmatari_call_names_c[SHMATARI_CALL_COUNT] = {
    "shmatari_send", "shmatari_wait", "shmatari_reset",
    "shmatari_reset_envs with a mask", "shmatari_send + shmatari_wait",
    "shmatari_detach", "shmatari_attach"};
/* The same calls in shmatari's Python API (its client sets these names). */
static const char *const shmatari_call_names_python[SHMATARI_CALL_COUNT] = {
    "send()", "recv()", "reset()", "reset(options={'reset_mask': mask})",
    "step()", "close()", "shmatari.attach()"};

typedef struct shmatari_client {
  shmatari_header *hdr; /* the mapped segment (read-only for the caller);
                           NULL when not attached */
  uint64_t map_bytes;   /* bytes shmatari_attach mapped (0: the caller
                           mapped the segment itself) */
  shmatari_geom geom;   /* the checked geometry, copied once at attach: every
                           size and offset comes from here */
  uint32_t num_actions; /* the action space's size, read once at attach */
  int32_t pid;          /* this process: the claim's holder */
  int64_t spin_ns;      /* how long a wait polls before it sleeps (0); worth
                           tens of microseconds with a core to spare */
  int spin_mode;        /* SHMATARI_SPIN_PAUSE (default) or _YIELD */
  int64_t next_check_ns; /* when a wait next checks the server's pid */
  int state;            /* enum shmatari_client_state */
  uint64_t taken;       /* batches consumed (the next batch's index) */
  int holding;          /* 1 while the last batch returned is not consumed */
  uint32_t pending;     /* envs with SHMATARI_ENV_RUNNING */
  uint8_t *env_flags;   /* per env: SHMATARI_ENV_* bits */
  uint32_t *env_worker; /* per env: the worker that owns it */
  uint8_t *touched;     /* scratch: one byte per worker */
  const char *const *names; /* call names in refusals (shmatari_call_names_c) */
  char segment[SHMATARI_NAME_MAX]; /* the segment's name */
  char error[SHMATARI_MESSAGE_BYTES]; /* the last failure, in words */
} shmatari_client;

/* The name of a client state (enum shmatari_client_state). */
static inline const char *shmatari_client_state_name(int state) {
  switch (state) {
    case SHMATARI_CLIENT_DETACHED: return "detached";
    case SHMATARI_CLIENT_NEEDS_RESET: return "needs_reset";
    case SHMATARI_CLIENT_IDLE: return "idle";
    case SHMATARI_CLIENT_PARTIAL: return "partial";
    case SHMATARI_CLIENT_WAITING: return "waiting";
    case SHMATARI_CLIENT_BROKEN: return "broken";
    default: return "unknown";
  }
}

/* Writes "; the pool ...: <the calls that leave the state>" for c's state. */
static inline void shmatari_state_text(const shmatari_client *c, char *out,
                                       size_t len) {
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  uint32_t b = c->hdr != NULL ? c->geom.batch_size : 0;
  switch (c->state) {
    case SHMATARI_CLIENT_DETACHED:
      snprintf(out, len, "; the client is detached: %s first",
               k[SHMATARI_CALL_ATTACH]);
      break;
    case SHMATARI_CLIENT_NEEDS_RESET:
      snprintf(out, len, "; the pool has not been reset since this client "
               "attached: %s (every env) leaves that state",
               k[SHMATARI_CALL_RESET]);
      break;
    case SHMATARI_CLIENT_IDLE:
      snprintf(out, len, "; the pool is idle (no env running): %s or %s "
               "leave that state", k[SHMATARI_CALL_SEND],
               k[SHMATARI_CALL_RESET]);
      break;
    case SHMATARI_CLIENT_PARTIAL:
      snprintf(out, len, "; the pool has %u env(s) running, fewer than a "
               "batch of %u: %s to more envs leaves that state, or %s, which "
               "drops the commands in flight", c->pending, b,
               k[SHMATARI_CALL_SEND], k[SHMATARI_CALL_RESET]);
      break;
    case SHMATARI_CLIENT_WAITING:
      snprintf(out, len, "; the pool has %u env(s) running and a batch of %u "
               "is due: %s leaves that state (or %s, which drops the commands "
               "in flight)", c->pending, b, k[SHMATARI_CALL_WAIT],
               k[SHMATARI_CALL_RESET]);
      break;
    default:
      snprintf(out, len, "; the pool is broken (a worker failed, or the "
               "server died or is closing): %s leaves that state",
               k[SHMATARI_CALL_DETACH]);
  }
}

/* Writes the message fmt, then the state and its way out, to c->error;
 * returns code. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int shmatari_refuse(shmatari_client *c, int code,
                                  const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(c->error, sizeof c->error, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof c->error)
    shmatari_state_text(c, c->error + n, sizeof c->error - (size_t)n);
  return code;
}

/* After a change of c->pending: IDLE, PARTIAL or WAITING. */
static inline void shmatari_settle(shmatari_client *c) {
  if (c->state == SHMATARI_CLIENT_IDLE || c->state == SHMATARI_CLIENT_PARTIAL ||
      c->state == SHMATARI_CLIENT_WAITING)
    c->state = c->pending == 0                   ? SHMATARI_CLIENT_IDLE
               : c->pending < c->geom.batch_size ? SHMATARI_CLIENT_PARTIAL
                                                 : SHMATARI_CLIENT_WAITING;
}

/* Marks the pool broken (after a liveness error): only detach leaves it. */
static inline void shmatari_client_break(shmatari_client *c) {
  if (c->hdr != NULL) c->state = SHMATARI_CLIENT_BROKEN;
}

/* Frees the client's bookkeeping (not the mapping nor the claim: see
 * shmatari_detach); c is DETACHED afterwards. Safe to call twice. */
static inline void shmatari_client_close(shmatari_client *c) {
  free(c->env_flags);
  free(c->env_worker);
  free(c->touched);
  c->hdr = NULL;
  memset(&c->geom, 0, sizeof c->geom);
  c->num_actions = 0;
  c->env_flags = NULL;
  c->env_worker = NULL;
  c->touched = NULL;
  c->pending = 0;
  c->holding = 0;
  c->state = SHMATARI_CLIENT_DETACHED;
}

/* Starts the client's bookkeeping on the segment of checked geometry g
 * (shmatari_geom_load), mapped, claimed and recovered (shmatari_attach does
 * all of it; shmatari's Python client maps the segment itself and calls
 * this). Copies *g into c->geom: nothing after reads a size or offset from
 * the segment. Reads num_actions once (written by worker 0 before the pool
 * ran), bounded by SHMATARI_MAX_ACTIONS (0 if above: every action refused).
 * c->pid, spin settings and names stay as the caller set them. Returns
 * SHMATARI_OK (state NEEDS_RESET), or _ERR_SYSTEM / _ERR_NOT_SHMATARI (c
 * left DETACHED). */
static inline int shmatari_client_open(shmatari_client *c,
                                       const shmatari_geom *g) {
  shmatari_header *h = g->hdr;
  c->geom = *g;
  c->hdr = h;
  c->num_actions = *(volatile uint32_t *)&h->num_actions;
  if (c->num_actions > SHMATARI_MAX_ACTIONS) c->num_actions = 0;
  c->env_flags = (uint8_t *)calloc(g->num_envs, 1);
  c->env_worker = (uint32_t *)calloc(g->num_envs, sizeof(uint32_t));
  c->touched = (uint8_t *)calloc(g->num_workers, 1);
  int r = SHMATARI_OK;
  if (c->env_flags == NULL || c->env_worker == NULL || c->touched == NULL)
    r = shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_SYSTEM,
                      "out of memory");
  else
    r = shmatari_env_workers(&c->geom, c->env_worker, c->error,
                             sizeof c->error);
  if (r != SHMATARI_OK) {
    shmatari_client_close(c);
    return r;
  }
  c->taken = shmatari_load_acquire64(&h->consumed_batches);
  c->pending = 0;
  c->holding = 0;
  c->state = SHMATARI_CLIENT_NEEDS_RESET;
  c->error[0] = 0;
  return SHMATARI_OK;
}

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

/* Who may attach (docs/layout.md, "Trust"): the segment MUST be a regular
 * file, not a symbolic link (it is opened with O_NOFOLLOW), owned by this
 * process's effective uid, with no group or other permission bits (shmatari
 * creates it 0600), and with every byte allocated (shmatari commits every
 * page; a sparse file would SIGBUS its reader when /dev/shm fills). There is
 * no opt-in for sharing with a group: client and server are the same user.
 * st: the file's fstat (or lstat, when the open failed). Returns SHMATARI_OK
 * or _ERR_UNTRUSTED with a message that names the owner and mode and says
 * what to do. */
static inline int shmatari_trust_file(const char *path, const struct stat *st,
                                      char *msg, size_t len) {
  if (S_ISLNK(st->st_mode))
    return shmatari_fail(msg, len, SHMATARI_ERR_UNTRUSTED,
                         "refusing %s: it is a symbolic link (owner uid %u), "
                         "and a shmatari segment is a regular file; remove "
                         "the link and start the server again",
                         path, (unsigned)st->st_uid);
  if (!S_ISREG(st->st_mode))
    return shmatari_fail(msg, len, SHMATARI_ERR_UNTRUSTED,
                         "refusing %s: it is not a shared-memory segment (not "
                         "a regular file: mode %06o, owner uid %u); remove it "
                         "and start the server again",
                         path, (unsigned)st->st_mode, (unsigned)st->st_uid);
  if (st->st_uid != geteuid())
    return shmatari_fail(msg, len, SHMATARI_ERR_UNTRUSTED,
                         "refusing %s: it belongs to uid %u, not to this "
                         "process's uid %u (mode %04o); a client attaches "
                         "only to a pool served by its own user: run the "
                         "client as the server's user",
                         path, (unsigned)st->st_uid, (unsigned)geteuid(),
                         (unsigned)(st->st_mode & 07777));
  if (st->st_mode & 077)
    return shmatari_fail(msg, len, SHMATARI_ERR_UNTRUSTED,
                         "refusing %s: its mode %04o lets other users read or "
                         "write it (shmatari creates segments 0600, owner uid "
                         "%u); remove it and start the server again",
                         path, (unsigned)(st->st_mode & 07777),
                         (unsigned)st->st_uid);
#if defined(__linux__)
  if ((uint64_t)st->st_blocks * 512 < (uint64_t)st->st_size)
    return shmatari_fail(msg, len, SHMATARI_ERR_UNTRUSTED,
                         "refusing %s: only %llu of its %llu bytes are "
                         "allocated (a sparse file; shmatari commits every "
                         "page); remove it and start the server again",
                         path, (unsigned long long)st->st_blocks * 512,
                         (unsigned long long)st->st_size);
#endif
  return SHMATARI_OK;
}

/* Releases what shmatari_attach acquired. Safe on a detached client. The
 * commands in flight stay in the pool; the next client's attach recovers
 * them. */
static inline void shmatari_detach(shmatari_client *c) {
  if (c->hdr != NULL) {
    shmatari_unclaim(c->hdr, c->pid);
    if (c->map_bytes != 0) munmap((void *)c->hdr, c->map_bytes);
  }
  shmatari_client_close(c);
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
  c->names = shmatari_call_names_c;
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
#define SHMATARI_OPEN_SEGMENT() \
  open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
#else
  char path[SHMATARI_NAME_MAX + 2];
  snprintf(path, sizeof path, "/%s", c->segment);
#define SHMATARI_OPEN_SEGMENT() shm_open(path, O_RDWR | O_NOFOLLOW, 0)
#endif
again:;
  int fd = SHMATARI_OPEN_SEGMENT();
  while (fd < 0 && errno == ENOENT && shmatari_now_ns() < deadline) {
    nanosleep(&retry, NULL);
    fd = SHMATARI_OPEN_SEGMENT();
  }
#undef SHMATARI_OPEN_SEGMENT
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_FOUND,
                           "no shmatari pool named '%s' (%s does not exist): "
                           "start one with `shmatari serve GAME --name %s`",
                           name, path, name);
#if defined(__linux__)
    struct stat lst;
    if ((err == ELOOP || err == EACCES || err == EPERM || err == ENXIO ||
         err == EISDIR) &&
        lstat(path, &lst) == 0)
      return shmatari_trust_file(path, &lst, msg, len);
#endif
    return shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM, "cannot open %s: %s",
                         path, strerror(err));
  }
  struct stat st;
  void *base = MAP_FAILED;
  int err = 0;
  if (fstat(fd, &st) != 0) {
    err = errno;
    st.st_size = 0;
  } else if ((r = shmatari_trust_file(path, &st, msg, len)) != SHMATARI_OK) {
    close(fd);
    return r;
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
  shmatari_geom g;
  r = shmatari_geom_load(base, (uint64_t)st.st_size, &g, msg, len);
  int32_t holder = 0;
  if (r == SHMATARI_OK)
    r = shmatari_open_pool(&g, c->pid, timeout_ns, &holder, msg, len);
  if (r != SHMATARI_OK) {
    munmap(base, (size_t)st.st_size); /* the claim was not kept */
    return r;
  }
  c->map_bytes = (uint64_t)st.st_size;
  r = shmatari_client_open(c, &g); /* copies g; reads num_actions once */
  if (r != SHMATARI_OK) {
    shmatari_unclaim((shmatari_header *)base, c->pid);
    munmap(base, (size_t)st.st_size);
    c->map_bytes = 0;
  }
  return r;
}

/* Observation shape of one env, as the bytes are laid out (obs_layout) and
 * as Python's client presents it: (stack_num, img_height, img_width) for
 * grayscale, (stack_num, img_height, img_width, 3) for channels-last RGB,
 * (stack_num * 3, img_height, img_width) for channels-first (planar) RGB.
 * Returns the number of dimensions (3 or 4). */
static inline int shmatari_obs_shape(const shmatari_client *c,
                                     uint32_t shape[4]) {
  const shmatari_geom *h = &c->geom;
  shape[0] = h->stack_num;
  shape[1] = h->img_height;
  shape[2] = h->img_width;
  shape[3] = h->channels;
  if (h->channels == 1) return 3;
  if (h->obs_layout == SHMATARI_OBS_CHANNELS_FIRST) {
    shape[0] = h->stack_num * h->channels;
    return 3;
  }
  return 4;
}

/* Checks a call's state: SHMATARI_OK if c->state is one of the
 * `allowed` states (a bit mask of 1 << state), else _ERR_STATE naming the
 * call, the state and its way out. */
static inline int shmatari_check_state(shmatari_client *c, int call,
                                       unsigned allowed) {
  if (allowed & (1u << c->state)) return SHMATARI_OK;
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  return shmatari_refuse(c, SHMATARI_ERR_STATE, "%s refused", k[call]);
}

#define SHMATARI_ACTIVE                                           \
  ((1u << SHMATARI_CLIENT_IDLE) | (1u << SHMATARI_CLIENT_PARTIAL) | \
   (1u << SHMATARI_CLIENT_WAITING))

/* Checks n env ids (envs 0..n-1 when env_ids is NULL; then n MUST be
 * num_envs) and n actions (NULL: none): every env in range, listed once,
 * without a bit of `forbid` (SHMATARI_ENV_*), every action in
 * 0..num_actions-1. Returns SHMATARI_OK, _ERR_INVALID or _ERR_STATE; changes
 * nothing. */
static inline int shmatari_check_envs(shmatari_client *c, int call,
                                      const int32_t *env_ids, uint32_t n,
                                      const int32_t *actions, uint8_t forbid) {
  const shmatari_geom *h = &c->geom;
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  char *msg = c->error;
  size_t len = sizeof c->error;
  if (env_ids == NULL && n != h->num_envs)
    return shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%s: %u commands for "
                         "%u envs: pass env ids to address fewer", k[call], n,
                         h->num_envs);
  int r = SHMATARI_OK;
  uint32_t i;
  for (i = 0; i < n && r == SHMATARI_OK; i++) {
    int64_t e = env_ids != NULL ? env_ids[i] : (int64_t)i;
    uint8_t fl = e >= 0 && e < (int64_t)h->num_envs ? c->env_flags[e] : 0;
    if (e < 0 || e >= (int64_t)h->num_envs)
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%s: env_ids[%u] = "
                        "%lld is out of range 0..%u", k[call], i,
                        (long long)e, h->num_envs - 1);
    else if (fl & SHMATARI_ENV_LISTED)
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%s: env %lld is "
                        "listed twice in env_ids", k[call], (long long)e);
    else if (actions != NULL &&
             (actions[i] < 0 || (uint32_t)actions[i] >= c->num_actions))
      r = shmatari_fail(msg, len, SHMATARI_ERR_INVALID, "%s: action %d at "
                        "position %u is out of range 0..%u", k[call],
                        actions[i], i, c->num_actions - 1);
    else if (fl & forbid & SHMATARI_ENV_RUNNING)
      r = shmatari_refuse(c, SHMATARI_ERR_STATE, "%s: env %lld is still "
                          "running (its result was not received)", k[call],
                          (long long)e);
    else if (fl & forbid & SHMATARI_ENV_ENDED)
      r = shmatari_refuse(c, SHMATARI_ERR_STATE, "%s: env %lld ended its "
                          "episode and autoreset_mode is 'disabled': reset it "
                          "first with %s", k[call], (long long)e,
                          k[SHMATARI_CALL_RESET_MASKED]);
    else
      c->env_flags[e] |= SHMATARI_ENV_LISTED;
  }
  for (uint32_t j = 0; j < i; j++) {
    int64_t e = env_ids != NULL ? env_ids[j] : (int64_t)j;
    if (e >= 0 && e < (int64_t)h->num_envs)
      c->env_flags[e] &= (uint8_t)~SHMATARI_ENV_LISTED;
  }
  return r;
}

/* Posts cmd to n checked envs (as shmatari_check_envs) and marks them
 * running. */
static inline void shmatari_client_post(shmatari_client *c, uint32_t cmd,
                                        const int32_t *actions,
                                        const int32_t *env_ids, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    c->env_flags[env_ids != NULL ? (uint32_t)env_ids[i] : i] |=
        SHMATARI_ENV_RUNNING;
  shmatari_post(&c->geom, c->env_worker, c->touched, (const uint32_t *)env_ids,
                n, actions, cmd);
  c->pending += n;
  shmatari_settle(c);
}

/* Steps n envs: actions[i] (0..num_actions-1) for env env_ids[i], or for env
 * i when env_ids is NULL (then n MUST be num_envs). Envs whose episode ended
 * reset instead (next-step autoreset). Refused (nothing posted) in states
 * other than IDLE, PARTIAL and WAITING, for an env still running, and under
 * autoreset_mode DISABLED for an env whose episode ended. Returns
 * SHMATARI_OK, _ERR_INVALID or _ERR_STATE. */
static inline int shmatari_send(shmatari_client *c, const int32_t *actions,
                                const int32_t *env_ids, uint32_t n) {
  if (actions == NULL)
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                         "actions is NULL");
  int r = shmatari_check_state(c, SHMATARI_CALL_SEND, SHMATARI_ACTIVE);
  if (r == SHMATARI_OK)
    r = shmatari_check_envs(c, SHMATARI_CALL_SEND, env_ids, n, actions,
                            SHMATARI_ENV_RUNNING | SHMATARI_ENV_ENDED);
  if (r == SHMATARI_OK)
    shmatari_client_post(c, SHMATARI_CMD_STEP, actions, env_ids, n);
  return r;
}

/* Consumes the batch the last wait returned (its slot may be written
 * again); nothing if none is held. */
static inline void shmatari_release_batch(shmatari_client *c) {
  if (c->holding) {
    shmatari_consume_batch(&c->geom, c->taken);
    c->taken++;
    c->holding = 0;
  }
}

/* Resets envs: every env when mask is NULL, else each env e with mask[e]
 * != 0 (num_envs bytes). cmd: SHMATARI_CMD_RESET (each env keeps its random
 * stream) or, every env only, _RESEED (re-derives each env's stream from
 * seed_words, which the caller wrote first). The first observations come
 * back through waits; afterwards every env is running.
 *
 * A reset of every env is the way back from every state but BROKEN: it
 * first drops what is in flight (the batch held, the commands posted and
 * their results not taken: shmatari_drain, shmatari_drop_results), waiting
 * up to timeout_ns (< 0: no limit) for the commands to finish.
 * A masked reset leaves running envs running: no masked env may be running;
 * the envs neither masked nor running republish their observation
 * (CMD_OBSERVE), so that every env has one result coming. Under
 * autoreset_mode DISABLED this is how ended envs restart while others run.
 *
 * Returns SHMATARI_OK; _ERR_INVALID or _ERR_STATE (nothing changed);
 * _ERR_INTERRUPTED during a drain (nothing dropped yet: call again);
 * _ERR_TIMEOUT; or a liveness error. */
static inline int shmatari_reset_envs(shmatari_client *c, uint32_t cmd,
                                      const uint8_t *mask, int64_t timeout_ns) {
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  int call = mask != NULL ? SHMATARI_CALL_RESET_MASKED : SHMATARI_CALL_RESET;
  int r = shmatari_check_state(
      c, call, SHMATARI_ACTIVE | (1u << SHMATARI_CLIENT_NEEDS_RESET));
  if (r != SHMATARI_OK) return r;
  const shmatari_geom *h = &c->geom;
  if (cmd != SHMATARI_CMD_RESET && (cmd != SHMATARI_CMD_RESEED || mask != NULL))
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                         "%s: command %u is not a reset%s", k[call], cmd,
                         cmd == SHMATARI_CMD_RESEED ? " of some envs: reseeding "
                         "re-derives every env" : "");
  if (mask == NULL) {
    shmatari_release_batch(c);
    if (c->pending != 0) {
      r = shmatari_drain(h, timeout_ns, 1, c->error, sizeof c->error);
      if (r != SHMATARI_OK) return r;
      shmatari_drop_results(h);
      c->taken = shmatari_load_acquire64(&c->hdr->consumed_batches);
    }
    memset(c->env_flags, 0, h->num_envs);
    c->pending = 0;
    c->state = SHMATARI_CLIENT_IDLE;
    shmatari_client_post(c, cmd, NULL, NULL, h->num_envs);
    return SHMATARI_OK;
  }
  uint32_t masked = 0, first_running = h->num_envs;
  for (uint32_t e = 0; e < h->num_envs; e++) {
    if (!mask[e]) continue;
    masked++;
    if ((c->env_flags[e] & SHMATARI_ENV_RUNNING) && first_running == h->num_envs)
      first_running = e;
  }
  if (masked == 0)
    return shmatari_fail(c->error, sizeof c->error, SHMATARI_ERR_INVALID,
                         "%s: the mask holds no env", k[call]);
  if (c->state == SHMATARI_CLIENT_NEEDS_RESET && masked < h->num_envs)
    return shmatari_refuse(c, SHMATARI_ERR_STATE, "%s: the first reset must "
                           "reset every env", k[call]);
  if (first_running < h->num_envs)
    return shmatari_refuse(c, SHMATARI_ERR_STATE, "%s: env %u is still "
                           "running (its result was not received)", k[call],
                           first_running);
  if (c->state == SHMATARI_CLIENT_NEEDS_RESET) c->state = SHMATARI_CLIENT_IDLE;
  for (int pass = 0; pass < 2; pass++) {
    /* pass 0: the masked envs reset; pass 1: the others republish. */
    for (uint32_t e = 0; e < h->num_envs; e++) {
      if ((mask[e] != 0) != (pass == 0) ||
          (c->env_flags[e] & SHMATARI_ENV_RUNNING))
        continue;
      c->env_flags[e] = (uint8_t)(pass == 0 ? 0 : c->env_flags[e]);
      int32_t id = (int32_t)e;
      shmatari_client_post(c, pass == 0 ? cmd : (uint32_t)SHMATARI_CMD_OBSERVE,
                           NULL, &id, 1);
    }
  }
  return SHMATARI_OK;
}

/* Resets every env (each keeps its random stream), first dropping whatever
 * is in flight; the first observations come back through shmatari_wait. */
static inline int shmatari_reset(shmatari_client *c) {
  return shmatari_reset_envs(c, SHMATARI_CMD_RESET, NULL, -1);
}

/* Would sending n more commands leave a batch to wait for? SHMATARI_OK, or
 * _ERR_STATE saying that a step (send then wait) of n envs cannot return. */
static inline int shmatari_check_step(shmatari_client *c, uint32_t n) {
  if (c->hdr == NULL || c->pending + n >= c->geom.batch_size)
    return SHMATARI_OK;
  const char *const *k = c->names != NULL ? c->names : shmatari_call_names_c;
  return shmatari_refuse(c, SHMATARI_ERR_STATE, "%s would send %u action(s) "
                         "and then wait for a batch of %u, of which only %u "
                         "would be running; nothing was sent (or make the pool "
                         "with a smaller batch_size)", k[SHMATARI_CALL_STEP], n,
                         c->geom.batch_size, c->pending + n);
}

/* Consumes the batch held, then waits up to timeout_ns (< 0: no limit) for
 * the next one (index c->taken, held until the next wait, reset or
 * shmatari_release_batch) and marks its envs no longer running (under
 * autoreset_mode DISABLED, an env whose step ended its episode ENDED).
 * Returns SHMATARI_OK; _ERR_STATE (fewer than batch_size envs running, or
 * not IDLE/PARTIAL/WAITING); _ERR_TIMEOUT or _ERR_INTERRUPTED (call again to
 * go on waiting: nothing changed); or _ERR_SERVER_DEAD / _ERR_WORKER /
 * _ERR_CLOSED, each within timeout_ns plus at most SHMATARI_POLL_NS. */
static inline int shmatari_next_batch(shmatari_client *c, int64_t timeout_ns) {
  shmatari_release_batch(c);
  int r = shmatari_check_state(c, SHMATARI_CALL_WAIT,
                               1u << SHMATARI_CLIENT_WAITING);
  if (r != SHMATARI_OK) return r;
  const shmatari_geom *h = &c->geom;
  r = shmatari_wait_batch(h, c->taken, c->spin_ns, c->spin_mode, timeout_ns,
                          &c->next_check_ns, c->error, sizeof c->error);
  if (r != SHMATARI_OK) return r;
  const char *slot = shmatari_slot(h, c->taken);
  const int32_t *env_id =
      (const int32_t *)(slot + h->slot_field_offset[SHMATARI_FIELD_ENV_ID]);
  const uint32_t *flags =
      (const uint32_t *)(slot + h->slot_field_offset[SHMATARI_FIELD_FLAGS]);
  const uint8_t *term =
      (const uint8_t *)(slot + h->slot_field_offset[SHMATARI_FIELD_TERMINATED]);
  const uint8_t *trunc =
      (const uint8_t *)(slot + h->slot_field_offset[SHMATARI_FIELD_TRUNCATED]);
  int disabled = h->autoreset_mode == SHMATARI_AUTORESET_DISABLED;
  for (uint32_t i = 0; i < h->batch_size; i++) {
    int32_t e = env_id[i];
    if (e < 0 || (uint32_t)e >= h->num_envs ||
        !(c->env_flags[e] & SHMATARI_ENV_RUNNING))
      continue;
    uint8_t fl = (uint8_t)(c->env_flags[e] & ~SHMATARI_ENV_RUNNING);
    if (disabled && !(flags[i] & SHMATARI_FLAG_OBSERVED))
      fl = (uint8_t)((fl & ~SHMATARI_ENV_ENDED) |
                     (term[i] || trunc[i] ? SHMATARI_ENV_ENDED : 0));
    c->env_flags[e] = fl;
    c->pending--;
  }
  c->holding = 1;
  shmatari_settle(c);
  return SHMATARI_OK;
}

/* Consumes the batch the last call returned, then waits up to timeout_ns
 * (< 0: no limit) for the next one and points *out at it
 * (shmatari_next_batch). Its envs may be sent commands again at once.
 * Returns what shmatari_next_batch does; after a liveness error the client
 * is BROKEN. */
static inline int shmatari_wait(shmatari_client *c, shmatari_batch *out,
                                int64_t timeout_ns) {
  int r = shmatari_next_batch(c, timeout_ns);
  if (r == SHMATARI_ERR_SERVER_DEAD || r == SHMATARI_ERR_WORKER ||
      r == SHMATARI_ERR_CLOSED)
    shmatari_client_break(c);
  if (r != SHMATARI_OK) return r;
  const shmatari_geom *h = &c->geom;
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
  return SHMATARI_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_H */
