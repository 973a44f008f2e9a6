/*
 * shmatari/attach.h -- attach by name: the trust checks, the mapping, the claim, detach.
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_ATTACH_H
#define SHMATARI_ATTACH_H

#include "shmatari/client_state.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Whether `shmatari serve --name` can start a pool named `bare` (without
 * the prefix): a letter, then up to 19 letters, digits, '_' or '-' (the
 * rule of Python's shmatari.cli.NAME_RE). An attach waits for a server to
 * start a pool only under such a name: under another one (a make() pool's
 * automatic name, a name too long) it would wait its whole timeout for a
 * segment that no server can create. */
static inline int shmatari_servable_name(const char *bare) {
  size_t n = 0;
  for (; bare[n] != 0; n++) {
    char ch = bare[n];
    int letter = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
    int other = (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
    if (n == 20 || !(letter || (n > 0 && other))) return 0;
  }
  return n > 0;
}

/* Who may attach (docs/layout.md, "Trust"): the segment MUST be a regular
 * file, not a symbolic link (it is opened with O_NOFOLLOW), owned by this
 * process's effective uid, with no group or other permission bits (shmatari
 * creates it 0600), and with every byte allocated (shmatari commits every
 * page; a sparse file would SIGBUS its reader when /dev/shm fills). There is
 * no opt-in for sharing with a group: client and server are the same user.
 * st: the file's fstat (or lstat, when the open failed). Returns SHMATARI_OK
 * or _ERR_UNTRUSTED with a message that names the owner and mode and says
 * what to do. This is the one statement of the policy: shmatari's Python
 * opens segments through shmatari_trust_fd and shmatari_trust_path too. The
 * allocated-bytes test here cannot see a hole padded with blocks allocated
 * past the end of the file; shmatari_trust_fd also looks for holes. */
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

#if defined(__linux__)
#if defined(SEEK_HOLE)
#define SHMATARI_SEEK_HOLE SEEK_HOLE
#else
#define SHMATARI_SEEK_HOLE 4 /* Linux's value; glibc names it for _GNU_SOURCE */
#endif
#endif

/* The checks of shmatari_trust_file on an open segment, from one fstat of fd
 * (into *st: its size is the size the caller maps), and one more: no hole
 * anywhere in it (Linux: lseek SEEK_HOLE from 0 finds the first hole at the
 * file's size). st_blocks counts blocks allocated past the end too
 * (fallocate FALLOC_FL_KEEP_SIZE), which can pad a hole inside the file to
 * "every byte allocated". On tmpfs a page that was only fallocated and never
 * written also reads as a hole: the creator writes every page once (Python:
 * shmatari.shm.create). Leaves fd's offset at 0. Returns SHMATARI_OK,
 * _ERR_UNTRUSTED, or _ERR_SYSTEM (fstat failed: errno), with a message. */
static inline int shmatari_trust_fd(const char *path, int fd, struct stat *st,
                                    char *msg, size_t len) {
  if (fstat(fd, st) != 0)
    return shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM, "cannot stat %s: %s",
                         path, strerror(errno));
  int r = shmatari_trust_file(path, st, msg, len);
  if (r != SHMATARI_OK) return r;
#if defined(__linux__)
  if (st->st_size > 0) {
    off_t hole = lseek(fd, 0, SHMATARI_SEEK_HOLE);
    int err = errno;
    (void)lseek(fd, 0, SEEK_SET);
    /* EINVAL: a kernel without SEEK_HOLE (before 3.1); st_blocks only then. */
    if (hole < 0 && err != EINVAL)
      return shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM,
                           "cannot look for holes in %s: %s", path,
                           strerror(err));
    if (hole >= 0 && hole < st->st_size)
      return shmatari_fail(msg, len, SHMATARI_ERR_UNTRUSTED,
                           "refusing %s: it has a hole at byte %lld of its "
                           "%lld bytes (a sparse file; shmatari commits and "
                           "writes every page); remove it and start the "
                           "server again",
                           path, (long long)hole, (long long)st->st_size);
  }
#endif
  return SHMATARI_OK;
}

/* The checks of shmatari_trust_file on what is at path, from its lstat
 * (after opening it failed: a link, another user's file, a socket...).
 * Returns SHMATARI_OK (nothing wrong with it: the open failed for another
 * reason), _ERR_UNTRUSTED, or _ERR_SYSTEM (lstat failed: errno), with a
 * message. */
static inline int shmatari_trust_path(const char *path, char *msg,
                                      size_t len) {
  struct stat lst;
  if (lstat(path, &lst) != 0)
    return shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM, "cannot stat %s: %s",
                         path, strerror(errno));
  return shmatari_trust_file(path, &lst, msg, len);
}

/* Releases what shmatari_attach acquired. Safe on a detached client. The
 * commands in flight stay in the pool; the next client's attach recovers
 * them. In a process forked from the client's (getpid() != c->pid) it only
 * unmaps: the claim is the parent's, which may still be using the pool. */
static inline void shmatari_detach(shmatari_client *c) {
  if (c->hdr != NULL) {
    if ((int32_t)getpid() == c->pid) shmatari_unclaim(c->hdr, c->pid);
    if (c->map_bytes != 0) munmap((void *)c->hdr, c->map_bytes);
  }
  shmatari_client_close(c);
}

/* One open of the segment file at `path` (Linux: /dev/shm/NAME, not
 * following a link; elsewhere shm_open's /NAME), or -1 with errno. */
static inline int shmatari_segment_open_once(const char *path) {
#if defined(__linux__)
  return open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
#else
  return shm_open(path, O_RDWR | O_NOFOLLOW, 0);
#endif
}

/* shmatari_attach's open of segment `segment` (the pool `name` asked
 * for) at `path`: while there is no such file and a server may still
 * start under that name, it looks again every 20 ms until `deadline`
 * (shmatari_deadline's; -1: no limit). Returns SHMATARI_OK with the file's
 * descriptor in *out, or _ERR_NOT_FOUND, _ERR_INTERRUPTED (a signal in a
 * sleep), _ERR_UNTRUSTED or _ERR_SYSTEM with its words in msg. */
static inline int shmatari_segment_open(const char *name, const char *segment,
                                        const char *path, int64_t deadline,
                                        int *out, char *msg, size_t len) {
  const struct timespec retry = {0, 20000000};
  int fd = shmatari_segment_open_once(path);
  const int may_start = shmatari_servable_name(segment + strlen(SHMATARI_NAME_PREFIX));
  while (fd < 0 && errno == ENOENT && may_start &&
         (deadline < 0 || shmatari_now_ns() < deadline)) {
    if (nanosleep(&retry, NULL) != 0 && errno == EINTR)
      return shmatari_fail(msg, len, SHMATARI_ERR_INTERRUPTED,
                           "interrupted by a signal while waiting for %s",
                           path);
    fd = shmatari_segment_open_once(path);
  }
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT && !may_start)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_FOUND,
                           "no shmatari pool named '%s' (%s does not exist), "
                           "and no server can start one under that name: "
                           "`shmatari serve --name` takes a letter then up to "
                           "19 letters, digits, '_' or '-' (a make() pool's "
                           "automatic name is gone with its pool)",
                           name, path);
    if (err == ENOENT)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_FOUND,
                           "no shmatari pool named '%s' (%s does not exist): "
                           "start one with `shmatari serve GAME --name %s`",
                           name, path, name);
#if defined(__linux__)
    if ((err == ELOOP || err == EACCES || err == EPERM || err == ENXIO ||
         err == EISDIR) &&
        shmatari_trust_path(path, msg, len) == SHMATARI_ERR_UNTRUSTED)
      return SHMATARI_ERR_UNTRUSTED;
#endif
    return shmatari_fail(msg, len, SHMATARI_ERR_SYSTEM, "cannot open %s: %s",
                         path, strerror(err));
  }
  *out = fd;
  return SHMATARI_OK;
}

/* shmatari_attach's map of the segment file open at `fd` (closed here,
 * whatever happens): checked first (shmatari_trust_fd), then mapped whole,
 * read-write and shared. Returns SHMATARI_OK with the mapping in *out
 * and its size in *size, or _ERR_UNTRUSTED, _ERR_NOT_SHMATARI (smaller
 * than a header) or _ERR_SYSTEM with its words in msg. */
static inline int shmatari_segment_map(const char *path, int fd, void **out,
                                       off_t *size, char *msg, size_t len) {
  struct stat st;
  void *base = MAP_FAILED;
  int err = 0, r;
  if ((r = shmatari_trust_fd(path, fd, &st, msg, len)) != SHMATARI_OK) {
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
  *out = base;
  *size = st.st_size;
  return SHMATARI_OK;
}

/* shmatari_attach's wait for a written header: opens and maps segment
 * `segment` at `path` (shmatari_segment_open, shmatari_segment_map) and,
 * while its magic word is still 0 (a server publishes its name with the
 * header written, so zeros are only a make() pool's first microseconds, or
 * a file that nothing will ever fill), unmaps it and looks again every
 * 20 ms, for SHMATARI_ZERO_HEADER_NS at most and until `deadline` (-1: no
 * limit). Returns SHMATARI_OK with the mapping in *out and its size in
 * *size (a magic word read once, not 0), or an error of the open or the
 * map, _ERR_INTERRUPTED (a signal in a sleep: a trainer whose handler only
 * sets a flag would otherwise wait for good for a server that never came)
 * or _ERR_NOT_SHMATARI (the header stayed zero), with its words in msg. */
static inline int shmatari_segment_written(const char *name, const char *segment,
                                           const char *path, int64_t deadline,
                                           void **out, off_t *size, char *msg,
                                           size_t len) {
  const struct timespec retry = {0, 20000000};
  int64_t zero_since = -1;
  for (;;) {
    /* set by the calls below on success, and read only then (values given
     * all the same: gcc's -Wmaybe-uninitialized, at -O1 and up, cannot tell
     * once the calls are inlined, and -Werror builds of clients failed: a
     * review, 2026-12-06) */
    int fd = -1;
    int r = shmatari_segment_open(name, segment, path, deadline, &fd, msg, len);
    if (r != SHMATARI_OK) return r;
    void *base = NULL;
    off_t bytes = 0;
    r = shmatari_segment_map(path, fd, &base, &bytes, msg, len);
    if (r != SHMATARI_OK) return r;
    const int64_t now = shmatari_now_ns();
    /* read once: the test and the decision use this copy */
    const uint64_t magic = *(volatile const uint64_t *)&((shmatari_header *)base)->magic;
    if (magic != 0) {
      *out = base;
      *size = bytes;
      return SHMATARI_OK;
    }
    munmap(base, (size_t)bytes);
    if (zero_since < 0) zero_since = now;
    if ((deadline >= 0 && now >= deadline) ||
        now - zero_since >= SHMATARI_ZERO_HEADER_NS)
      return shmatari_fail(msg, len, SHMATARI_ERR_NOT_SHMATARI,
                           "not a shmatari segment: %s's magic word stayed 0 for "
                           "%.1f s (a server publishes its name with the header "
                           "written; an attach looks again for %.0f s at most, or "
                           "until its timeout)",
                           path, (double)(now - zero_since) / SHMATARI_SECOND,
                           (double)SHMATARI_ZERO_HEADER_NS / SHMATARI_SECOND);
    /* the header is still being written */
    if (nanosleep(&retry, NULL) != 0 && errno == EINTR)
      return shmatari_fail(msg, len, SHMATARI_ERR_INTERRUPTED,
                           "interrupted by a signal while waiting for %s",
                           path);
  }
}

/* shmatari_attach's claim of the checked pool `g` for process `pid`
 * (shmatari_open_pool) with what is left of the attach's `deadline` (-1: no
 * limit): the wait for the file counted too (the whole timeout again here
 * let an attach take up to twice it). On _ERR_TIMEOUT the message names
 * the attach's whole `timeout_ns`. Sets *next_batch (the recovery's next
 * batch) on SHMATARI_OK. */
static inline int shmatari_attach_claim(const shmatari_geom *g, int32_t pid,
                                        int64_t deadline, int64_t timeout_ns,
                                        uint64_t *next_batch, char *msg,
                                        size_t len) {
  int32_t holder = 0;
  int64_t left = deadline < 0 ? -1 : deadline - shmatari_now_ns();
  int r = shmatari_open_pool(g, pid, deadline < 0 ? -1 : (left > 0 ? left : 0),
                             &holder, next_batch, msg, len);
  if (r == SHMATARI_ERR_TIMEOUT && msg != NULL && len > 0) {
    /* its wait's words count what was left: say the whole */
    char told[SHMATARI_MESSAGE_BYTES];
    snprintf(told, sizeof told, "%s", msg);
    shmatari_fail(msg, len, r, "%s (the attach's timeout: %.1f s in all)", told,
                  (double)timeout_ns / SHMATARI_SECOND);
  }
  return r;
}

/* Attaches to pool `name` ("demo" for `shmatari serve ... --name demo`, or a
 * full segment name). Maps the segment, checks the magic and the ABI major
 * version, waits up to timeout_ns (< 0: no limit) for the pool to run,
 * claims it (one client at a time) and recovers it from any previous client.
 * Returns SHMATARI_OK, or a status with its explanation in c->error (on
 * SHMATARI_ERR_BUSY it names the current client's pid). c needs no
 * initialisation, and its contents are overwritten: attaching a client that
 * is attached loses that attach's claim and mapping (the pool then refuses
 * every client, this process's too, until it exits), so shmatari_detach it
 * first. On failure c is left detached.
 *
 * Errors: _ERR_INVALID (a bad name), _ERR_NOT_FOUND (no such segment
 * within timeout_ns), _ERR_UNTRUSTED, _ERR_SYSTEM, _ERR_NOT_SHMATARI,
 * _ERR_ABI, _ERR_TIMEOUT (the pool still starting, or a previous client's
 * commands still running), _ERR_BUSY, _ERR_SERVER_DEAD, _ERR_WORKER,
 * _ERR_CLOSED, _ERR_INTERRUPTED. */
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
   * is still zero: shmatari_segment_open and shmatari_segment_written look
   * again every 20 ms until timeout_ns has passed (< 0: no limit, as every
   * other wait of the client). */
  const int64_t deadline = shmatari_deadline(timeout_ns); /* -1: no limit */
#if defined(__linux__)
  char path[SHMATARI_NAME_MAX + 16];
  snprintf(path, sizeof path, "/dev/shm/%s", c->segment);
#else
  char path[SHMATARI_NAME_MAX + 2];
  snprintf(path, sizeof path, "/%s", c->segment);
#endif
  void *base = NULL; /* set on success, read only then (see above) */
  off_t size = 0;
  r = shmatari_segment_written(name, c->segment, path, deadline, &base, &size,
                               msg, len);
  if (r != SHMATARI_OK) return r;
  shmatari_geom g;
  uint64_t next_batch = 0;
  r = shmatari_geom_load(base, (uint64_t)size, &g, msg, len);
  if (r == SHMATARI_OK)
    r = shmatari_attach_claim(&g, c->pid, deadline, timeout_ns, &next_batch, msg,
                              len);
  if (r != SHMATARI_OK) {
    munmap(base, (size_t)size); /* the claim was not kept */
    return r;
  }
  c->map_bytes = (uint64_t)size;
  /* copies g; reads num_actions once; takes the recovery's next batch */
  r = shmatari_client_open(c, &g, next_batch);
  if (r != SHMATARI_OK) {
    shmatari_unclaim((shmatari_header *)base, c->pid);
    munmap(base, (size_t)size);
    c->map_bytes = 0;
  }
  return r;
}

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_ATTACH_H */
