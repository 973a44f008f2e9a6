/*
 * shmatari/status.h -- status codes, limits and the message helper.
 * Part of the header-only C client; include "shmatari/shmatari.h", which
 * includes every part in order (docs/architecture.md names each part).
 */
#ifndef SHMATARI_STATUS_H
#define SHMATARI_STATUS_H

#if !defined(__cplusplus) && defined(__GLIBC__) && !defined(__USE_MISC)
/* glibc's feature macros are fixed by the first system header: one included
 * before this one under -std=c11 leaves out syscall, clock_gettime, kill,
 * O_CLOEXEC..., and the build fails with a screen of implicit declarations. */
#error "shmatari.h under strict ISO C (-std=c11): include it before any system header (stdio.h, ...), or build with -std=gnu11 or -D_DEFAULT_SOURCE"
#endif
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
#if defined(__linux__)
#include <sys/syscall.h>
#endif
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
                                     geometry); from a wait: words no
                                     worker writes (shmatari_check_stall) */
  SHMATARI_ERR_ABI = -3,          /* a layout ABI major version other than
                                     SHMATARI_ABI_MAJOR */
  SHMATARI_ERR_BUSY = -4,         /* another live process is the client */
  SHMATARI_ERR_TIMEOUT = -5,      /* the timeout passed */
  SHMATARI_ERR_SERVER_DEAD = -6,  /* the owner (server) process is gone */
  SHMATARI_ERR_WORKER = -7,       /* a worker failed or died */
  SHMATARI_ERR_CLOSED = -8,       /* the pool's owner is closing it */
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
/* Longest an attach waits for a segment's header to be written (it reads
 * zeros): then the file is refused as not a shmatari segment. */
#define SHMATARI_ZERO_HEADER_NS (2 * SHMATARI_SECOND)
/* How long a client's check waits, once, for a served pool's server to
 * write the death of a worker the client found dead first into that
 * worker's record (its cause: the server looks every SHMATARI_POLL_NS). */
#define SHMATARI_DEATH_RECORD_NS SHMATARI_SECOND
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

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_STATUS_H */
