/*
 * shmatari/pool.h -- the pool's health checks, the bounded waits on it, and the client claim.
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_POOL_H
#define SHMATARI_POOL_H

#include "shmatari/geometry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SHMATARI_OK while the owner (server) process lives
 * (shmatari_owner_alive), else _ERR_SERVER_DEAD. */
static inline int shmatari_owner_check(const shmatari_geom *g, char *msg,
                                       size_t len) {
  int32_t pid; /* read once: the pid judged is the pid named */
  uint64_t start;
  shmatari_owner_words(g, &pid, &start);
  if (shmatari_process_alive(pid, start)) return SHMATARI_OK;
  return shmatari_fail(msg, len, SHMATARI_ERR_SERVER_DEAD,
                       "the server (pid %d) that owns the pool is gone",
                       (int)pid);
}

/* Overwrites, in place, with '?' every byte of text[0..n) that a terminal
 * could act on: control bytes but tab and newline (C0, DEL), C1 controls
 * written in UTF-8 (0xC2 0x80..0x9F), the bidirectional formatting
 * characters that reorder what a terminal shows (U+061C, U+200E, U+200F,
 * U+202A..U+202E, U+2066..U+2069: the "Trojan Source" set, CVE-2021-42574),
 * and every byte that is not part of a well-formed UTF-8 sequence (Unicode's
 * table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF), so
 * that no byte 0x80..0x9F reaches an 8-bit terminal, where 0x9B starts an
 * escape sequence as ESC [ does. A worker's error text comes from the
 * segment, which any process of the user may write, and ends up in messages
 * and terminals. */
static inline void shmatari_printable(char *text, size_t n) {
  unsigned char *t = (unsigned char *)text;
  size_t i = 0;
  while (i < n) {
    unsigned char c = t[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) t[i] = '?';
      i++;
      continue;
    }
    /* the sequence's length and the range of its second byte */
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    }
    int ok = len != 0 && i + len <= n && t[i + 1] >= lo && t[i + 1] <= hi;
    for (size_t k = 2; ok && k < len; k++) ok = t[i + k] >= 0x80 && t[i + k] <= 0xbf;
    if (!ok) {
      t[i] = '?';
      i++;
      continue;
    }
    if (c == 0xc2 && t[i + 1] <= 0x9f) t[i] = t[i + 1] = '?'; /* a C1 control */
    int bidi = (c == 0xd8 && t[i + 1] == 0x9c) ||                 /* U+061C */
               (c == 0xe2 && t[i + 1] == 0x80 &&
                ((t[i + 2] >= 0x8e && t[i + 2] <= 0x8f) ||         /* U+200E..F */
                 (t[i + 2] >= 0xaa && t[i + 2] <= 0xae))) ||       /* U+202A..E */
               (c == 0xe2 && t[i + 1] == 0x81 && t[i + 2] >= 0xa6 &&
                t[i + 2] <= 0xa9);                                 /* U+2066..9 */
    if (bidi) memset(t + i, '?', len);
    i += len;
  }
}

/* The length of the UTF-8 sequence that lead byte c starts (1 for ASCII and
 * for a byte that starts none), as shmatari_printable reads it. */
static inline size_t shmatari_utf8_len(unsigned char c) {
  return c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
}

/* Copies the NUL-terminated text `in` (made printable first) into out[0..cap)
 * with "| " after each newline, so that a line of it cannot pass for a line
 * of the program that prints it (a log's "shmatari serve: ..." line); stops
 * before a sequence that would not fit whole, and always ends out with a
 * NUL (cap > 0). Returns the bytes written, the NUL not counted. */
static inline size_t shmatari_quote_lines(const char *in, char *out,
                                          size_t cap) {
  size_t o = 0;
  if (cap == 0) return 0;
  for (size_t i = 0; in[i] != 0;) {
    size_t len = shmatari_utf8_len((unsigned char)in[i]);
    size_t extra = in[i] == '\n' ? 2 : 0;
    size_t k = 1;
    while (k < len && in[i + k] != 0) k++;
    if (k < len || o + len + extra >= cap) break; /* cut, or would not fit */
    memcpy(out + o, in + i, len);
    o += len;
    i += len;
    if (extra) {
      out[o++] = '|';
      out[o++] = ' ';
    }
  }
  out[o] = 0;
  return o;
}

/* Cuts a NUL-terminated message before a UTF-8 sequence that a truncating
 * snprintf left incomplete at its end (its last bytes could be 0x80..0x9F,
 * which an 8-bit terminal reads as controls). */
static inline void shmatari_trim_utf8(char *msg) {
  size_t n = strlen(msg), start = n;
  while (start > 0 && n - start < 4 &&
         ((unsigned char)msg[start - 1] & 0xc0) == 0x80)
    start--;
  if (start > 0 && (unsigned char)msg[start - 1] >= 0xc0 &&
      n - (start - 1) < shmatari_utf8_len((unsigned char)msg[start - 1]))
    msg[start - 1] = 0;
}

/* Ends msg (NUL-terminated, in a buffer of len bytes) with " ..." where
 * its text was cut (cut), over its last whole UTF-8 sequences if it must:
 * a reader then knows the text goes on (the Python client and the server's
 * log give a worker's text whole). */
static inline void shmatari_mark_cut(char *msg, size_t len, int cut) {
  static const char mark[] = " ...";
  size_t n = strlen(msg);
  if (len < sizeof mark || !cut) return;
  size_t at = n + sizeof mark <= len ? n : len - sizeof mark;
  while (at > 0 && ((unsigned char)msg[at] & 0xc0) == 0x80) at--;
  memcpy(msg + at, mark, sizeof mark);
}

/* A served pool's worker found dead (wc, its control words) before its
 * server wrote the death into the pool's records (a worker FAILED with its
 * cause, and failed_workers above 0, then the close): waits for that, up to
 * SHMATARI_DEATH_RECORD_NS, while the owner lives and the pool is not
 * closing, so that the message gives how the worker died (a client that
 * looked first read "died" alone: a new user's pass, 2026-12-07). Not in
 * the owner's own process (a make() pool: its supervisor names the death).
 * Returns 1 once failed_workers is above 0. Ctrl-C does not cut the wait
 * short (a second at most, on the way to an error). */
static inline int shmatari_await_death_record(const shmatari_geom *g) {
  shmatari_header *hw = g->hdr;
  if (g->owner_pid <= 0 || g->owner_pid == (int32_t)getpid()) return 0;
  int64_t deadline = shmatari_now_ns() + SHMATARI_DEATH_RECORD_NS;
  for (;;) {
    if (shmatari_load_acquire(&hw->failed_workers) != 0) return 1;
    if (shmatari_load_acquire(&hw->pool_state) == SHMATARI_POOL_CLOSING)
      return shmatari_load_acquire(&hw->failed_workers) != 0;
    if (shmatari_now_ns() >= deadline || !shmatari_pid_alive(g->owner_pid))
      return 0;
    struct timespec ts = {0, 5000000}; /* 5 ms */
    nanosleep(&ts, NULL);
  }
}

/* Is the pool still able to answer? Returns SHMATARI_OK, or _ERR_WORKER (a
 * worker reported failure, or, with check_pids, its process is gone),
 * _ERR_CLOSED (pool_state is CLOSING) or, with check_pids, _ERR_SERVER_DEAD
 * (the owner's process is gone) or _ERR_WORKER (a worker's process is gone
 * or it EXITED). check_pids costs a system call or two per
 * process; waits do it once per SHMATARI_POLL_NS of sleep. */
static inline int shmatari_pool_check(const shmatari_geom *g, int check_pids,
                                      char *msg, size_t len) {
  shmatari_header *hw = g->hdr;
  uint32_t failed = shmatari_load_acquire(&hw->failed_workers);
  if (failed != 0) {
    for (uint32_t w = 0; w < g->num_workers; w++) {
      shmatari_worker_ctrl *wc = shmatari_worker(g, w);
      if (shmatari_load_acquire(&wc->state) == SHMATARI_WORKER_FAILED) {
        /* The text is copied once, then bounded: a writer cannot move its
         * end while it is measured and printed. Its lines are quoted ("| "),
         * and the words around it read once, for the message only. */
        char text[SHMATARI_ERROR_BYTES], shown[SHMATARI_MESSAGE_BYTES];
        memcpy(text, shmatari_error_text(g, w), sizeof text);
        text[sizeof text - 1] = 0;
        shmatari_printable(text, strlen(text));
        /* the quoted text's whole length: its bytes and "| " per newline */
        size_t need = 0;
        for (const char *t = text; *t != 0; t++) need += *t == '\n' ? 3 : 1;
        int cut = shmatari_quote_lines(text, shown, sizeof shown) < need;
        int32_t pid = (int32_t)shmatari_load_acquire((uint32_t *)&wc->pid);
        uint32_t begin = shmatari_load_acquire(&wc->env_begin);
        uint32_t end = shmatari_load_acquire(&wc->env_end);
        char envs[32] = "envs unknown"; /* words out of range: not printed */
        if (begin < end && end <= g->num_envs)
          snprintf(envs, sizeof envs, "envs %u..%u", begin, end - 1);
        /* the whole message's length: cut by snprintf where len is less */
        int full = snprintf(NULL, 0, "worker %u (pid %d, %s) failed: %s", w,
                            (int)pid, envs, shown);
        int r = shmatari_fail(msg, len, SHMATARI_ERR_WORKER,
                              "worker %u (pid %d, %s) failed: %s", w, (int)pid,
                              envs, shown);
        if (msg != NULL && len > 0) {
          shmatari_trim_utf8(msg);
          shmatari_mark_cut(msg, len, cut || full < 0 || (size_t)full >= len);
        }
        return r;
      }
    }
    /* No worker says so: the word was written by a process that maps the
     * segment (or a failed worker was restarted while this was read). */
    return shmatari_fail(msg, len, SHMATARI_ERR_WORKER,
                         "the pool's failed_workers word is %u but no worker is "
                         "FAILED: something other than the pool's workers wrote it",
                         failed);
  }
  if (shmatari_load_acquire(&hw->pool_state) == SHMATARI_POOL_CLOSING)
    return shmatari_fail(msg, len, SHMATARI_ERR_CLOSED,
                         "the pool's owner (pid %d: the server, or the process that made it) is closing the pool "
                         "(or another process wrote its pool_state word)",
                         (int)g->owner_pid);
  if (!check_pids) return SHMATARI_OK;
  int r = shmatari_owner_check(g, msg, len);
  if (r != SHMATARI_OK) return r;
  for (uint32_t w = 0; w < g->num_workers; w++) {
    shmatari_worker_ctrl *wc = shmatari_worker(g, w);
    uint32_t state = shmatari_load_acquire(&wc->state);
    /* Read once: the pid tested is the pid judged and named. While the
     * pool runs (not CLOSING, checked above) no worker exits on its own: an
     * EXITED worker (one sent SIGTERM) is gone as a dead one. */
    int32_t pid = (int32_t)shmatari_load_acquire((const uint32_t *)&wc->pid);
    if (state == SHMATARI_WORKER_EXITED || (pid > 0 && !shmatari_pid_alive(pid))) {
      if (shmatari_await_death_record(g)) {
        /* the record, with its cause; a failed_workers word cleared again
         * meanwhile (another writer) leaves the death reported below */
        int recorded = shmatari_pool_check(g, 0, msg, len);
        if (recorded != SHMATARI_OK) return recorded;
      }
      /* its group read once, for the words only, and shown only in range */
      uint32_t begin = shmatari_load_acquire(&wc->env_begin);
      uint32_t end = shmatari_load_acquire(&wc->env_end);
      char envs[32] = "envs unknown";
      if (begin < end && end <= g->num_envs)
        snprintf(envs, sizeof envs, "envs %u..%u", begin, end - 1);
      return shmatari_fail(msg, len, SHMATARI_ERR_WORKER, "worker %u (pid %d, %s) %s",
                           w, (int)pid, envs,
                           state == SHMATARI_WORKER_EXITED ? "exited" : "died");
    }
  }
  return SHMATARI_OK;
}

/* shmatari_pool_check with check_pids once *next_check_ns (a monotonic
 * time, then advanced by SHMATARI_POLL_NS; start it at 0) has passed: a wait
 * loop calls it each turn, so that the processes are checked every
 * SHMATARI_POLL_NS even when no slice of sleep ever times out (another
 * process that keeps bumping main_seq would otherwise hide a dead server or
 * worker for as long as it bumps). */
static inline int shmatari_pool_check_due(const shmatari_geom *g,
                                          int64_t *next_check_ns, char *msg,
                                          size_t len) {
  int64_t now = shmatari_now_ns();
  int due = now >= *next_check_ns;
  if (due) *next_check_ns = now + SHMATARI_POLL_NS;
  return shmatari_pool_check(g, due, msg, len);
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
  if (timeout_ns < 0) return -1;
  int64_t now = shmatari_now_ns();
  /* A timeout past INT64_MAX ns from now (292 years) waits without limit. */
  return timeout_ns > INT64_MAX - now ? -1 : now + timeout_ns;
}

/* Waits until the pool is RUNNING (its workers are ready), then checks
 * once that its processes live (shmatari_pool_check with check_pids: a pool
 * whose server and workers were all killed at once still reads RUNNING,
 * and an attach to it succeeded; only the first wait said the server was
 * gone). Returns SHMATARI_OK, _ERR_TIMEOUT, what shmatari_pool_check found
 * (_ERR_SERVER_DEAD, _ERR_WORKER, _ERR_CLOSED), or _ERR_NOT_SHMATARI at
 * once for a pool_state that is no state. */
static inline int shmatari_wait_running(const shmatari_geom *g,
                                        int64_t timeout_ns, char *msg,
                                        size_t len) {
  shmatari_header *h = g->hdr;
  int64_t deadline = shmatari_deadline(timeout_ns), next_check = 0;
  for (;;) {
    uint32_t seen = shmatari_load_acquire(&h->main_seq);
    uint32_t state = shmatari_load_acquire(&h->pool_state);
    if (state == SHMATARI_POOL_RUNNING) return shmatari_pool_check(g, 1, msg, len);
    /* A word no server writes: waiting could not end while it stays. */
    if (state > SHMATARI_POOL_CLOSING)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                           "the pool's pool_state word is %u, not a state "
                           "(0..2): something other than its server wrote it",
                           state);
    int r = shmatari_pool_check_due(g, &next_check, msg, len);
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
      /* (the owner's pid, read once, only chooses the message's words) */
      int32_t owner = (int32_t)shmatari_load_acquire(
          (const uint32_t *)&h->owner_pid);
      if (holder != NULL) *holder = cur;
      if (cur != pid && cur == owner)
        return shmatari_fail(msg, len, SHMATARI_ERR_BUSY,
                             "the pool already has a client: pid %d, the "
                             "process that made it, which is its client "
                             "until it closes it (a pool made with make()); "
                             "a pool for other processes to attach to is "
                             "one that `shmatari serve` runs (a server "
                             "never claims its own pool: there another "
                             "process wrote its pid into the claim word, "
                             "which the server frees within about 0.1 s)",
                             (int)cur);
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

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_POOL_H */
