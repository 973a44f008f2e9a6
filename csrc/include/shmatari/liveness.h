/*
 * shmatari/liveness.h -- the one liveness rule: a process by pid and start time (/proc).
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_LIVENESS_H
#define SHMATARI_LIVENESS_H

#include "shmatari/status.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * belongs to another user counts as alive. On Linux the pid must lead its
 * thread group (tgkill(pid, pid, 0)): kill(2) and /proc/<id> take a thread's
 * id as well, and a claim word rewritten to a thread of a live server (its
 * mappings are the server's) kept every client out for as long as the
 * server ran (an attacker's pass, 2026-12-06). */
static inline int shmatari_process_alive(int32_t pid, uint64_t start) {
  if (pid <= 0) return 0;
#if defined(__linux__) && defined(SYS_tgkill)
  if (syscall(SYS_tgkill, (long)pid, (long)pid, 0L) != 0 && errno == ESRCH) return 0;
#else
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
#endif
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

/* The owner's words, as the geometry g copied them from the header it
 * checked (shmatari_geom_load, at attach): owner_pid, and owner_start in a
 * pool of ABI 1.2 or later (before, a reserved word: 0). Not read from the
 * segment: until 2026-12-05 they and abi_minor were read from the live
 * header at every check, and a rewrite of abi_minor to 1 or of owner_start
 * to 0 let a process under a dead owner's reused pid pass for it (an
 * attacker's pass, and a review of its first fix). */
static inline void shmatari_owner_words(const shmatari_geom *g, int32_t *pid,
                                        uint64_t *start) {
  *pid = g->owner_pid;
  *start = g->owner_start;
}

/* 1 if the pool's owner lives: (owner_pid, owner_start) by the rule of
 * shmatari_process_alive. A pool of ABI 1.0 or 1.1 has no owner_start (a
 * reserved word), and is judged by owner_pid alone. */
static inline int shmatari_owner_alive(const shmatari_geom *g) {
  int32_t pid;
  uint64_t start;
  shmatari_owner_words(g, &pid, &start);
  return shmatari_process_alive(pid, start);
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_LIVENESS_H */
